"""Serving: certified without a sweep, swept once when asked and kept locally, certified-only mode, the run report."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from nbx import autotune
from nbx.autotune import keys, records, serving, store, sweep
from nbx.autotune.serving import AutotuneWarning, Tuner
from nbx.autotune.store import CertificateStore
from nbx.core import device_files
from nbx.core.errors import KeyNotCertified, LaunchKeyError

LINE = ("[autotune] certified: {} key(s) served without a sweep, {} swept at runtime (kept locally), {} from the "
        "local cache, {} from a neighbour")


class Setup:
    def __init__(self, fakes, facts, tmp_path, witness_ms=lambda launches: 1.0):
        self.fakes, self.facts, self.tmp = fakes, facts, tmp_path
        self.clock = fakes.Clock()
        self.tunable = fakes.make_tunable(self.clock, default_from="tiles.elementwise")
        self.timers = 0
        self.witness_ms = witness_ms

    def timer(self):
        self.timers += 1
        return self.fakes.FakeTimer(self.clock, self.witness_ms)

    def tuner(self) -> Tuner:
        return Tuner(self.facts, self.fakes.IDENTITY, certificates=CertificateStore([self.tmp / "certs"], False),
                     cache=CertificateStore([self.tmp / "cache"], False), timer_factory=self.timer, warmup=0,
                     repeats=1)

    def certify(self, n: int, tree: str = "certs"):
        key = keys.form(self.tunable.name, self.tunable.key, self.facts, n=n, dtype="float32")
        entry = sweep.prove(self.tunable, key, self.facts, None, self.fakes.FakeTimer(self.clock), warmup=0, repeats=1)
        path = store.path_in(self.tmp / tree / "nvidia", self.fakes.IDENTITY, self.tunable.name)
        store.write(path, store.header(self.tunable, self.fakes.IDENTITY), {str(key): entry}, self.tunable)
        self.clock.launches = 0
        return str(key), path


@pytest.fixture
def setup(fakes, hopper, tmp_path):
    return Setup(fakes, hopper, tmp_path)


def test_a_certified_key_is_served_without_a_sweep_and_counted_once(setup):
    setup.certify(1000)
    tuner = setup.tuner()
    for n in (1000, 2, 65536):
        assert dict(tuner.setting(setup.tunable, n=n, dtype="float32")) == {"block": 128, "num_warps": 1}
    assert setup.timers == 0 and setup.clock.launches == 0
    assert autotune.report_line() == LINE.format(1, 0, 0, 0)


def test_a_key_without_a_certificate_is_swept_once_when_asked_kept_locally_and_read_back_by_the_next_run(setup):
    autotune.sweep_uncertified()
    tuner = setup.tuner()
    first = tuner.setting(setup.tunable, n=5000, dtype="float32")
    assert dict(first) == {"block": 128, "num_warps": 1}
    launches = setup.clock.launches
    assert launches > 0 and setup.timers == 1
    assert tuner.setting(setup.tunable, n=6000, dtype="float32") is first and setup.clock.launches == launches
    assert autotune.report_line() == LINE.format(0, 1, 0, 0)
    kept = setup.tmp / "cache" / "nvidia" / "nvidia-h200-140gb" / "triton-3.6.0-cuda" / "fake_scale.json"
    assert list(store.read(kept, setup.tunable).entries) == ["n=65536,dtype=f32"]

    serving.reset()  # a new run
    again = setup.tuner()
    assert dict(again.setting(setup.tunable, n=5000, dtype="float32")) == {"block": 128, "num_warps": 1}
    assert setup.clock.launches == launches and setup.timers == 1
    assert autotune.report_line() == LINE.format(0, 0, 1, 0)


def test_the_local_cache_lies_in_the_user_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("NBX_CACHE_DIR", str(tmp_path / "c"))
    assert serving.cache_dir() == tmp_path / "c" / "autotune"
    monkeypatch.delenv("NBX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert serving.cache_dir() == tmp_path / "xdg" / "nbx" / "autotune"


def test_certified_only_mode_refuses_a_missing_key_naming_kernel_key_and_the_census(setup, monkeypatch):
    setup.certify(1000)
    monkeypatch.setenv("NBX_AUTOTUNE_CERTIFIED_ONLY", "1")
    tuner = setup.tuner()
    assert dict(tuner.setting(setup.tunable, n=1000, dtype="float32")) == {"block": 128, "num_warps": 1}
    with pytest.raises(KeyNotCertified, match=r"kernel 'fake_scale' has no certified setting for key "
                                              r"'n=1048576,dtype=f32' on nvidia-h200-140gb under triton-3.6.0-cuda "
                                              r"\(certified-only mode; no census loaded\); certify it: nbx autotune "
                                              r"certify --device-class nvidia-h200-140gb") as caught:
        tuner.setting(setup.tunable, n=100_000, dtype="float32")
    assert (caught.value.kernel, caught.value.key, caught.value.census_knew) == (
        "fake_scale", "n=1048576,dtype=f32", None)
    assert setup.timers == 0

    census = [records.KeyRecord("fake_scale", "n=1048576,dtype=f32", "nvidia/hopper")]
    assert autotune.load_census(census) == 1
    with pytest.raises(KeyNotCertified, match=r"certified-only mode; the census listed this key") as caught:
        tuner.setting(setup.tunable, n=100_000, dtype="float32")
    assert caught.value.census_knew is True
    with pytest.raises(KeyNotCertified, match=r"the census did not list this key") as caught:
        tuner.setting(setup.tunable, n=100_000, dtype="float16")
    assert caught.value.census_knew is False and setup.timers == 0


def test_certified_only_mode_by_api_does_not_serve_the_local_cache(setup):
    setup.certify(5000, tree="cache")  # a setting kept locally, not certified
    autotune.require_certified()
    assert autotune.certified_only()
    with pytest.raises(KeyNotCertified, match=r"no certified setting for key 'n=65536,dtype=f32'"):
        setup.tuner().setting(setup.tunable, n=5000, dtype="float32")
    autotune.require_certified(False)
    assert dict(setup.tuner().setting(setup.tunable, n=5000, dtype="float32")) == {"block": 128, "num_warps": 1}
    assert autotune.report_line() == LINE.format(0, 0, 1, 0)


def test_a_key_that_cannot_be_formed_is_refused_by_name_and_never_sweeps(setup):
    tuner = setup.tuner()
    with pytest.raises(LaunchKeyError, match=r"key field 'n' is a size, an integer >= 0; got 1.5"):
        tuner.setting(setup.tunable, n=1.5, dtype="float32")
    autotune.require_certified()
    with pytest.raises(KeyNotCertified, match=r"kernel 'fake_scale': the launch key cannot be formed \(kernel "
                                              r"'fake_scale': key fields \['n', 'dtype'\]; missing \['dtype'\].*in "
                                              r"certified-only mode no sweep may run instead") as caught:
        tuner.setting(setup.tunable, n=10)
    assert caught.value.key is None and caught.value.kernel == "fake_scale"
    assert setup.timers == 0 and setup.clock.launches == 0


def test_a_refused_certificate_is_not_served_and_the_report_names_it(setup):
    _, path = setup.certify(1000)
    doc = json.loads(path.read_text())
    doc["parameters"] = ["BLOCK_HW", "num_warps"]
    for entry in doc["entries"].values():
        entry["setting"]["BLOCK_HW"] = entry["setting"].pop("block")
    path.write_text(json.dumps(doc))
    autotune.sweep_uncertified()
    with pytest.warns(AutotuneWarning, match=r"nbx.autotune refused .*fake_scale.json: names parameter\(s\) "
                                             r"\['BLOCK_HW'\] that kernel 'fake_scale' does not have"):
        assert dict(setup.tuner().setting(setup.tunable, n=1000, dtype="float32")) == {"block": 128, "num_warps": 1}
    assert setup.timers == 1  # swept: the refused file served nothing
    lines = serving.report().lines()
    assert lines[0] == LINE.format(0, 1, 0, 0)
    assert lines[1].startswith(f"[autotune] refused {path}: names parameter(s) ['BLOCK_HW']")


def test_a_runtime_sweep_under_a_drifting_witness_serves_its_screened_winner_without_keeping_it(fakes, hopper,
                                                                                                tmp_path):
    setup = Setup(fakes, hopper, tmp_path, witness_ms=lambda launches: 1.0 + 0.1 * launches)
    autotune.sweep_uncertified()
    with pytest.warns(AutotuneWarning, match=r"timed under a drifting witness .* is not kept"):
        got = setup.tuner().setting(setup.tunable, n=1000, dtype="float32")
    assert got["block"] != fakes.WRONG_BLOCK
    assert not (tmp_path / "cache").exists()
    assert serving.report().lines()[:2] == [
        LINE.format(0, 1, 0, 0),
        "[autotune] 1 of the swept key(s) were timed under a drifting witness: served this run, not kept"]


def test_a_recording_run_lists_an_uncertified_key_with_the_device_files_tile_instead_of_sweeping(setup,
                                                                                               monkeypatch):
    monkeypatch.setenv("NBX_AUTOTUNE_NO_SWEEP", "1")
    assert dict(setup.tuner().setting(setup.tunable, n=1000, dtype="float32")) == {"block": 1024, "num_warps": 4}
    assert setup.timers == 0 and not (setup.tmp / "cache").exists()
    assert serving.report().lines() == [
        LINE.format(0, 0, 0, 0),
        "[autotune] 1 key(s) took the device file's tile without a sweep (a device that does not sweep, or "
        "NBX_AUTOTUNE_NO_SWEEP=1 while recording)"]


def test_the_interpreter_device_takes_the_device_files_tile_and_forms_no_key(setup):
    interp = device_files.for_arch("interp")
    tuner = Tuner(interp, None, certificates=CertificateStore([], False), cache=CertificateStore([], False),
                  timer_factory=setup.timer)
    assert dict(tuner.setting(setup.tunable, n=1000, dtype="float32")) == {"block": 1024, "num_warps": 4}
    assert setup.timers == 0 and autotune.report_line() == LINE.format(0, 0, 0, 0)


def test_the_module_level_setting_serves_through_the_devices_tuner_and_records_keys(setup, monkeypatch):
    setup.certify(1000)
    monkeypatch.setenv("NBX_AUTOTUNE_RECORD", str(setup.tmp / "keys.json"))
    serving.reset()
    autotune.install("gpu:0", setup.tuner())
    for n in (1000, 50_000, 7):
        assert dict(autotune.setting(setup.tunable, "gpu:0", n=n, dtype="float32")) == {"block": 128, "num_warps": 1}
    serving._flush_recorder()
    (rec,) = records.load(setup.tmp / "keys.json")
    assert rec.as_json() == {"kernel": "fake_scale", "key": "n=65536,dtype=f32", "device_file": "nvidia/hopper",
                             "device_class": "nvidia-h200-140gb", "compiler": "triton-3.6.0-cuda",
                             "observed": {"n": 50_000}}


CHILD = """
from nbx.autotune import Identity, Tunable, Tuner, install, setting
from nbx.core import device_files
kernel = Tunable("fake_scale", params={"block": (64, 128, 100), "num_warps": (1, 2)},
                 key={"n": "elements", "dtype": "dtype"})
