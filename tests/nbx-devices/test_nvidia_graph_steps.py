"""nbx.graph on the cuda backend over a simulated CUDA whose stream capture records the copies and
memsets issued on a capturing stream and whose graph launch runs them again: a step is a real
(simulated) graph here, with its private pool, its copy-in, its length tensor and its release.
tests/gpu/test_graph_steps.py runs the same on the H200 with Triton kernels in the graph."""
from __future__ import annotations

import ctypes
import gc
import importlib.util
from pathlib import Path

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import dispatch
from nbx.core.errors import ArgumentError, GraphCaptureError


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_nbx_graph_steps_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ADAPTERS = _load("test_nvidia_memory_adapters")


class ReplayingCudart(ADAPTERS.FakeCudart):
    """Copies and memsets on a capturing stream are recorded into its graph; a launch runs them."""

    def __init__(self):
        self.pending: dict[int, list] = {}
        self.ops_of: dict[int, list] = {}
        super().__init__()

    def work(self, stream, fn) -> int:
        if stream in self.capturing:
            self.pending.setdefault(stream, []).append(fn)
        else:
            fn()
        return 0

    def cudaMemcpyAsync(self, dst, src, nbytes, kind, stream):
        return self.work(stream, lambda: ctypes.memmove(dst, src, nbytes))

    def cudaMemcpy2DAsync(self, dst, dpitch, src, spitch, width, height, kind, stream):
        def copy():
            for row in range(height):
                ctypes.memmove(dst + row * dpitch, src + row * spitch, width)
        return self.work(stream, copy)

    def cudaMemsetAsync(self, ptr, value, nbytes, stream):
        return self.work(stream, lambda: ctypes.memset(ptr, value, nbytes))

    def cudaStreamBeginCapture(self, stream, mode):
        self.pending[stream] = []
        return super().cudaStreamBeginCapture(stream, mode)

    def cudaStreamEndCapture(self, stream, p):
        ops = self.pending.pop(stream, [])
        code = super().cudaStreamEndCapture(stream, p)
        if code == 0:
            self.graphs[p._obj.value] = ops
            self.ops_of[p._obj.value + 1] = ops  # the executable: graph + 1 (the adapters' fake)
        return code

    def cudaGraphLaunch(self, executable, stream):
        super().cudaGraphLaunch(executable, stream)
        for fn in self.ops_of[executable]:
            fn()
        return 0


class ReplayingDriver(ADAPTERS.FakeDriver):
    def _fill(self, ctype, ptr, value, count, stream):
        def fill():
            np.ctypeslib.as_array((ctype * count).from_address(ptr))[:] = value
        return self.cudart.work(stream, fill)

    def cuMemsetD8Async(self, ptr, value, count, stream):
        return self._fill(ctypes.c_uint8, ptr, value, count, stream)

    def cuMemsetD16Async(self, ptr, value, count, stream):
        return self._fill(ctypes.c_uint16, ptr, value, count, stream)

    def cuMemsetD32Async(self, ptr, value, count, stream):
        return self._fill(ctypes.c_uint32, ptr, value, count, stream)


@pytest.fixture
def cuda(monkeypatch):
    monkeypatch.setattr(ADAPTERS, "FakeCudart", ReplayingCudart)
    monkeypatch.setattr(ADAPTERS, "FakeDriver", ReplayingDriver)
    fixture = ADAPTERS.cuda.__wrapped__(monkeypatch)
    fake = next(fixture)
    yield fake
    # a test's graphs freed while the simulated driver still answers: collected later, their finalizers
    # would call a driver this machine lacks, inside whatever test runs then
    gc.collect()
    next(fixture, None)


def upload(array):
    return nbx.from_numpy(np.ascontiguousarray(array)).to("cuda")


def copies_step(x):
    """Capturable work the simulated device runs: a strided gather (cudaMemcpy2D) and a fill."""
    return x[:, ::2].contiguous(), nbx.full((3,), 7, dtype="int32", device="cuda")


def test_a_step_on_cuda_is_a_graph_whose_replays_equal_eager_runs_on_new_inputs(cuda):
    x = upload(np.arange(24, dtype=np.float32).reshape(4, 6))
    step = nbx.graph.capture(copies_step, x)
    assert step.captured and cuda.count("cudaStreamBeginCapture") == 1 and "captured" in repr(step)
    fresh = upload(-np.arange(24, dtype=np.float32).reshape(4, 6) / 3)
    gathered, filled = step(fresh)
    eager_gathered, eager_filled = copies_step(fresh)
    assert gathered.numpy().tobytes() == eager_gathered.numpy().tobytes()
    assert filled.numpy().tobytes() == eager_filled.numpy().tobytes()
    assert step.inputs[0].numpy().tobytes() == fresh.numpy().tobytes()  # copied into the static input
    assert cuda.count("cudaStreamBeginCapture") == 1 and len(cuda.launched) == 1
    step.inputs[0][...] = upload(np.ones((4, 6), np.float32))  # written by the caller, then replayed
    assert step.replay()[0] is gathered and (gathered.numpy() == 1).all()
    step.close()


