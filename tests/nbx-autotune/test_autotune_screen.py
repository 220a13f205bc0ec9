"""The screen: each candidate against the float64 oracle, NaN-filled output, tolerances from the device file."""
from __future__ import annotations

import numpy as np
import pytest
from nbx.autotune import keys, screen, sweep, timing
from nbx.core import dtypes
from nbx.core.errors import ScreenRefusal

SETTINGS = [{"block": 64, "num_warps": 1}, {"block": 100, "num_warps": 1}, {"block": 128, "num_warps": 2}]


def workload(fakes, n=65536, dtype="float32"):
    return fakes.FakeWorkload({"n": n, "dtype": dtypes.as_dtype(dtype)}, fakes.Clock(), {64: 1, 100: 1, 128: 1})


def test_a_candidate_that_leaves_its_tail_unwritten_is_excluded_with_an_infinite_deviation(fakes, hopper):
    result = screen.run(workload(fakes), SETTINGS, hopper)
    assert [v.passed for v in result.verdicts] == [True, False, True]
    wrong = result.excluded[0]
    assert wrong.setting == {"block": 100, "num_warps": 1} and wrong.deviation == float("inf")
    assert wrong.reason == "deviation inf above the tolerance 3.1e-05"
    assert result.tolerance == 3.1e-5 and result.dtype == "float32"


def test_the_fastest_candidate_is_never_served_when_it_computes_the_wrong_answer(fakes, hopper):
    clock = fakes.Clock()
    tunable = fakes.make_tunable(clock)
    key = keys.form(tunable.name, tunable.key, hopper, n=1000, dtype="float32")
    entry = sweep.prove(tunable, key, hopper, None, fakes.FakeTimer(clock), warmup=1, repeats=3)
    assert entry.setting == {"block": 128, "num_warps": 1}
    proof = entry.proof
    reason = "deviation inf above the tolerance 3.1e-05"
    assert proof["excluded"] == [{"setting": {"block": 100, "num_warps": 1}, "deviation": "inf", "reason": reason},
                                 {"setting": {"block": 100, "num_warps": 2}, "deviation": "inf", "reason": reason}]
    assert proof["deviation"] == 0.0 and proof["tolerance"] == 3.1e-5 and proof["dtype"] == "float32"
    assert proof["best_ms"] == pytest.approx(0.31) and proof["second_ms"] == pytest.approx(0.32)
    assert proof["candidates_tried"] == 6 and proof["pruned"] == 0
    assert proof["representative"] == {"n": 65536, "dtype": "float32"}
    assert proof["witness"] == {"name": "fake witness", "before_ms": 1.0, "after_ms": 1.0, "drift": 0.0,
                                "tolerance": 0.05}
    assert proof["timing"] == {"warmup": 1, "repeats": 3, "flush_bytes": 100 << 20, "flush": "counted",
                              "attempts": 1,
                              "held_ms": proof["timing"]["held_ms"], "host_bound": False}
    assert proof["timing"]["held_ms"] >= timing.HOLD_EXTRA_MS


def test_a_deviation_above_the_dtypes_tolerance_is_excluded_and_one_within_passes(fakes, hopper):
    class Rounded(fakes.FakeWorkload):
        def launch(self, setting):
            super().launch(setting)
            if setting["block"] == 64:  # a variant that loses precision: 1e-4 relative
                self.out *= np.float32(1 + 1e-4)
            if setting["block"] == 128:  # a reordered sum: 1e-6 relative
                self.out *= np.float32(1 + 1e-6)

    work = Rounded({"n": 4096, "dtype": dtypes.float32}, fakes.Clock(), {64: 1, 128: 1})
    result = screen.run(work, [{"block": 64, "num_warps": 1}, {"block": 128, "num_warps": 1}], hopper)
    first, second = result.verdicts
    assert not first.passed and first.deviation == pytest.approx(1e-4, rel=0.05)
    assert first.reason.startswith("deviation 0.0001 above the tolerance 3.1e-05")
    assert second.passed and 0 < second.deviation < 3.1e-5


def test_an_integer_output_must_match_exactly_and_an_unwritten_position_fails_under_either_fill(fakes, hopper):
    class Counts(fakes.FakeWorkload):
        def launch(self, setting):
            written = self.out.size - (1 if setting["block"] == 1 else 0)
            self.out[:written] = np.arange(written)
            if setting["block"] == 2:
                self.out[7] += 1

        def reference_rows(self, rows):
            return np.arange(self.out.size, dtype=np.float64)[rows]

    work = Counts({"n": 256, "dtype": dtypes.int32}, fakes.Clock(), {})
    result = screen.run(work, [{"block": 0}, {"block": 1}, {"block": 2}], hopper)
    assert [v.passed for v in result.verdicts] == [True, False, False]
    assert result.tolerance == 0.0
    assert result.verdicts[1].reason.startswith("an exact (int32) output differs from the oracle")
    assert screen.fills(dtypes.int32) == (2**31 - 1, -2**31) and screen.fills(dtypes.bool_) == (True, False)
    assert np.isnan(screen.fills(dtypes.float16)[0])