def no_timer():
    raise SystemExit("a sweep was attempted")
install("gpu:0", Tuner(device_files.for_arch("sm_90"), Identity("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda"),
                       timer_factory=no_timer))
print(dict(setting(kernel, "gpu:0", n=1000, dtype="float32")))
"""


def test_a_recorded_certified_only_run_serves_every_key_and_prints_the_report_at_exit(setup, source_env):
    setup.certify(1000)
    (setup.tmp / "child.py").write_text(CHILD)
    env = dict(source_env, NBX_AUTOTUNE_CERTIFICATES=str(setup.tmp / "certs"), NBX_AUTOTUNE_REPORT="1",
               NBX_AUTOTUNE_CERTIFIED_ONLY="1", NBX_CACHE_DIR=str(setup.tmp / "cache"))
    keys_file = setup.tmp / "recorded.json"
    done = subprocess.run([sys.executable, "-m", "nbx.core.cli", "autotune", "record", "--out", str(keys_file), "--",
                           sys.executable, str(setup.tmp / "child.py")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "{'block': 128, 'num_warps': 1}" in done.stdout
    assert f"nbx autotune record: 1 key(s) in {keys_file} (the command exited with 0)" in done.stdout
    assert LINE.format(1, 0, 0, 0) in done.stderr.splitlines()
    assert [r.key for r in records.load(keys_file)] == ["n=65536,dtype=f32"]


def test_warnings_of_a_clean_run_are_none(setup):
    setup.certify(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setup.tuner().setting(setup.tunable, n=1000, dtype="float32")


def test_the_report_line_says_plainly_when_the_installed_compiler_has_no_certificates(setup):
    from nbx.autotune.device_class import Identity
    setup.certify(1000)  # made under triton-3.6.0-cuda
    newer = Identity("nvidia", "nvidia-h200-140gb", "triton-3.9.0-cuda")
    tuner = Tuner(setup.facts, newer, certificates=CertificateStore([setup.tmp / "certs"], False),
                  cache=CertificateStore([setup.tmp / "cache"], False), timer_factory=setup.timer, warmup=0, repeats=1)
    autotune.sweep_uncertified()  # asked for: a key without any certificate of this compiler is swept
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutotuneWarning)
        tuner.setting(setup.tunable, n=1000, dtype="float32")
    assert autotune.report_line() == LINE.format(0, 1, 0, 0) + (
        "; no certificates for the installed compiler triton-3.9.0-cuda on nvidia-h200-140gb (they are for "
        "triton-3.6.0-cuda): each key takes the device file's setting after an oracle check, or is refused in certified-only mode")
