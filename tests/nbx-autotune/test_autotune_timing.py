"""Timing: warm-up, an L2 flush before each timed run, the median of repeats, and the witness."""
from __future__ import annotations

import time

import pytest
from nbx.autotune import timing
from nbx.core.device import Device
from nbx.core.errors import TimingRefusal, WitnessDriftError


def test_the_median_of_repeats_ignores_a_stray_slow_run_and_each_timed_run_follows_a_flush(fakes):
    clock = fakes.Clock()
    timer = fakes.FakeTimer(clock)
    # two warm-up runs (the first compiles), two that time the host's queueing, then five timed
    costs = iter([5.0, 5.0, 1.0, 1.0, 1.0, 1.1, 40.0, 0.9, 1.0])

    m = timing.measure(lambda: clock.advance(next(costs)), timer, warmup=2, repeats=5)
    assert m.samples == pytest.approx((1.0, 1.1, 40.0, 0.9, 1.0))
    assert m.median_ms == 1.0
    assert timer.flushes == 2 + 5
    assert len(timer.holds) == 1 and m.held_ms == timer.holds[0] >= timing.HOLD_EXTRA_MS and not m.host_bound


def test_runs_whose_queueing_outlasts_the_hold_are_timed_again_behind_a_longer_one(fakes):
    timer = fakes.FakeTimer(fakes.Clock())
    calls = []

    def slow_to_queue():  # quick while the host's queueing is timed, 4 ms a run once the timed runs start
        calls.append(None)
        if len(calls) > 3:
            time.sleep(0.004)

    m = timing.measure(slow_to_queue, timer, warmup=1, repeats=5)
    assert len(timer.holds) == 2 and timer.holds[1] >= timing.HOLD_MARGIN * 5 * 4.0
    assert not m.host_bound and m.held_ms == timer.holds[1]


def test_a_measurement_without_repeats_is_refused(fakes):
    with pytest.raises(TimingRefusal, match=r"a measurement needs repeats >= 1 and warmup >= 0, got 0 and 1"):
        timing.measure(lambda: None, fakes.FakeTimer(fakes.Clock()), warmup=1, repeats=0)


def launch_costs(clock, costs):
    def launch(setting):
        clock.launches += 1
        clock.advance(costs[setting["block"]])
    return launch


def test_candidates_are_ranked_by_median_under_a_witness_that_held(fakes):
    clock = fakes.Clock()
    settings = [{"block": 64}, {"block": 128}, {"block": 256}]
    result = timing.compare(settings, launch_costs(clock, {64: 0.5, 128: 0.2, 256: 0.3}), fakes.FakeTimer(clock),
                            tolerance=0.05, warmup=1, repeats=3)
    assert [s["block"] for s, _ in result.ranked] == [128, 256, 64]
    assert result.attempts == 1 and result.drift == 0.0 and result.before_ms == result.after_ms == 1.0


def test_a_witness_that_drifts_once_is_measured_again_and_the_retry_is_kept(fakes):
    clock = fakes.Clock()
    timer = fakes.FakeTimer(clock, witness_ms=lambda launches: 1.0 if launches == 0 else 1.3)
    result = timing.compare([{"block": 64}], launch_costs(clock, {64: 0.5}), timer, tolerance=0.05, warmup=1,
                            repeats=3, retries=1)
    assert result.attempts == 2 and result.refused_attempts == (pytest.approx((1.0, 1.3)),)
    assert result.before_ms == pytest.approx(1.3) and result.after_ms == pytest.approx(1.3)


def test_a_witness_that_keeps_drifting_refuses_the_sweep_with_its_figures(fakes):
    clock = fakes.Clock()
    timer = fakes.FakeTimer(clock, witness_ms=lambda launches: 1.0 + 0.1 * launches)
    # each candidate runs six times (one warm-up, two that time the queueing, three timed): 0.6 ms of drift
    with pytest.raises(WitnessDriftError, match=r"the witness 'fake witness' drifted above "
                                                r"autotune.witness_drift_tolerance 0.05 in each of 2 attempt\(s\) "
                                                r"\(1 -> 1.6 ms, 1.6 -> 2.2 ms\).*the sweep is refused") as caught:
        timing.compare([{"block": 64}], launch_costs(clock, {64: 0.5}), timer, tolerance=0.05, warmup=1, repeats=3)
    assert caught.value.before_ms == pytest.approx(1.6) and caught.value.after_ms == pytest.approx(2.2)
    assert caught.value.tolerance == 0.05 and caught.value.last.times[0][0] == {"block": 64}


def test_the_drift_tolerance_comes_from_the_device_file_and_its_absence_is_refused(fakes, hopper):
    assert timing.drift_tolerance(hopper) == 0.05
    with pytest.raises(TimingRefusal, match=r"a sweep needs autotune.witness_drift_tolerance to judge its witness, "
                                            r"which nvidia/hopper does not state"):
        timing.drift_tolerance(fakes.Overlay(hopper, autotune__witness_drift_tolerance=fakes.ABSENT))


def test_a_device_without_a_timer_is_refused_by_name():
    with pytest.raises(TimingRefusal, match=r"no timer for device cpu: sweeping a key needs one \(CUDA events on "
                                            r"'cuda'\)"):
        timing.timer_for(Device("cpu"))
