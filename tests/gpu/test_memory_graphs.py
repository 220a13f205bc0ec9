"""On a real GPU: a sequence of Triton launches captured into a CUDA graph (nbx.memory.graphs) replays
byte-equal to the eager run of the same sequence, from the inputs' current values, with its memory in
a pool private to the graph; a host synchronization or a driver allocation inside the capture is a
GraphCaptureError naming the call, and the device works on after it."""
from __future__ import annotations

import gc
import time

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.device import Device
from nbx.core.errors import GraphCaptureError
from nbx.devices import nvidia
from nbx.devices.nvidia import runtime
from nbx.memory import allocator, graphs

pytestmark = pytest.mark.gpu
triton = pytest.importorskip("triton", reason="the captured launches are Triton kernels (triton is on the GPU machine)")

DEV = Device("cuda", 0)
ROWS, COLS = 512, 4096


def upload(array: np.ndarray):
    return nbx.from_numpy(array).to("cuda")


def inputs(seed: int):
    rng = np.random.default_rng(seed)
    x = upload(rng.standard_normal((ROWS, COLS)).astype(np.float32))
    res = upload(rng.standard_normal((ROWS, COLS)).astype(np.float32))
    w = upload(rng.standard_normal((COLS,)).astype(np.float32))
    return x, res, w


def decode_like(x, res, w):
    """A residual add, an RMSNorm, a gated activation, a float32 softmax and a bfloat16 output."""
    def step():
        h = nbx.add(x, res)
        n = nbx.rms_norm(h, (COLS,), w)
        a = nbx.multiply(nbx.silu(n), 0.125)
        p = nbx.softmax(a, dim=-1)
        return nbx.add(nbx.astype(p, "bfloat16"), nbx.astype(h, "bfloat16"))
    return step


def test_replay_is_byte_equal_to_the_eager_run_and_follows_new_input_values():
    x, res, w = inputs(1)
    step = decode_like(x, res, w)
    eager = step().numpy()
    main = allocator.get_allocator("cuda").pool(DEV)
    before = main.stats().allocations
    graph = graphs.capture(step, DEV)
    assert main.stats().allocations == before  # warm-up and capture drew on the private pool only
    assert graph.nodes is not None and graph.nodes >= 5
    out = graph.replay()
    assert out.numpy().tobytes() == eager.tobytes()
    x[...] = upload(np.random.default_rng(2).standard_normal((ROWS, COLS)).astype(np.float32))
    eager_new = step().numpy()
    assert eager_new.tobytes() != eager.tobytes()
    allocations = main.stats().allocations
    again = graph.replay()
    assert main.stats().allocations == allocations  # a replay allocates nothing
    assert again is out and again.numpy().tobytes() == eager_new.tobytes()
    graph.close()


def test_the_graphs_memory_is_private_while_it_lives_and_returned_once_it_is_closed_and_dropped():
    x, res, w = inputs(3)
    graph = graphs.capture(decode_like(x, res, w), DEV)
    private = graph.pool.stats()
    assert private.reserved > 0 and private.allocated >= ROWS * COLS * 2  # the bfloat16 output lives there
    out = graph.outputs
    views = graph.pool.snapshot()
    assert any(v.address <= out.data_ptr() < v.address + v.size for v in views)
    free_before = runtime.memory_info(0)[0]
    pool = graph.pool
    graph.close()
    assert graph.closed and pool.stats().allocated == ROWS * COLS * 2  # the output is still held
    del out, graph
    gc.collect()
    assert pool.stats().reserved == 0
    assert runtime.memory_info(0)[0] >= free_before + private.reserved - (64 << 20)


def test_a_host_synchronization_inside_the_capture_is_a_graph_capture_error_and_the_device_works_on():
    x, res, w = inputs(4)

    def reads_back():
        return nbx.exp(x).numpy()  # a copy to pageable host memory and a stream synchronize

    with pytest.raises(GraphCaptureError, match="is a host synchronization") as info:
        graphs.capture(reads_back, DEV)
    print(f"\n{info.value}")
    with pytest.raises(GraphCaptureError, match="cudaDeviceSynchronize is a host synchronization"):
        graphs.capture(lambda: (nbx.exp(x), runtime.synchronize(0)), DEV)
    assert nvidia.current_stream(0).is_default
    assert (nbx.ones(4, device="cuda").numpy() == 1).all()
    graph = graphs.capture(decode_like(x, res, w), DEV)  # a capture after the refusals works
    assert graph.replay().numpy().tobytes() == decode_like(x, res, w)().numpy().tobytes()
    graph.close()


def test_a_driver_allocation_inside_the_capture_is_a_graph_capture_error():
    x, _, _ = inputs(5)

    def allocates():
        y = nbx.exp(x)
        runtime.malloc(1 << 20, 0)
        return y

    with pytest.raises(GraphCaptureError, match="cudaMalloc is an allocation \\(or free\\) from the driver"):
        graphs.capture(allocates, DEV)
    assert (nbx.exp(x).numpy() > 0).all()


def test_replaying_a_graph_of_many_small_launches_costs_less_host_time_than_launching_them():
    x = upload(np.ones((64, 1024), np.float32))

    def many():
        y = x
        for _ in range(50):
            y = nbx.add(nbx.multiply(y, 0.5), 0.5)
        return y

    eager_out = many()
    graph = graphs.capture(many, DEV)
    runtime.synchronize(0)
    t0 = time.perf_counter()
    for _ in range(20):
        many()
    runtime.synchronize(0)
    eager_ms = (time.perf_counter() - t0) / 20 * 1e3
    t0 = time.perf_counter()
    for _ in range(20):
        graph.replay()
    runtime.synchronize(0)
    replay_ms = (time.perf_counter() - t0) / 20 * 1e3
    print(f"\n100 launches: eager {eager_ms:.3f} ms, graph replay {replay_ms:.3f} ms ({eager_ms / replay_ms:.1f}x)")
    assert graph.outputs.numpy().tobytes() == eager_out.numpy().tobytes()
    assert replay_ms < eager_ms
    graph.close()