def test_an_exact_output_that_matches_is_never_widened_to_float64_for_a_deviation(fakes, hopper, monkeypatch):
    """The certifier screens 256 MiB copies: a float64 deviation of each candidate's output took seconds."""
    class Words(fakes.FakeWorkload):
        def launch(self, setting):
            self.out[:] = np.arange(self.out.size) % 65536

        def reference_rows(self, rows):
            return (np.arange(self.out.size) % 65536).astype(np.uint16)[rows]

    def refused(out, ref):
        raise AssertionError("a float64 deviation of an output equal to its oracle")

    monkeypatch.setattr(screen, "oracle_deviation", refused)
    result = screen.run(Words({"n": 4096, "dtype": dtypes.uint16}, fakes.Clock(), {}), [{"block": 0}], hopper)
    assert result.verdicts[0].passed and result.verdicts[0].deviation == 0.0


def test_a_missing_tolerance_refuses_the_screen_by_name(fakes, hopper):
    no_table = fakes.Overlay(hopper, autotune__screen_tolerance=fakes.ABSENT)
    with pytest.raises(ScreenRefusal, match=r"the screen of a float32 output needs autotune.screen_tolerance, "
                                            r"which nvidia/hopper does not state; nbx invents no tolerance"):
        screen.run(workload(fakes), SETTINGS, no_table)
    table = dict(hopper.value("autotune.screen_tolerance"))
    del table["float32"]
    no_dtype = fakes.Overlay(hopper, autotune__screen_tolerance=table)
    with pytest.raises(ScreenRefusal, match=r"autotune.screen_tolerance of nvidia/hopper states no tolerance for "
                                            r"float32; nbx invents no tolerance"):
        screen.run(workload(fakes), SETTINGS, no_dtype)
    table = dict(hopper.value("autotune.screen_tolerance"), int64=1e-6)
    loose = fakes.Overlay(hopper, autotune__screen_tolerance=table)
    with pytest.raises(ScreenRefusal, match=r"autotune.screen_tolerance.int64 of nvidia/hopper is 1e-06; a int "
                                            r"output is compared exactly, so its tolerance is 0"):
        screen.tolerance(loose, dtypes.int64)


