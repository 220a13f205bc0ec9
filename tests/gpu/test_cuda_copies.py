"""On a real GPU: copies round-trip byte-exact for every dtype and for strided views, fills write
the CPU's bytes, out-of-bounds copies are refused before the driver is called."""
from __future__ import annotations

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import dispatch
from nbx.core.device import discover_plugins
from nbx.devices.nvidia import backend, copies, runtime
from nbx.devices.nvidia.errors import CopyOutOfBoundsError

pytestmark = pytest.mark.gpu


@pytest.fixture(params=["registered", "nvidia"])
def impl(request, monkeypatch):
    """copy_/fill_ as dispatch finds them (nbx.kernels' Triton kernels when installed), and the
    nvidia backend's own (memcpy, memcpy2D, memset, host round trip) forced in their place."""
    discover_plugins()
    if request.param == "nvidia":
        monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("copy_", "cuda"), copies.copy_)
        monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("fill_", "cuda"), copies.fill_)
    return request.param

ALL_DTYPES = sorted(nbx.dtypes.TABLE)


def random_bytes(name: str, shape) -> np.ndarray:
    """Random bit patterns (NaNs and denormals included): a copy must move bytes, not values."""
    dt = nbx.dtypes.TABLE[name]
    raw = np.random.default_rng(abs(hash(name)) % 2**32).integers(
        0, 256, int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw %= 2
    return raw.view(dt.host).reshape(shape)


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_host_to_device_to_host_is_byte_exact_for_every_dtype(name):
    host = random_bytes(name, (37, 129))
    gpu = nbx.from_numpy(host, "cuda")
    assert gpu.device == nbx.as_device("cuda:0")
    assert gpu.numpy().tobytes() == host.tobytes()
    assert gpu.clone().to("cpu").numpy().tobytes() == host.tobytes()


def test_a_large_transfer_round_trips_byte_exact():
    host = random_bytes("uint8", (256 << 20,))
    assert np.array_equal(nbx.from_numpy(host, "cuda").numpy(), host)


def views(t):
    return {
        "column block": t[:, 3:40],
        "every third column": t[:, ::3],
        "row step": t[1::2],
        "reversed": t[::-1, ::-1],
        "transpose": t.T,
        "permuted 3-D": t.reshape(12, 16, 48).permute(2, 0, 1),
        "broadcast row": t[5:6].expand(16, 192),
        "diagonal": t.diagonal(),
        "scalar": t[7, 9],
    }


@pytest.mark.parametrize("case", list(views(nbx.zeros(48, 192))))
@pytest.mark.parametrize("name", ["bool", "int8", "bfloat16", "float32", "float64", "complex128"])
def test_strided_views_copy_byte_exact(case, name, impl):
    host = random_bytes(name, (48, 192))
    expected = np.ascontiguousarray(views(nbx.from_numpy(host))[case].numpy())
    view = views(nbx.from_numpy(host, "cuda"))[case]
    assert view.numpy().tobytes() == expected.tobytes()
    dense = view.contiguous()
    assert dense.is_contiguous() and dense.numpy().tobytes() == expected.tobytes()


@pytest.mark.parametrize("name", ["uint8", "float16", "float32", "int64"])
def test_writes_into_strided_views_match_numpy(name, impl):
    host = random_bytes(name, (40, 64))
    gpu = nbx.from_numpy(host, "cuda")
    expected = host.copy()
    patch = random_bytes(name, (20, 16))
    gpu[::2, 10:58:3] = nbx.from_numpy(patch, "cuda")
    expected[::2, 10:58:3] = patch
    gpu[:, -1] = nbx.from_numpy(host[:, 0].copy(), "cuda")
    expected[:, -1] = host[:, 0]
    assert gpu.numpy().tobytes() == expected.tobytes()


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_zeros_ones_and_full_write_the_cpu_bytes(name, impl):
    dt = nbx.dtypes.TABLE[name]
    value = True if dt.kind == "bool" else (-3 if dt.is_signed and dt.kind != "float" else 3)
    if dt.kind == "float":
        value = -2.5
    for make in (lambda d: nbx.zeros(1001, dtype=name, device=d), lambda d: nbx.ones(1001, dtype=name, device=d),
                 lambda d: nbx.full((1001,), value, dtype=name, device=d)):
        assert make("cuda").numpy().tobytes() == make("cpu").numpy().tobytes()


def test_a_pattern_fill_larger_than_the_upload_chunk_is_exact(impl):
    out = nbx.full((3 << 20,), 1.25 + 2j, dtype="complex128", device="cuda")  # 48 MiB, 16-byte pattern
    assert (out.numpy() == 1.25 + 2j).all()


def test_clone_to_and_the_same_device_copy_are_device_to_device(impl):
    src = nbx.from_numpy(random_bytes("float32", (1000,)), "cuda")
    assert src.to("cuda:0") is src
    copy = src.clone()
    assert copy.data_ptr() != src.data_ptr() and copy.numpy().tobytes() == src.numpy().tobytes()


def test_a_peer_copy_between_the_same_device_moves_the_bytes():
    src = nbx.from_numpy(random_bytes("uint8", (4096,)), "cuda")
    dst = nbx.empty((4096,), dtype="uint8", device="cuda")
    runtime.memcpy_peer(dst.data_ptr(), 0, src.data_ptr(), 0, 4096)
    assert dst.numpy().tobytes() == src.numpy().tobytes()


class CountingLibrary:
    """Wraps the opened libcudart and counts the calls that move bytes."""

    NAMES = ("cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpyPeerAsync")

    def __init__(self, monkeypatch):
        self.calls = []
        lib = runtime.rt().lib
        for name in self.NAMES:
            original = getattr(lib, name)
            monkeypatch.setattr(lib, name, self._counting(name, original))

    def _counting(self, name, original):
        def call(*args):
            self.calls.append(name)
            return original(*args)
        return call


def test_out_of_bounds_copies_are_refused_before_the_driver_is_called(monkeypatch, impl):
    a = nbx.zeros(256, dtype="float32", device="cuda")
    b = nbx.ones(256, dtype="float32", device="cuda")
    counter = CountingLibrary(monkeypatch)
    expected = "copy destination of 1024 bytes at byte offset 4 is outside the 1024-byte"
    with pytest.raises(CopyOutOfBoundsError, match=expected):
        backend.BACKEND.copy(a.storage, 4, b.storage, 0, 1024)
    with pytest.raises(CopyOutOfBoundsError, match="download of 8 bytes at byte offset 1020"):
        backend.BACKEND.download(a.storage, 1020, 8)
    with pytest.raises(CopyOutOfBoundsError, match="copy source of 2048 bytes"):
        nbx.Tensor(b.storage, b.dtype, (512,)).clone()
    assert counter.calls == []
    assert (a.numpy() == 0).all()


def test_the_planner_sends_a_column_block_through_one_2d_copy(monkeypatch):
    t = nbx.from_numpy(random_bytes("float32", (64, 64)), "cuda")
    out = nbx.empty((64, 16), dtype="float32", device="cuda")
    counter = CountingLibrary(monkeypatch)
    copies.copy_(out, t[:, 8:24])
    assert counter.calls == ["cudaMemcpy2DAsync"]
    assert out.numpy().tobytes() == np.ascontiguousarray(t.numpy()[:, 8:24]).tobytes()
    assert copies.plan_2d((64, 16), (16, 1), (64, 1), 4) == (64, 64, 64, 256)


@pytest.mark.parametrize("nbytes", [(8 << 20) - 1, 8 << 20, (100 << 20) + 13])
def test_a_large_pageable_upload_through_the_staging_buffers_is_byte_exact(nbytes, monkeypatch):
    # staged from 8 MiB up (as memory.staged_upload_from_bytes would say): four 32 MiB chunks and a
    # tail at 100 MiB, so each of the two pinned buffers is refilled after its event
    from nbx.devices.nvidia import staging
    monkeypatch.setitem(staging.FROM_BYTES, 0, 8 << 20)
    src = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    on_device = nbx.from_numpy(src, "cuda:0")
    np.testing.assert_array_equal(on_device.numpy(), src)
