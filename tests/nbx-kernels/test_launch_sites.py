"""The launch plans of softmax, the norms and the reductions: a repeat with the same layouts,
dtypes and flags replays the launches its first call planned (nbx.kernels.plans) with its own
tensors and scalars; anything the kernels specialise on (a shape, a stride, eps's or scale's
presence and width, a flag) makes a record of its own, so no stale record is replayed."""
import numpy as np
import pytest
import triton

import nbx.core as nbx
from nbx.kernels import plans
from nbx.kernels.rows import float_bits

rng = np.random.default_rng(5)


@pytest.fixture
def launches(monkeypatch):
    """Every planned launch run, as (its runner, its arguments); the launch itself still happens. A
    launch hook is set (a no-op) where Triton keeps them in chains, so that a signature's written
    repeat (plans._write_repeat, compiled devices) hands its launches to the prepared run spied on."""
    seen = []
    run = plans._Runner.run

    def spy(runner, values):
        seen.append((runner, runner.arguments(values)))
        run(runner, values)
    monkeypatch.setattr(plans._Runner, "run", spy)
    hook = triton.knobs.runtime.launch_enter_hook
    if hasattr(hook, "add"):
        watch = lambda metadata: None  # noqa: E731
        hook.add(watch)
        yield seen
        hook.remove(watch)
    else:
        yield seen


def _softmax(host, scale=1.0, mask=None):
    z = host.astype(np.float64) * scale + (0 if mask is None else mask)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_a_softmax_repeat_replays_its_record_with_each_calls_scale(device, launches, check):
    host = rng.standard_normal((8, 96)).astype(np.float32)
    additive = rng.standard_normal((8, 96)).astype(np.float32)
    x, mask = nbx.asarray(host).to(device), nbx.asarray(additive).to(device)
    for scale in (0.5, 0.25, 3.0):
        check(nbx.scaled_masked_softmax(x, scale, mask, dim=-1), _softmax(host, scale, additive), device)
    sites = [site for site, _ in launches]
    assert sites[0] is sites[1] is sites[2]   # one record: a scale's value is an argument of every call
    assert [args[-1] for _, args in launches] == [float_bits(s) for s in (0.5, 0.25, 3.0)]
    check(nbx.scaled_masked_softmax(x, 1.0, mask, dim=-1), _softmax(host, 1.0, additive), device)
    check(nbx.scaled_masked_softmax(x, 0.0, mask, dim=-1), _softmax(host, 0.0, additive), device)
    # no scale is a kernel constant: a plan of its own; 0.0's bits are an int32, which the runtime
    # keys its compiled launcher by (scale_bits is do_not_specialize: test_launch_plans.py), not the plan
    assert len({id(site) for site, _ in launches}) == 2


def test_a_softmax_of_another_shape_stride_or_dim_does_not_replay_the_record(device, launches, check):
    host = rng.standard_normal((6, 40)).astype(np.float32)
    x = nbx.asarray(host).to(device)
    check(nbx.softmax(x, dim=-1), _softmax(host), device)
    check(nbx.softmax(x[:4], dim=-1), _softmax(host[:4]), device)
    check(nbx.softmax(x.permute(1, 0), dim=-1), _softmax(host.T), device)
    check(nbx.softmax(x, dim=0), _softmax(host.T).T, device)
    check(nbx.log_softmax(x, dim=-1), np.log(_softmax(host)), device)
    assert len({id(site) for site, _ in launches}) == 5
    check(nbx.softmax(x, dim=-1), _softmax(host), device)
    assert launches[-1][0] is launches[0][0]


def _rms_norm(host, weight, eps):
    h = host.astype(np.float64)
    return h / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * weight


def test_a_norm_repeat_replays_its_record_with_each_calls_eps(device, launches, check):
    host = rng.standard_normal((4, 64)).astype(np.float32) * 1e-3   # eps matters at this scale
    weight = (1 + rng.standard_normal(64) * 0.1).astype(np.float32)
    x, w = nbx.asarray(host).to(device), nbx.asarray(weight).to(device)
    for eps in (1e-5, 1e-6, 1e-2):
        check(nbx.rms_norm(x, (64,), w, eps), _rms_norm(host, weight, eps), device)
    assert launches[0][0] is launches[1][0] is launches[2][0]
    assert [args[-1] for _, args in launches] == [float_bits(e) for e in (1e-5, 1e-6, 1e-2)]
    check(nbx.rms_norm(x, (64,), None, 1e-5), _rms_norm(host, 1.0, 1e-5), device)   # no weight: a constant
    check(nbx.rms_norm(x[:2], (64,), w, 1e-5), _rms_norm(host[:2], weight, 1e-5), device)
    assert len({id(site) for site, _ in launches}) == 3


def test_a_reduction_repeat_replays_its_record_and_a_new_layout_or_op_makes_its_own(device, launches, check):
    host = rng.standard_normal((12, 50)).astype(np.float32)
    x = nbx.asarray(host).to(device)
    for _ in range(2):
        check(nbx.sum(x, dim=1), host.astype(np.float64).sum(1), device)
    assert launches[0][0] is launches[1][0]
    check(nbx.sum(x, dim=0), host.astype(np.float64).sum(0), device)
    check(nbx.mean(x, dim=1), host.astype(np.float64).mean(1), device)
    check(nbx.sum(x[:, :20], dim=1), host[:, :20].astype(np.float64).sum(1), device)
    assert len({id(site) for site, _ in launches}) == 4
    for correction in (0, 1):   # the correction is an argument of every call
        check(nbx.var(x, dim=1, correction=correction), host.astype(np.float64).var(1, ddof=correction), device)
    assert launches[-1][0] is launches[-2][0] and launches[-1][1][-1] == 1.0 and launches[-2][1][-1] == 0.0


def test_split_rows_replay_both_launches_with_each_calls_scale_and_eps(device, launches, check):
    """Rows of 1500 are split over programs on interp (two launches a call; one on a GPU's wider tile)."""
    host = rng.standard_normal((2, 1500)).astype(np.float32)
    weight = (1 + rng.standard_normal(1500) * 0.1).astype(np.float32)
    x, w = nbx.asarray(host).to(device), nbx.asarray(weight).to(device)
    for scale in (0.5, 2.0):
        check(nbx.scaled_masked_softmax(x, scale, None, dim=-1), _softmax(host, scale), device)
    per_call = len(launches) // 2
    assert [site for site, _ in launches[:per_call]] == [site for site, _ in launches[per_call:]]
    assert launches[-1][1][-1] == float_bits(2.0)
    del launches[:]
    for eps in (1e-5, 1e-1):
        check(nbx.rms_norm(x, (1500,), w, eps), _rms_norm(host, weight, eps), device)
    per_call = len(launches) // 2
    assert [site for site, _ in launches[:per_call]] == [site for site, _ in launches[per_call:]]
    assert launches[-1][1][-1] == float_bits(1e-1)