def test_a_huge_output_is_compared_on_first_middle_and_last_windows(fakes, hopper):
    assert screen.windows((1000, 10), 4, 40_000) == [slice(0, 1000)]
    assert screen.windows((1000, 10), 4, 1200) == [slice(0, 10), slice(495, 505), slice(990, 1000)]
    assert screen.windows((4, 10), 4, 100) == [slice(0, 1), slice(2, 4)]  # touching windows merge
    assert screen.windows((), 4, 1) == [slice(None)]

    class Middle(fakes.FakeWorkload):
        def launch(self, setting):
            super().launch(setting)
            if setting["block"] == 128:
                self.out[self.out.size // 2] = 1e6  # corrupt only the middle

    work = Middle({"n": 65536, "dtype": dtypes.float32}, fakes.Clock(), {64: 1, 128: 1})
    small = fakes.Overlay(hopper, autotune__screen_max_bytes=3 * 4 * 1000)
    result = screen.run(work, [{"block": 64, "num_warps": 1}, {"block": 128, "num_warps": 1}], small)
    assert result.windows == ((0, 1000), (32268, 33268), (64536, 65536))
    assert [v.passed for v in result.verdicts] == [True, False]
    assert sum(r.stop - r.start for r in work.reference_calls) == 3000  # the oracle ran on the windows only


def test_a_candidate_whose_launch_raises_is_excluded_with_the_reason(fakes, hopper):
    class Failing(fakes.FakeWorkload):
        def launch(self, setting):
            if setting["block"] == 128:
                raise RuntimeError("out of resources: shared memory, required: 300000, hardware limit: 232448")
            super().launch(setting)

    work = Failing({"n": 4096, "dtype": dtypes.float32}, fakes.Clock(), {64: 1, 128: 1})
    result = screen.run(work, [{"block": 64, "num_warps": 1}, {"block": 128, "num_warps": 1}], hopper)
    bad = result.verdicts[1]
    assert not bad.passed and bad.deviation is None
    assert bad.reason == ("launch failed: RuntimeError: out of resources: shared memory, required: 300000, "
                          "hardware limit: 232448")


def test_a_key_no_candidate_passes_is_refused_listing_every_candidate(fakes, hopper):
    result = screen.run(workload(fakes), [{"block": 100, "num_warps": 1}], hopper)
    with pytest.raises(ScreenRefusal, match=r"kernel 'k' key 'n=65536': no candidate passed the screen \(float32, "
                                            r"tolerance 3.1e-05\): \{'block': 100, 'num_warps': 1\}: deviation inf"):
        screen.require_pass(result, "k", "n=65536")


def test_a_key_whose_candidates_are_all_pruned_is_refused_with_the_reasons(fakes, hopper):
    clock = fakes.Clock()
    tunable = fakes.make_tunable(clock, params={"block": (64,), "num_warps": (64,)})
    key = keys.form(tunable.name, tunable.key, hopper, n=10, dtype="float32")
    with pytest.raises(ScreenRefusal, match=r"every candidate was pruned by the device's facts: .*64 warps are "
                                            r"2048 threads"):
        sweep.prove(tunable, key, hopper, None, fakes.FakeTimer(clock))


def test_a_tensor_workload_fills_launches_and_reads_an_nbx_tensor_by_rows(hopper):
    import nbx.core as nbx

    out = nbx.empty((6, 4), dtype="float32", device="cpu")
    values = np.arange(24, dtype=np.float64).reshape(6, 4)

    def run(setting):
        out.numpy()[: setting["rows"]] = values[: setting["rows"]]  # rows=5 forgets the last row

    work = screen.TensorWorkload(out, run, lambda rows: values[rows])
    result = screen.run(work, [{"rows": 6}, {"rows": 5}], hopper)
    assert [v.passed for v in result.verdicts] == [True, False]
    assert result.verdicts[1].deviation == float("inf") and work.out_shape == (6, 4)


def test_a_permuted_output_is_filled_whole_through_its_storage_order(monkeypatch):
    """conv's and prefill's workloads lead with their rows (a permuted view): the fill runs on the dense storage
    (a backend's fill of the strided view would copy through a dense buffer), and reaches every element."""
    import nbx.core as nbx
    from nbx.core import dispatch
    storage = nbx.empty((2, 3, 4), dtype="float32", device="cpu")
    work = screen.TensorWorkload(storage.permute(1, 0, 2), lambda setting: None, lambda rows: None)
    filled = []
    fill = dispatch.backend_implementation("fill_", storage.device)
    monkeypatch.setattr(dispatch, "backend_implementation",
                        lambda op, device: lambda t, v: (filled.append(t.is_contiguous()), fill(t, v)))
    work.fill_output(float("nan"))
    assert filled == [True] and np.isnan(storage.numpy()).all()


def test_kept_inputs_draw_once_per_key_read_only_while_a_scope_is_open_and_are_forgotten_when_it_closes():
    from nbx import autotune
    draws = []

    def draw(n):
        return lambda: (draws.append(n) or np.arange(n, dtype=np.float32),)
    with autotune.keeping_inputs():   # a certification
        first = autotune.kept_inputs("test owner", (3,), draw(3))
        assert autotune.kept_inputs("test owner", (3,), draw(3))[0] is first[0] and draws == [3]
        assert not first[0].flags.writeable
        with autotune.keeping_inputs():   # a sweep inside it keeps the certification's set
            assert autotune.kept_inputs("test owner", (3,), draw(3))[0] is first[0]
        assert autotune.kept_inputs("test owner", (3,), draw(3))[0] is first[0] and draws == [3]
        assert autotune.kept_inputs("test owner", (4,), draw(4))[0].size == 4 and draws == [3, 4]
        autotune.reset()
        autotune.kept_inputs("test owner", (4,), draw(4))
        assert draws == [3, 4, 4]
    autotune.kept_inputs("test owner", (4,), draw(4))   # the scope closed: its set went with it
    assert not autotune.kept_inputs("test owner", (4,), draw(4))[0].flags.writeable
    assert draws == [3, 4, 4, 4, 4]                      # and outside any scope nothing is kept


def test_a_sweep_keeps_its_drawn_inputs_for_itself_only_and_a_certification_across_its_keys(fakes, hopper):
    from nbx import autotune
    clock, draws = fakes.Clock(), []

    def workload(rep, device):
        autotune.kept_inputs("test layer", (rep["n"],), lambda: (draws.append(rep["n"]) or np.zeros(3),))
        return fakes.FakeWorkload(rep, clock, fakes.BLOCK_MS)
    tunable = fakes.make_tunable(clock, workload=workload)
    key = keys.form(tunable.name, tunable.key, hopper, n=1000, dtype="float32")
    for _ in range(2):   # two run-time sweeps: each draws its own
        sweep.prove(tunable, key, hopper, None, fakes.FakeTimer(clock), warmup=1, repeats=3)
    assert draws == [keys.representative(key, tunable.key, hopper)["n"]] * 2
    with autotune.keeping_inputs():   # what certify() opens around its keys
        for _ in range(2):
            sweep.prove(tunable, key, hopper, None, fakes.FakeTimer(clock), warmup=1, repeats=3)
    assert len(draws) == 3   # one draw for both sweeps of the certification
