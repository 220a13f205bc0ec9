"""Neighbour serving: a key with no certificate takes its nearest certified neighbour's setting, screened first."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from nbx import autotune
from nbx.autotune import keys, neighbours, serving, store, sweep, verdicts
from nbx.autotune.candidates import Tunable
from nbx.autotune.serving import Tuner
from nbx.autotune.store import CertificateStore, Entry
from nbx.core.errors import ArgumentError, KeyNotCertified, LaunchKeyError, ScreenRefusal

LINE = ("[autotune] certified: {} key(s) served without a sweep, {} swept at runtime (kept locally), {} from the "
        "local cache, {} from a neighbour")
WRONG = 100  # this block writes x * 2 + 1: it fails the oracle on every launch
SCREENS = Path("nvidia/nvidia-h200-140gb/triton-3.6.0-cuda/screens/fake_double.json")


class Workload:
    """out = 2 x, except under the wrong block; each instance the screen ran on is kept in `seen`."""

    def __init__(self, rep, seen):
        n, dtype = rep["n"], rep["dtype"]
        seen.append((n, dtype.name))
        self.out_dtype, self.out_shape = dtype, (n,)
        self.x = (np.arange(n) % 31 - 15).astype(dtype.host)
        self.out = np.empty(n, dtype.host)

    def fill_output(self, value):
        self.out[...] = value

    def launch(self, setting):
        self.out[...] = self.x * 2 + (1 if setting["block"] == WRONG else 0)

    def output_rows(self, rows):
        return self.out[rows].copy()

    def reference_rows(self, rows):
        return self.x[rows].astype(np.float64) * 2


class Bench:
    def __init__(self, fakes, facts, tmp_path):
        self.fakes, self.facts, self.tmp = fakes, facts, tmp_path
        self.seen, self.timers = [], 0
        self.tunable = Tunable("fake_double", params={"block": (64, 128, WRONG), "num_warps": (1, 2)},
                               key={"n": "elements", "dtype": "dtype"}, default_from="tiles.elementwise",
                               workload=lambda rep, device: Workload(rep, self.seen))
        clock = fakes.Clock()
        template = fakes.make_tunable(clock, name="fake_double", default_from="tiles.elementwise")
        key = keys.form(template.name, template.key, facts, n=1000, dtype="float32")
        self.proof = sweep.prove(template, key, facts, None, fakes.FakeTimer(clock), warmup=0, repeats=1).proof

    def certify(self, n: int, block: int, dtype: str = "float32", identity=None) -> str:
        """Write a certified entry for the key of n elements with this block (its proof a real one's)."""
        identity = identity or self.fakes.IDENTITY
        key = str(keys.form(self.tunable.name, self.tunable.key, self.facts, n=n, dtype=dtype))
        path = store.path_in(self.tmp / "certs" / "nvidia", identity, self.tunable.name)
        store.write(path, store.header(self.tunable, identity),
                    {key: Entry({"block": block, "num_warps": 1}, dict(self.proof, dtype=dtype))}, self.tunable)
        return key

    def timer(self):
        self.timers += 1
        raise AssertionError("a neighbour is never timed")

    def tuner(self) -> Tuner:
        return Tuner(self.facts, self.fakes.IDENTITY, certificates=CertificateStore([self.tmp / "certs"], False),
                     cache=CertificateStore([self.tmp / "cache"], False), timer_factory=self.timer, warmup=0,
                     repeats=1)


@pytest.fixture
def bench(fakes, hopper, tmp_path):
    return Bench(fakes, hopper, tmp_path)


def test_a_key_without_a_certificate_is_served_its_nearest_certified_neighbours_setting_screened_never_timed(bench):
    bench.certify(1000, 64)            # n=65536: one rung below the launch's class
    bench.certify(20_000_000, 128)     # n=68719476736: three rungs above
    bench.certify(500_000, WRONG, "float16")  # the launch's own class in another dtype: no neighbour
    got = bench.tuner().setting(bench.tunable, n=100_000, dtype="float32")
    assert dict(got) == {"block": 64, "num_warps": 1}
    assert bench.seen == [(65552, "float32")]   # screened once, on the key's smallest launch (a multiple of 16)
    kept = sorted(p.relative_to(bench.tmp / "cache") for p in (bench.tmp / "cache").rglob("*.json"))
    assert bench.timers == 0 and kept == [SCREENS]   # no setting kept locally: only the screen's verdict
    assert autotune.report_line() == LINE.format(0, 0, 0, 1)
    assert serving.report().from_neighbour == {("fake_double", "n=1048576,dtype=f32"): "n=65536,dtype=f32"}


def test_at_equal_rungs_the_neighbour_above_serves(bench):
    bench.certify(1000, 64)          # n=65536, one rung below 1 Mi
    bench.certify(5_000_000, 128)    # n=8388608, one rung above
    assert dict(bench.tuner().setting(bench.tunable, n=100_000, dtype="float32"))["block"] == 128


def test_a_neighbour_refused_by_the_oracle_is_never_served_and_the_next_one_is(bench):
    bench.certify(1000, WRONG)         # nearest, but wrong
    bench.certify(20_000_000, 128)
    got = bench.tuner().setting(bench.tunable, n=100_000, dtype="float32")
    assert dict(got) == {"block": 128, "num_warps": 1}
    assert bench.seen == [(65552, "float32")]  # one workload, both settings screened on it
    assert serving.report().lines() == [
        LINE.format(0, 0, 0, 1),
        "[autotune] 1 neighbour setting(s) failed a key's screen against the float64 oracle and were not served"]


def test_a_key_no_neighbour_serves_takes_the_device_files_tile_screened_and_says_so(bench):
    bench.certify(1000, WRONG)
    got = bench.tuner().setting(bench.tunable, n=100_000, dtype="float32")
    assert dict(got) == {"block": 1024, "num_warps": 4}   # tiles.elementwise of hopper.yml
    assert serving.report().lines()[:2] == [
        LINE.format(0, 0, 0, 0),
        "[autotune] 1 key(s) had no certified neighbour that passed their screen and took the device file's tile, "
        "screened alike"]


def test_a_device_tile_that_fails_the_screen_is_refused_by_name(bench, fakes, hopper):
    bench.tunable = Tunable("fake_double", params={"block": (64, WRONG), "num_warps": (1, 4)},
                            key={"n": "elements", "dtype": "dtype"}, default_from="tiles.elementwise",
                            workload=lambda rep, device: Workload(rep, bench.seen))
    tuner = Tuner(fakes.Overlay(hopper, tiles__elementwise={"block": WRONG, "num_warps": 4}), fakes.IDENTITY,
                  certificates=CertificateStore([bench.tmp / "certs"], False),
                  cache=CertificateStore([bench.tmp / "cache"], False), timer_factory=bench.timer)
    with pytest.raises(ScreenRefusal, match=r"no certified neighbour passed its screen and the device file's tile "
                                            r"\{'block': 100, 'num_warps': 4\} fails it too"):
        tuner.setting(bench.tunable, n=100, dtype="float32")


def test_certified_only_mode_refuses_a_key_a_neighbour_could_serve(bench):
    bench.certify(1000, 64)
    autotune.require_certified()
    with pytest.raises(KeyNotCertified, match=r"no certified setting for key 'n=1048576,dtype=f32'"):
        bench.tuner().setting(bench.tunable, n=100_000, dtype="float32")
    assert bench.seen == [] and autotune.report_line() == LINE.format(0, 0, 0, 0)


def test_a_sweep_runs_only_when_asked(bench, fakes, hopper, tmp_path):
    clock = fakes.Clock()
    tunable = fakes.make_tunable(clock, default_from="tiles.elementwise")
    timers = []
    tuner = Tuner(hopper, fakes.IDENTITY, certificates=CertificateStore([tmp_path / "none"], False),
                  cache=CertificateStore([tmp_path / "cache"], False),
                  timer_factory=lambda: timers.append(1) or fakes.FakeTimer(clock), warmup=0, repeats=1)
    with pytest.raises(ScreenRefusal):  # no neighbour; the fake's timing table has no 1024 block: its tile fails
        tuner.setting(tunable, n=1000, dtype="float32")
    assert timers == []
    autotune.sweep_uncertified()
    assert dict(tuner.setting(tunable, n=1000, dtype="float32")) == {"block": 128, "num_warps": 1}
    assert timers == [1] and autotune.report_line() == LINE.format(0, 1, 0, 0)


def test_launches_made_inside_a_screen_take_the_device_files_tile_instead_of_being_screened_in_turn(bench):
    """A screen's inputs are made by launches (an upload's fill, a copy) whose own keys may be uncertified:
    screening those too would recurse key after key (seen on the H200 with nbx.kernels' fill_)."""
    bench.certify(1000, 64)
    tuner, nested = bench.tuner(), []

    def workload(rep, device):  # making the inputs launches another uncertified key of the same kernel
        nested.append(dict(tuner.setting(bench.tunable, n=3_000_000_000, dtype="float32")))
        return Workload(rep, bench.seen)

    bench.tunable = Tunable("fake_double", params=bench.tunable.params, key=bench.tunable.key,
                            default_from="tiles.elementwise", workload=workload)
    got = tuner.setting(bench.tunable, n=100_000, dtype="float32")
    assert dict(got) == {"block": 64, "num_warps": 1}
    assert nested == [{"block": 1024, "num_warps": 4}]   # tiles.elementwise of hopper.yml, unscreened
    assert bench.seen == [(65552, "float32")] and bench.timers == 0


def _row_tunable(weights):
    return Tunable("fake_rows", params={"block": (64, 128)}, key={"width": "exact", "elements": "elements",
                                                                  "dtype": "dtype"}, weights=weights)


def test_the_neighbour_distance_weighs_each_size_field_as_its_family_declares(hopper):
    """A row kernel's tile follows the row's width: weighted so, the same width 3 element-count octaves away
    serves before a width 2 octaves away at the same count (issue 16: the second lost 44 % on the H200)."""
    certified = {"width=4096,elements=1048576,dtype=f32": Entry({"block": 64}, {}),
                 "width=16384,elements=8388608,dtype=f32": Entry({"block": 128}, {})}
    for weights, nearest in (({"width": 4, "elements": 1}, "width=16384,elements=8388608,dtype=f32"),
                             (None, "width=4096,elements=1048576,dtype=f32")):
        tunable = _row_tunable(weights)
        key = keys.form(tunable.name, tunable.key, hopper, width=16384, elements=1 << 20, dtype="float32")
        assert neighbours.ranked(tunable, key, certified, hopper)[0][0] == nearest


@pytest.mark.parametrize("weights, match", [({"dtype": 2}, "not a size field"), ({"width": 0}, "a number above 0"),
                                            ({"width": True}, "a number above 0")])
def test_a_weight_on_no_size_field_or_not_above_zero_is_refused_by_name(weights, match):
    with pytest.raises(ArgumentError, match=match):
        _row_tunable(weights)


def _later_process(bench):
    """What a later process of the same machine sees: nothing served yet, the same folders on disk."""
    serving.reset()
    bench.seen.clear()
    return bench.tuner()


def test_a_later_process_reads_the_kept_screen_verdicts_instead_of_screening_again(bench):
    bench.certify(1000, WRONG)          # nearest, fails its screen
    bench.certify(20_000_000, 128)      # passes
    assert dict(bench.tuner().setting(bench.tunable, n=100_000, dtype="float32"))["block"] == 128
    assert bench.seen == [(65552, "float32")]
    tuner = _later_process(bench)
    assert dict(tuner.setting(bench.tunable, n=100_000, dtype="float32"))["block"] == 128
    assert bench.seen == [] and tuner._verdicts()[0].read == 2      # the failure and the pass, both read
    assert serving.report().lines() == [
        LINE.format(0, 0, 0, 1),
        "[autotune] 1 neighbour setting(s) failed a key's screen against the float64 oracle and were not served"]


def test_a_kept_verdict_is_not_read_for_another_setting_compiler_or_source(bench, fakes, monkeypatch):
    bench.certify(1000, 64)
    bench.tuner().setting(bench.tunable, n=100_000, dtype="float32")
    bench.certify(1000, 128)            # the neighbour's certified setting changed: screened again
    tuner = _later_process(bench)
    assert dict(tuner.setting(bench.tunable, n=100_000, dtype="float32"))["block"] == 128
    assert bench.seen == [(65552, "float32")]
    other = fakes.IDENTITY.__class__("nvidia", "nvidia-h200-140gb", "triton-9.9.9-cuda")
    bench.certify(1000, 128, identity=other)
    tuner = _later_process(bench)
    tuner._identity = other             # another compiler, the same certified setting: screened again
    assert dict(tuner.setting(bench.tunable, n=100_000, dtype="float32"))["block"] == 128
    assert bench.seen == [(65552, "float32")] and serving.report().neighbour == 1
    monkeypatch.setattr(verdicts, "_fingerprint", "other-sources")   # the kernels' code changed
    tuner = _later_process(bench)
    tuner._identity = other
    tuner.setting(bench.tunable, n=100_000, dtype="float32")
    assert bench.seen == [(65552, "float32")]
    tuner = _later_process(bench)       # the same sources and compiler again: read, not screened
    tuner._identity = other
    tuner.setting(bench.tunable, n=100_000, dtype="float32")
    assert bench.seen == []


def test_an_unreadable_verdicts_file_is_screened_again_and_rewritten(bench):
    bench.certify(1000, 64)
    bench.tuner().setting(bench.tunable, n=100_000, dtype="float32")
    path = bench.tmp / "cache" / SCREENS
    path.write_text("{ not json")
    tuner = _later_process(bench)
    assert dict(tuner.setting(bench.tunable, n=100_000, dtype="float32"))["block"] == 64
    assert bench.seen == [(65552, "float32")]
    assert json.loads(path.read_text())["kind"] == "nbx-autotune-screen-verdicts"


def test_a_tunable_screened_at_launch_is_screened_on_the_launch_itself_so_its_compile_is_the_launchs(bench):
    """screen_at_launch: the screen runs the launch's own sizes (keys.launched), not the key's smallest launch,
    while the launch reads at most autotune.neighbour_screen_max_bytes (4 MiB on hopper.yml); the verdict is
    kept under those sizes."""
    bench.tunable = Tunable("fake_double", params=bench.tunable.params, key=bench.tunable.key,
                            default_from="tiles.elementwise", workload=bench.tunable.workload, screen_at_launch="n")
    bench.certify(1000, 64)
    assert dict(bench.tuner().setting(bench.tunable, n=100_003, dtype="float32"))["block"] == 64
    assert bench.seen == [(100_003, "float32")]          # the launch's own size (smallest: 65537)
    kept = json.loads((bench.tmp / "cache" / SCREENS).read_text())
    assert "n=1048576,dtype=f32 at n=100003" in json.dumps(kept)
    bench.seen.clear()
    big = 2_000_000                                      # 8 MB of float32: above the bound, the smallest launch
    bench.tuner().setting(bench.tunable, n=big, dtype="float32")
    assert bench.seen == [(keys.smallest(keys.form("fake_double", bench.tunable.key, bench.facts, n=big,
                                                   dtype="float32"), bench.tunable.key, bench.facts,
                                         like={"n": big})["n"], "float32")]


def test_the_launch_as_its_keys_instance_takes_the_observed_sizes_and_a_pow2_fields_own_size(hopper):
    spec = {"width": "pow2", "elements": "elements", "dtype": "dtype", "strided": "flag"}
    key = keys.form("rows", spec, hopper, width=1000, elements=3000, dtype="bfloat16", strided=False)
    assert str(key).startswith("width=1024,") and key.observed == {"width": 1000, "elements": 3000}
    own = keys.launched(key, spec)
    assert (own["width"], own["elements"], own["dtype"].name, own["strided"]) == (1000, 3000, "bfloat16", False)
    again = keys.parse("rows", spec, str(key), hopper, observed=key.observed)   # as a keys file gives it back
    assert again == key and keys.launched(again, spec) == own
    assert keys.launched(keys.parse("rows", spec, str(key), hopper), spec) is None   # nothing observed
    with pytest.raises(LaunchKeyError, match="not in its class 1024"):
        keys.parse("rows", spec, str(key), hopper, observed={"width": 1500, "elements": 3000})
    with pytest.raises(LaunchKeyError, match="is a power of two"):
        keys.parse("rows", spec, "width=1000,elements=65536,dtype=bf16,strided=0", hopper)
    with pytest.raises(ArgumentError, match="screen_at_launch"):
        Tunable("rows", params={"num_warps": (4,)}, key=spec, screen_at_launch="width")


ROWS_RUN = ((3, 1000), (24, 5120))   # widths no power of two: the key holds 1024 and 8192, the launch its own


def _softmax_rows(device):
    """The run: a float32 softmax of each ROWS_RUN shape on device, with the inputs (to check outputs against)."""
    import nbx.core as nbx
    ran = []
    for rows, cols in ROWS_RUN:
        x = nbx.asarray((np.sin(0.1 * np.arange(rows * cols)) * 3).reshape(rows, cols).astype(np.float32),
                        device=device)
        ran.append((x, nbx.softmax(x, dim=-1)))
    return ran


def test_a_warmup_of_a_recorded_run_keeps_the_verdicts_that_run_then_reads_on_rows_of_no_power_of_two(
        bench, hopper, tmp_path, monkeypatch):
    """`nbx autotune record` of a softmax on (3, 1000) and (24, 5120) rows, `nbx warmup --keys` of that file
    (warmup.run_record), then the same run in a later process: every neighbour's verdict is read from what the
    warm-up kept, none screened again (the report's "screen verdicts N read, 0 kept"), and the outputs are the
    oracle's. The warm-up screens the launch the run makes (its width, not the key's power of two)."""
    from nbx.autotune import records, warmup
    from nbx.autotune.candidates import declared
    from nbx.core.device import as_device
    from nbx.core.device import discover_plugins
    from nbx.core.reference import deviation, oracle
    from nbx.kernels import launch
    from nbx.kernels.softmax.tuning import SOFTMAX
    discover_plugins()
    device = as_device("interp")
    path = store.path_in(tmp_path / "certs" / "nvidia", bench.fakes.IDENTITY, "softmax")
    neighbours_of = {f"width={w},elements={e},dtype=f32,strided=0": Entry({"num_warps": 8, "max_block_n": 8192},
                                                                        dict(bench.proof, dtype="float32"))
                     for w, e in ((1024, 1048576), (8192, 8388608))}   # the keys' widths, other element classes
    store.write(path, store.header(SOFTMAX, bench.fakes.IDENTITY), neighbours_of, SOFTMAX)

    def process():
        serving.reset()
        tuner = bench.tuner()
        tuner.device = device
        serving.install(device, tuner)
        return tuner

    monkeypatch.setenv("NBX_AUTOTUNE_RECORD", str(tmp_path / "keys.json"))   # what `nbx autotune record` sets
    monkeypatch.setenv("NBX_AUTOTUNE_NO_SWEEP", "1")
    process()
    _softmax_rows(device)
    serving._flush_recorder()
    monkeypatch.delenv("NBX_AUTOTUNE_RECORD")
    monkeypatch.delenv("NBX_AUTOTUNE_NO_SWEEP")
    recorded = records.load(tmp_path / "keys.json")
    assert sorted(r.key for r in recorded) == ["width=1024,elements=65536,dtype=f32,strided=0",
                                               "width=8192,elements=1048576,dtype=f32,strided=0"]

    ahead = process()                                                        # nbx warmup --keys keys.json
    for record in recorded:
        warmup.run_record(record, declared(), hopper, device)
    assert ahead._verdicts()[0].written == 2 and serving.report().neighbour == 2

    later = process()                                                        # the run again, a later process
    for x, out in _softmax_rows(device):
        expected = oracle("softmax", x, -1)
        assert deviation(out.numpy(), expected) <= launch.screen_tolerance(out.dtype, device)
    kept = later._verdicts()[0]
    assert (kept.read, kept.written, serving.report().neighbour) == (2, 0, 2)   # read, 0 kept: nothing screened
