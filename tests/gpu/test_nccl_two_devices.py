"""On two GPUs of one host (nvidia-h200-x2; tools/nccl_run.sh runs this file): tensors, allocations,
streams, events and kernel launches on cuda:1 run on GPU 1; copies between the GPUs are byte-exact
(peer copies where cudaDeviceCanAccessPeer says so, else staged by the CUDA runtime); an op across
devices without an explicit copy is a named error. One process, no NCCL. Skipped, with the reason,
where fewer than two CUDA devices exist."""
from __future__ import annotations

import time

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.errors import CrossDeviceError
from nbx.devices import nvidia
from nbx.devices.nvidia import runtime, selftest
from two_gpus import two_devices_reason


REASON = two_devices_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

ALL_DTYPES = sorted(nbx.dtypes.TABLE)


def random_bytes(name: str, shape) -> np.ndarray:
    """Random bit patterns (NaN payloads and denormals included): a copy moves bytes, not values."""
    dt = nbx.dtypes.TABLE[name]
    raw = np.random.default_rng(sum(map(ord, name))).integers(0, 256, int(np.prod(shape)) * dt.itemsize,
                                                               dtype=np.uint8)
    if dt.kind == "bool":
        raw %= 2
    return raw.view(dt.host).reshape(shape)


def test_memory_for_a_tensor_on_cuda_1_comes_from_gpu_1():
    free0, free1 = runtime.memory_info(0)[0], runtime.memory_info(1)[0]
    t = nbx.empty((1 << 30,), "uint8", "cuda:1")
    after0, after1 = runtime.memory_info(0)[0], runtime.memory_info(1)[0]
    assert t.device == nbx.as_device("cuda:1")
    assert free1 - after1 >= 1 << 30
    assert abs(free0 - after0) < 64 << 20
    assert runtime.get_device() == 0


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_copies_between_the_two_gpus_are_byte_exact_for_every_dtype_both_ways(name):
    host = random_bytes(name, (33, 65))
    on0 = nbx.from_numpy(host, "cuda:0")
    on1 = on0.to("cuda:1")
    assert on1.device == nbx.as_device("cuda:1") and on1.numpy().tobytes() == host.tobytes()
    back = on1.to("cuda:0")
    assert back.numpy().tobytes() == host.tobytes()
    strided = on0[1::3, ::-2].to("cuda:1")
    assert strided.numpy().tobytes() == np.ascontiguousarray(host[1::3, ::-2]).tobytes()


def test_a_256_mib_copy_between_the_gpus_is_byte_exact_and_its_rate_is_reported():
    host = random_bytes("uint8", (256 << 20,))
    src = nbx.from_numpy(host, "cuda:0")
    dst = src.to("cuda:1")                       # warm-up: peer access set up, pool segment made
    runtime.synchronize(0)
    runtime.synchronize(1)
    t0 = time.perf_counter()                     # wall clock over both devices: 10 copies of ~1 ms
    for _ in range(10):
        dst = src.to("cuda:1")
    runtime.synchronize(0)
    runtime.synchronize(1)
    ms = (time.perf_counter() - t0) * 1e3 / 10
    peer = runtime.can_access_peer(0, 1), runtime.can_access_peer(1, 0)
    print(f"\ncuda:0 -> cuda:1, 256 MiB: {ms:.3f} ms, {(256 << 20) / ms / 1e6:.1f} GB/s; "
          f"cudaDeviceCanAccessPeer(0,1)={peer[0]} (1,0)={peer[1]}")
    assert dst.device == nbx.as_device("cuda:1") and np.array_equal(dst.numpy(), host)


def test_streams_and_events_of_cuda_1_order_work_on_gpu_1():
    x = nbx.from_numpy(np.arange(1 << 20, dtype=np.float32), "cuda:1")
    s = nvidia.Stream(device=1)
    assert s.device == 1 and nvidia.current_stream(1).is_default
    with s:
        assert nvidia.current_stream(1) is s and nvidia.current_stream(0).is_default
        y = x.clone()
        done = nvidia.Event(1).record()
    nvidia.current_stream(1).wait_event(done)
    assert y.device == nbx.as_device("cuda:1") and np.array_equal(y.numpy(), np.arange(1 << 20, dtype=np.float32))
    with pytest.raises(nvidia.StreamMismatchError, match="an event of cuda:0 cannot be recorded on"):
        nvidia.Event(0).record(s)


def test_a_triton_kernel_launched_for_cuda_1_tensors_computes_on_gpu_1():
    assert selftest.triton is not None, "Triton is missing on the GPU machine"
    a = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
    x = nbx.from_numpy(a, "cuda:1")
    out = selftest.add(x, x)
    assert out.device == nbx.as_device("cuda:1") and np.array_equal(out.numpy(), a + a)
    total = nbx.add(x, x)   # the registered cuda implementation (nbx.kernels), launched for cuda:1
    assert total.device == nbx.as_device("cuda:1") and np.array_equal(total.numpy(), a + a)
    assert runtime.get_device() == 0


def test_an_op_across_the_two_gpus_without_a_copy_is_a_cross_device_error():
    a, b = nbx.ones(8, device="cuda:0"), nbx.ones(8, device="cuda:1")
    with pytest.raises(CrossDeviceError, match="different devices"):
        nbx.add(a, b)
    assert np.array_equal(nbx.add(a, b.to("cuda:0")).numpy(), np.full(8, 2, np.float32))