def test_a_new_input_shape_captures_again_and_the_oldest_key_beyond_the_bound_is_closed(cuda):
    x = upload(np.zeros((4, 6), np.float32))
    step = nbx.graph.capture(copies_step, x, max_captures=1)
    pool_of_first = step.memory.reserved
    assert pool_of_first > 0
    wide = upload(np.arange(16, dtype=np.float32).reshape(2, 8))
    out, _ = step(wide)
    assert out.numpy().tolist() == np.arange(16).reshape(2, 8)[:, ::2].tolist()
    assert cuda.count("cudaStreamBeginCapture") == 2 and step.keys == [((((2, 8), "float32"),), None)]
    assert len(cuda.destroyed) == 2  # the first key's graph and executable, closed by the bound
    again, _ = step(x)  # the first shape comes back: captured again, the second closed
    assert cuda.count("cudaStreamBeginCapture") == 3 and (again.numpy() == 0).all()
    step.close()


def test_the_true_length_is_a_device_tensor_written_before_each_replay_of_its_bucket(cuda):
    cache = upload(np.zeros((512, 4), np.float32))

    def reads_length(cache, length):
        return length.tensor.clone(), cache[:length.bucket].contiguous()

    step = nbx.graph.capture(reads_length, cache, length=5)
    assert step.length.bucket == 128  # hopper's graphs.length_buckets: steps of 128 up to 1024
    seen = [int(step(cache, length=n)[0].numpy()[0]) for n in (5, 6, 100, 128)]
    assert seen == [5, 6, 100, 128] and cuda.count("cudaStreamBeginCapture") == 1
    n, view = step(cache, length=129)
    assert int(n.numpy()[0]) == 129 and view.shape == (256, 4) and cuda.count("cudaStreamBeginCapture") == 2
    assert int(step.replay(length=200)[0].numpy()[0]) == 200
    with pytest.raises(ArgumentError, match="outside the current capture's bucket"):
        step.replay(length=5)
    step.close()


def test_closing_a_step_or_dropping_it_returns_its_private_pool_to_the_driver(cuda):
    x = upload(np.zeros((4, 6), np.float32))
    used = cuda.used
    step = nbx.graph.capture(copies_step, x)
    memory = step.memory
    assert memory.reserved > 0 and cuda.used >= used + memory.reserved
    assert tuple(op for op, _ in memory.unpriced) == memory.calls == ("copy_", "fill_")  # no declarations
    assert memory.live_peak == 2 * 512  # the two outputs, each rounded to the pool's 512 bytes
    assert memory.plan.extent <= memory.reserved
    step.close()
    assert step.closed and cuda.used == used + 2 * MiB  # the outputs' small segment: they are still held
    with pytest.raises(ArgumentError, match="call of a closed step"):
        step(x)
    del step
    gc.collect()
    assert cuda.used == used
    nbx.graph.capture(copies_step, x)  # never closed: collected, it frees the same
    gc.collect()
    assert cuda.used == used


def test_a_host_read_inside_the_step_is_a_graph_capture_error_and_nothing_is_kept(cuda):
    x = upload(np.zeros((4, 6), np.float32))
    used = cuda.used

    def reads_back(x):
        y = x[:, ::2].contiguous()
        return upload(y.numpy() + 1)

    def uploads(x):
        return x[:, ::2].contiguous(), upload(np.ones(3, np.float32))

    # refused in the warm-up, before the driver would refuse the capture
    with pytest.raises(GraphCaptureError, match=r"numpy\(\) of a cuda:0 tensor inside a captured step"):
        nbx.graph.capture(reads_back, x)
    with pytest.raises(GraphCaptureError, match="an upload from host memory to cuda:0 of a cuda:0 tensor inside"):
        nbx.graph.capture(uploads, x)
    gc.collect()
    assert cuda.used == used and cuda.capturing == {} and cuda.count("cudaStreamBeginCapture") == 0


def test_a_host_sync_inside_an_op_is_refused_by_the_capture_itself(cuda, monkeypatch):
    """What the step's own code does is checked in the warm-up; what an op does inside (here a copy
    that reads its source back) is refused by the driver during the capture, by name."""
    from nbx.devices.nvidia import copies

    def reads_back_inside(dst, src):
        copies.write_host_values(dst, src.numpy())  # a host round trip, as a cast without its kernel does
    monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("copy_", "cuda"), reads_back_inside)
    x = upload(np.zeros((4, 6), np.float32))
    with pytest.raises(GraphCaptureError, match="cudaStreamSynchronize is a host synchronization"):
        nbx.graph.capture(lambda x: x.clone(), x)
    assert cuda.capturing == {}


MiB = 1 << 20


def test_a_capture_after_eager_work_still_plans_its_private_pool_and_eager_work_returns_to_the_usual_one(cuda):
    # the backend keeps the allocator's serving function per device: a capture's private routing,
    # registered for the capture's time, must still serve every allocation made inside it
    from nbx.memory.allocator import get_allocator
    x = upload(np.zeros((4, 6), np.float32))
    usual = get_allocator("cuda")
    for _ in range(3):
        copies_step(x)   # eager repeats: the backend's route to the usual pool is kept
    # the device's bounds record (8 bytes, nbx.core.deferred_checks) is made once, from the usual pool,
    # before a process's first capture: made here, a first test of its process counts as a later one
    from nbx.core import deferred_checks
    deferred_checks.prepare(x.device)
    before = usual.pool_stats(x.device).allocations
    step = nbx.graph.capture(copies_step, x)
    assert step.memory.reserved > 0 and step.memory.live_peak == 2 * 512
    assert usual.pool_stats(x.device).allocations == before   # nothing of the capture came from the usual pool
    copies_step(x)
    assert get_allocator("cuda") is usual and usual.pool_stats(x.device).allocations == before + 2
    step.close()
