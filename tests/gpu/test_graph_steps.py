"""On the H200: nbx.graph steps are CUDA graphs of nbx's Triton kernels. Replays are byte-equal to
eager runs of the same function (inputs copied in, or written in place), a decode step replays one
graph per bucket of lengths while its kernels read the true length from a device tensor, and closing
(or dropping) a step gives its private pool back to the driver. tests/nbx-kernels/
test_graph_steps_interp.py runs on this GPU too (its `device` fixture's cuda case)."""
from __future__ import annotations

import gc
import time

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.errors import GraphCaptureError
from nbx.core.graph import Length, length_bucket
from nbx.devices.nvidia import runtime

pytestmark = pytest.mark.gpu
triton = pytest.importorskip("triton", reason="the captured launches are Triton kernels (triton is on the GPU machine)")

HIDDEN = 4096


def upload(array, dtype=None):
    t = nbx.from_numpy(np.ascontiguousarray(array)).to("cuda")
    return t if dtype is None else nbx.astype(t, dtype)


def rows(seed, shape=(1, HIDDEN)):
    return upload(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), "bfloat16")


def decode_chain(x, r, w):
    return nbx.silu(nbx.rms_norm(x + r, (HIDDEN,), w, 1e-6)) * x


def test_the_decode_chain_replays_as_a_cuda_graph_byte_equal_to_eager_runs():
    x, r, w = rows(0), rows(1), rows(2, (HIDDEN,))
    step = nbx.graph.capture(decode_chain, x, r, w)
    assert step.captured and step.nodes is not None and step.nodes >= 4
    for seed in (3, 4, 5):
        x_new, r_new = rows(seed), rows(seed + 10)
        out = step(x_new, r_new, w)
        assert out.numpy().tobytes() == decode_chain(x_new, r_new, w).numpy().tobytes()
    step.inputs[0][...] = rows(20)
    assert step.replay() is out and out.numpy().tobytes() == decode_chain(rows(20), r_new, w).numpy().tobytes()
    memory = step.memory
    # the kernels' declarations and the allocations they made are two accounts of one run: they agree
    assert memory.declared.allocated == memory.requested >= 4 * HIDDEN * 2 and memory.unpriced == ()
    assert memory.reserved >= memory.live_peak >= 2 * HIDDEN * 2
    step.close()


def masked_prefix_sum(cache, length):
    return nbx.sum(nbx.where(length.mask()[:, None], cache[:length.bucket], 0.0), dim=0)


def test_a_generation_of_growing_lengths_replays_one_graph_per_bucket():
    cache = upload(np.random.default_rng(6).standard_normal((1024, 64)).astype(np.float32))
    step = nbx.graph.capture(masked_prefix_sum, cache, length=1, max_length=1024)
    graphs = set()
    for n in range(1, 300, 7):
        out = step(cache, length=n)
        graphs.add(step.length.bucket)
        eager = Length(length_bucket(n, step.device, 1024), step.device)
        eager.set(n)
        assert out.numpy().tobytes() == masked_prefix_sum(cache, eager).numpy().tobytes()
        np.testing.assert_allclose(out.numpy(), cache.numpy()[:n].sum(0), rtol=1e-4, atol=1e-4)
    assert graphs == {128, 256, 384} and step.captures_made == 3 and step.captured
    step.close()


def test_closing_or_dropping_a_step_gives_its_private_pool_back():
    x, r, w = rows(7), rows(8), rows(9, (HIDDEN,))
    runtime.synchronize(0)
    free_before = runtime.memory_info(0)[0]
    step = nbx.graph.capture(decode_chain, x, r, w, max_captures=1)
    reserved = step.memory.reserved
    assert reserved > 0 and runtime.memory_info(0)[0] <= free_before - reserved
    step(rows(10, (4, HIDDEN)), rows(11, (4, HIDDEN)), w)  # a second key: the first one's graph is closed
    step.close()
    del step
    gc.collect()
    runtime.synchronize(0)
    assert runtime.memory_info(0)[0] >= free_before - (64 << 20)  # back, up to the usual pool's own growth


def test_a_host_read_inside_a_step_is_a_graph_capture_error_and_the_gpu_works_on():
    x = rows(12)
    with pytest.raises(GraphCaptureError, match="host synchronization"):
        nbx.graph.capture(lambda x: upload(nbx.exp(x).numpy()), x)
    assert (nbx.exp(x).numpy() > 0).all()


def test_replaying_the_chain_costs_less_wall_time_than_running_it_eagerly():
    x, r, w = rows(13), rows(14), rows(15, (HIDDEN,))
    step = nbx.graph.capture(decode_chain, x, r, w)

    def per_call_us(fn, calls=200):
        fn()
        runtime.synchronize(0)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runtime.synchronize(0)
        return (time.perf_counter() - t0) / calls * 1e6

    eager, replay = per_call_us(lambda: decode_chain(x, r, w)), per_call_us(step.replay)
    print(f"\ndecode chain (bf16, 1 x 4096): eager {eager:.1f} us, replay {replay:.1f} us a call")
    assert replay < eager
    step.close()
