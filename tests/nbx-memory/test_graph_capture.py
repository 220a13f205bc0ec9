"""nbx.memory.graphs over a fake device whose 'kernels' are Python closures on host memory: a capture
records them, a replay runs them again. The memory rules (a pool private to the graph, held until
the graph is closed), the routing of allocations, the refusals and the cleanup are checked here;
tests/gpu/test_memory_graphs.py checks the same on CUDA stream capture."""
from __future__ import annotations

import ctypes
import gc
import threading
from contextlib import contextmanager

import numpy as np
import pytest
from nbx.core.device import Device
from nbx.core.errors import ArgumentError, DeviceError, GraphCaptureError, NotSupportedError
from nbx.memory import allocator, graphs
from nbx.memory.caching import CachingAllocator
from nbx.memory.pinned import HostAlignedAllocator
from nbx.memory.pool import NBX, Pool

KiB, MiB = 1 << 10, 1 << 20
DEV = Device("graphfake", 0)
N = 1024  # float32 elements of every buffer


class Violation(RuntimeError):
    """What the fake device raises for work a capture cannot hold."""

    def __init__(self, what: str):
        super().__init__(what)
        self.function = what


class FakeStream:
    def __init__(self, name: str):
        self.name = name
        self.capturing = False
        self.invalidated = False
        self.captured: list = []

    def __repr__(self) -> str:
        return f"FakeStream({self.name})"


class CountingSource:
    """Real host memory (so the closures can compute) that counts what it is asked."""

    def __init__(self, fake):
        self.host = HostAlignedAllocator()
        self.fake = fake
        self.during_capture = 0

    def allocate(self, nbytes):
        if self.fake.capturing_now():
            self.during_capture += 1
        return self.host.allocate(nbytes)

    def free(self, address):
        self.host.free(address)

    def memory_info(self):
        return None, None


class FakeCapture:
    def __init__(self):
        self.default = FakeStream("default")
        self.local = threading.local()
        self.sources: list[CountingSource] = []
        self.destroyed = 0
        self.streams = 0

    # what the test's 'kernels' use
    def stream(self) -> FakeStream:
        stack = getattr(self.local, "stack", None)
        return stack[-1] if stack else self.default

    def capturing_now(self) -> bool:
        return self.stream().capturing

    def kernel(self, fn) -> None:
        """A 'kernel launch' on the current stream: recorded while it captures, run otherwise."""
        s = self.stream()
        if s.capturing:
            s.captured.append(fn)
        else:
            fn()

    def host_sync(self) -> None:
        s = self.stream()
        if s.capturing:
            s.invalidated = True
            raise Violation("fakeStreamSynchronize")

    # nbx.memory.graphs.StreamCapture
    def new_stream(self, device):
        self.streams += 1
        return FakeStream(f"capture{self.streams}")

    def current_stream(self, device):
        return self.stream()

    @contextmanager
    def use_stream(self, stream):
        stack = self.local.__dict__.setdefault("stack", [])
        stack.append(stream)
        try:
            yield stream
        finally:
            stack.pop()

    def wait(self, waiter, stream):
        pass

    def synchronize(self, stream):
        if stream.capturing:
            raise Violation("fakeStreamSynchronize")

    def begin(self, stream):
        stream.capturing, stream.invalidated, stream.captured = True, False, []

    def end(self, stream):
        stream.capturing = False
        if stream.invalidated:
            raise GraphCaptureError("fake capture invalidated")
        return list(stream.captured)

    def abort(self, stream):
        stream.capturing, stream.captured = False, []

    def violation(self, exc):
        return f"{exc.function} is a host synchronization" if isinstance(exc, Violation) else None

    def instantiate(self, graph):
        return tuple(graph)

    def launch(self, executable, stream):
        for fn in executable:
            fn()

    def destroy(self, graph, executable):
        self.destroyed += 1

    def node_count(self, graph):
        return len(graph)

    def segment_source(self, device):
        source = CountingSource(self)
        self.sources.append(source)
        return source


@pytest.fixture
def fake(monkeypatch):
    f = FakeCapture()
    monkeypatch.setattr(graphs, "_CAPTURES", {DEV.type: f})
    host = HostAlignedAllocator()
    usual = CachingAllocator("usual", lambda d: Pool(host, NBX, parked_fraction=1.0, device=d))
    monkeypatch.setattr(allocator, "_ALLOCATORS", {**allocator._ALLOCATORS, DEV.type: usual})
    f.usual, f.usual_host = usual, host
    yield f
    gc.collect()


def floats(block_or_ptr) -> np.ndarray:
    ptr = block_or_ptr if isinstance(block_or_ptr, int) else block_or_ptr.ptr
    return np.ctypeslib.as_array((ctypes.c_float * N).from_address(ptr))


def alloc(nbytes=N * 4):
    return allocator.get_allocator(DEV.type).allocate(nbytes, DEV)


def alloc_input():
    x = alloc()
    floats(x)[:] = 1.0
    return x


def step_over(fake, x):
    """out = (x * 2 + 1) ** 2 through two temporaries, the second larger than the small class."""
    xp = x.ptr

    def step():
        tmp = alloc()
        big = alloc(3 * MiB)
        t, b = tmp.ptr, big.ptr
        fake.kernel(lambda: np.multiply(floats(xp), 2, out=floats(t)))
        fake.kernel(lambda: np.add(floats(t), 1, out=floats(b)))
        out = alloc()
        o = out.ptr
        fake.kernel(lambda: np.square(floats(b), out=floats(o)))
        return out  # tmp and big go back to the pool here, while the capture goes on
    return step


def test_replay_recomputes_from_the_inputs_current_values_and_equals_the_eager_run(fake):
    x = alloc_input()
    floats(x)[:] = np.arange(N, dtype=np.float32)
    step = step_over(fake, x)
    eager = floats(step()).copy()
    graph = graphs.capture(step, DEV)
    assert graph.nodes == 3
    out = graph.replay()
    assert floats(out).tobytes() == eager.tobytes()
    floats(x)[:] = -np.arange(N, dtype=np.float32) / 3
    eager_again = floats(step()).copy()
    assert graph.replay() is out and floats(out).tobytes() == eager_again.tobytes()
    assert graph.replays == 2 and "2 replays" in repr(graph)
    graph.close()


def test_the_capturing_threads_allocations_come_from_the_graphs_private_pool(fake):
    x = alloc_input()
    usual_before = fake.usual.stats(DEV).allocations
    graph = graphs.capture(step_over(fake, x), DEV, warmup=2)
    assert fake.usual.stats(DEV).allocations == usual_before  # warm-ups and capture: none from the usual pool
    private = graph.pool.stats()
    assert private.allocations == 3 * 3 and private.allocated == N * 4  # 3 runs x 3 blocks; only the output lives
    assert any(v.address <= graph.outputs.ptr < v.address + v.size for v in graph.pool.snapshot())
    assert allocator.get_allocator(DEV.type) is fake.usual  # the usual allocator is back after the capture
    graph.close()


def test_blocks_freed_in_the_capture_are_reused_by_it_and_the_warm_up_fills_the_pool(fake):
    x = alloc_input()
    graph = graphs.capture(step_over(fake, x), DEV)
    source = fake.sources[-1]
    assert source.during_capture == 0  # the warm-up grew the pool; the capture found every block in it
    # one small segment and one large (nbx's rules: 20 MiB for a request under 10 MiB), reused by both runs
    assert graph.pool.stats().reserved == 2 * MiB + 20 * MiB
    graph.close()


def test_without_a_warm_up_the_private_pool_grows_during_the_capture(fake):
    x = alloc_input()
    graph = graphs.capture(step_over(fake, x), DEV, warmup=0)
    assert fake.sources[-1].during_capture == 2
    graph.close()


def test_the_private_pool_frees_nothing_while_the_graph_lives_and_everything_once_closed_and_dropped(fake):
    x = alloc_input()
    graph = graphs.capture(step_over(fake, x), DEV)
    source = fake.sources[-1]
    graph.pool.empty_cache()  # what a refusal would do: the segments are retired, not freed
    assert source.host.used == 22 * MiB and graph.replay() is graph.outputs
    out = graph.outputs
    graph.close()
    assert graph.closed and fake.destroyed == 1
    assert source.host.used == 2 * MiB  # the output's small segment, held by the output
    del out, graph
    gc.collect()
    assert source.host.used == 0


def test_a_collected_graph_destroys_itself_and_frees_its_memory(fake):
    x = alloc_input()
    graphs.capture(step_over(fake, x), DEV)
    gc.collect()
    assert fake.destroyed == 1 and fake.sources[-1].host.used == 0


def test_a_host_sync_inside_the_capture_is_a_graph_capture_error_and_nothing_is_kept(fake):
    x = alloc_input()
    inner = step_over(fake, x)

    def step():
        out = inner()
        fake.host_sync()  # like tensor.numpy() inside the captured function
        return out

    with pytest.raises(GraphCaptureError, match="cannot be captured: fakeStreamSynchronize is a host sync") as info:
        graphs.capture(step, DEV)
    assert info.value.operation == "fakeStreamSynchronize"
    del info
    gc.collect()
    assert fake.sources[-1].host.used == 0 and fake.stream() is fake.default
    assert allocator.get_allocator(DEV.type) is fake.usual


def test_a_capture_broken_without_an_exception_is_refused_when_it_ends(fake):
    def step():
        try:
            fake.host_sync()
        except Violation:
            pass  # swallowed: the capture is invalid all the same
        return alloc()

    with pytest.raises(GraphCaptureError, match="fake capture invalidated"):
        graphs.capture(step, DEV)
    gc.collect()
    assert fake.sources[-1].host.used == 0


def test_an_ordinary_error_in_the_captured_function_passes_through_unchanged(fake):
    calls = []

    def step():
        calls.append(fake.capturing_now())
        if fake.capturing_now():
            raise ValueError("bad shape")
        return alloc()

    with pytest.raises(ValueError, match="bad shape"):
        graphs.capture(step, DEV)
    assert calls == [False, True]
    gc.collect()
    assert fake.sources[-1].host.used == 0


def test_other_threads_allocate_from_the_usual_allocator_during_a_capture(fake):
    seen = {}

    def step():
        out = alloc()
        worker = threading.Thread(target=lambda: seen.setdefault("block", alloc()))
        worker.start()
        worker.join()
        return out

    graph = graphs.capture(step, DEV, warmup=0)
    assert fake.usual.stats(DEV).live_bytes == N * 4  # the other thread's block
    assert graph.pool.stats().allocated == N * 4      # the capture's own output
    graph.close()


def test_replay_of_a_closed_graph_and_bad_warm_ups_and_unknown_devices_are_refused(fake):
    graph = graphs.capture(lambda: alloc(), DEV)
    graph.close()
    with pytest.raises(ArgumentError, match="replay of a closed graph"):
        graph.replay()
    with pytest.raises(ArgumentError, match="warmup is a count of eager runs"):
        graphs.capture(lambda: None, DEV, warmup=-1)
    with pytest.raises(NotSupportedError, match="devices of type 'nowhere' cannot capture launch sequences"):
        graphs.capture(lambda: None, Device("nowhere", 0))
    with pytest.raises(DeviceError, match="does not implement nbx.memory.graphs.StreamCapture"):
        graphs.register_capture("nowhere", object())
