"""The HIP backend without an AMD GPU: the library search, and the backend driven through a fake libamdhip64.

The fake holds "device memory" in host buffers and answers the HIP calls nbx makes with HIP's
return codes, so the backend's own logic (argument passing, error mapping, the architecture name,
bounds checks, copies) runs here as it would on a GPU; only HIP itself is stood in for.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from nbx.core import device_files
from nbx.core.device import _BACKENDS, Device
from nbx.core.errors import IndexingError, OutOfMemoryError
from nbx.devices import amd
from nbx.devices.amd import backend as hip_backend
from nbx.devices.amd import hip, library
from nbx.devices.amd.errors import HipError, HipLibraryNotFound, HipRuntimeTooOld
from nbx.devices.amd.props import ATTRIBUTES, DevicePropR0600
from nbx.memory import allocator

ERROR_NAMES = {0: b"hipSuccess", 2: b"hipErrorOutOfMemory", 100: b"hipErrorNoDevice", 101: b"hipErrorInvalidDevice",
               1: b"hipErrorInvalidValue"}


def make_fake_hip(count=2, arch=b"gfx942:sramecc+:xnack-", warp=64, memory_limit=1 << 20):
    """A stand-in for libamdhip64: plain functions named as HIP's, with HIP's argument order and codes."""
    state = {"device": 0, "buffers": {}, "calls": []}
    fake = type("FakeHip", (), {})()

    def ordinal_ok(index):
        return 0 <= index < count

    def hipGetDeviceCount(p):
        if count == 0:
            return 100
        p._obj.value = count
        return 0

    def hipSetDevice(index):
        state["calls"].append(("hipSetDevice", index))
        if not ordinal_ok(index):
            return 101
        state["device"] = index
        return 0

    def hipGetDevice(p):
        p._obj.value = state["device"]
        return 0

    def hipMalloc(pp, size):
        if size > memory_limit:
            return 2
        buf = ctypes.create_string_buffer(size)
        state["buffers"][ctypes.addressof(buf)] = buf
        pp._obj.value = ctypes.addressof(buf)
        return 0

    def hipFree(ptr):
        return 0 if state["buffers"].pop(ptr, None) is not None else 1

    def hipMemcpy(dst, src, n, kind):
        state["calls"].append(("hipMemcpy", kind))
        ctypes.memmove(dst, src, n)
        return 0

    def hipMemcpyPeer(dst, dst_dev, src, src_dev, n):
        state["calls"].append(("hipMemcpyPeer", dst_dev, src_dev))
        ctypes.memmove(dst, src, n)
        return 0

    def hipMemset(ptr, value, n):
        ctypes.memset(ptr, value, n)
        return 0

    def hipDeviceSynchronize():
        state["calls"].append(("hipDeviceSynchronize", state["device"]))
        return 0

    def hipDeviceGetAttribute(p, attr, index):
        values = {ATTRIBUTES["warp_size"]: warp, ATTRIBUTES["max_shared_memory_per_block"]: 65536}
        if not ordinal_ok(index) or attr not in values:
            return 1
        p._obj.value = values[attr]
        return 0

    def hipDeviceGetName(buf, length, index):
        buf.value = b"AMD Instinct MI300X"
        return 0

    def hipMemGetInfo(pf, pt):
        pf._obj.value, pt._obj.value = 1024, memory_limit
        return 0

    def hipRuntimeGetVersion(p):
        p._obj.value = 60342134
        return 0

    def hipGetDevicePropertiesR0600(address, index):
        props = DevicePropR0600.from_address(address)
        props.gcnArchName, props.warpSize, props.name = arch, warp, b"AMD Instinct MI300X"
        return 0

    def hipGetErrorName(code):
        return ERROR_NAMES.get(code, b"hipErrorUnknown")

    def hipGetErrorString(code):
        return b"described by the fake"

    for fn in list(locals().values()):
        if callable(fn) and fn.__name__.startswith("hip"):
            setattr(fake, fn.__name__, fn)
    fake.state = state
    return fake


@pytest.fixture
def fake_runtime(monkeypatch):
    """A HipRuntime over the fake library, installed as the process's, with a fresh backend and allocator."""
    fake = make_fake_hip()
    rt = hip.HipRuntime(fake, "/fake/libamdhip64.so")
    hip.use_runtime(rt)
    monkeypatch.delitem(allocator._ALLOCATORS, "hip", raising=False)
    backend = hip_backend.HipBackend()
    monkeypatch.setitem(_BACKENDS, "hip", backend)
    device_files.forget()
    yield rt, fake, backend
    hip.use_runtime(None)
    allocator._ALLOCATORS.pop("hip", None)
    device_files.forget()


def test_a_missing_hip_library_is_refused_listing_every_place_tried(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    monkeypatch.delenv("HIP_PATH", raising=False)
    places = library.candidates()
    shown = [p for p, _ in places]
    assert str(tmp_path / "rocm" / "lib" / "libamdhip64.so") in shown
    assert "$HIP_PATH/lib/libamdhip64.so ($HIP_PATH is not set)" in shown
    assert {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.7"} <= set(shown)

    def refuse(path):
        raise OSError(f"{path}: cannot open shared object file")
    with pytest.raises(HipLibraryNotFound) as info:
        library.open_first(places, loader=refuse)
    message = str(info.value)
    assert "the HIP runtime library (libamdhip64) could not be opened; places tried:" in message
    assert f"{tmp_path / 'rocm' / 'lib' / 'libamdhip64.so'} (no such file)" in message
    assert "libamdhip64.so.6 (libamdhip64.so.6: cannot open shared object file)" in message
    assert "/opt/rocm/lib/libamdhip64.so*" in message
    assert len(info.value.tried) == len(places)


def test_register_without_the_runtime_records_why_and_raises_it(monkeypatch):
    monkeypatch.setattr(library, "open_library", lambda: (_ for _ in ()).throw(HipLibraryNotFound(["nowhere"])))
    hip.use_runtime(None)
    monkeypatch.delitem(_BACKENDS, "hip", raising=False)
    with pytest.raises(HipLibraryNotFound, match=r"places tried:\n  nowhere"):
        amd.register()
    assert "hip" not in _BACKENDS
    assert amd.unavailable_reason().startswith("HipLibraryNotFound: the HIP runtime library")


def test_register_with_the_runtime_registers_the_hip_backend(fake_runtime, monkeypatch):
    monkeypatch.delitem(_BACKENDS, "hip")
    amd.register()
    assert _BACKENDS["hip"] is hip_backend.BACKEND and amd.unavailable_reason() is None


def test_devices_are_counted_and_named_and_no_device_is_zero(fake_runtime):
    rt, fake, backend = fake_runtime
    assert backend.device_count() == 2 and backend.device_name(1) == "AMD Instinct MI300X"
    assert rt.version() == 60342134
    empty = hip.HipRuntime(make_fake_hip(count=0), "/fake")
    assert empty.device_count() == 0  # hipErrorNoDevice is HIP's way of saying none


def test_the_target_is_the_gcn_arch_name_and_selects_the_cdna3_file(fake_runtime):
    rt, fake, backend = fake_runtime
    assert backend.target(Device("hip", 0)) == "gfx942:sramecc+:xnack-"
    facts = device_files.in_force("hip:1")
    assert facts.name == "amd/cdna3" and facts.value("compute.warp_size") == 64


def test_a_properties_layout_nbx_does_not_know_is_refused():
    rt = hip.HipRuntime(make_fake_hip(arch=b"\x00garbage"), "/fake")
    with pytest.raises(HipRuntimeTooOld, match=r"wrote a layout nbx does not know"):
        rt.arch_name(0)
    rt = hip.HipRuntime(make_fake_hip(warp=32), "/fake")  # the struct's warpSize must agree with the attribute
    rt._lib.hipDeviceGetAttribute = make_fake_hip(warp=64).hipDeviceGetAttribute
    with pytest.raises(HipRuntimeTooOld, match=r"warpSize 32 against the attribute's 64"):
        rt.arch_name(0)


def test_a_failing_call_is_a_hip_error_with_function_code_and_name(fake_runtime):
    rt, fake, backend = fake_runtime
    with pytest.raises(HipError, match=r"hipSetDevice failed with hipErrorInvalidDevice \(101\): described") as info:
        rt.set_device(7)
    assert (info.value.function, info.value.code, info.value.name) == ("hipSetDevice", 101, "hipErrorInvalidDevice")


def test_a_missing_symbol_asks_for_a_newer_rocm():
    fake = make_fake_hip()
    delattr(fake, "hipGetDevicePropertiesR0600")
    with pytest.raises(HipRuntimeTooOld, match=r"has no hipGetDevicePropertiesR0600: .* ROCm 6\.0 or later"):
        hip.HipRuntime(fake, "/fake/libamdhip64.so").arch_name(0)


def test_bytes_round_trip_through_upload_copy_and_download(fake_runtime):
    rt, fake, backend = fake_runtime
    data = np.arange(64, dtype=np.float32)
    a = backend.allocate(data.nbytes, Device("hip", 0))
    b = backend.allocate(data.nbytes, Device("hip", 1))
    backend.upload(a, 0, data)
    backend.copy(b, 0, a, 0, data.nbytes)
    assert np.array_equal(backend.download(b, 0, data.nbytes).view(np.float32), data)
    backend.copy(a, 4, a, 64, 16)
    assert np.array_equal(backend.download(a, 4, 16).view(np.float32), data[16:20])
    assert ("hipMemcpyPeer", 1, 0) in fake.state["calls"] and ("hipMemcpy", 3) in fake.state["calls"]
    backend.fill_bytes(a, 0, 8, 0)
    assert not backend.download(a, 0, 8).any()


def test_an_out_of_bounds_copy_is_refused_before_hip_is_called(fake_runtime):
    rt, fake, backend = fake_runtime
    a = backend.allocate(16, Device("hip", 0))
    before = len(fake.state["calls"])
    with pytest.raises(IndexingError, match=r"upload of 32 bytes at byte offset 0 is outside the 16-byte storage on "
                                            r"hip:0 \(refused before calling HIP\)"):
        backend.upload(a, 0, np.zeros(8, np.float32))
    with pytest.raises(IndexingError, match=r"copy source of 8 bytes at byte offset 12"):
        backend.copy(a, 0, a, 12, 8)
    with pytest.raises(IndexingError, match=r"download of 4 bytes at byte offset -4"):
        backend.download(a, -4, 4)
    assert len(fake.state["calls"]) == before


def test_out_of_memory_carries_the_figures(fake_runtime):
    rt, fake, backend = fake_runtime
    with pytest.raises(OutOfMemoryError, match=r"hip:0 is out of memory: requested 2.00 MiB") as info:
        backend.allocate(2 << 20, Device("hip", 0))
    assert (info.value.requested, info.value.free, info.value.total) == (2 << 20, 1024, 1 << 20)


def test_memory_goes_back_when_the_last_view_is_gone(fake_runtime):
    rt, fake, backend = fake_runtime
    storage = backend.allocate(256, Device("hip", 0))
    assert len(fake.state["buffers"]) == 1
    del storage
    assert fake.state["buffers"] == {}


def test_synchronize_makes_the_device_current_first(fake_runtime):
    rt, fake, backend = fake_runtime
    backend.synchronize(Device("hip", 1))
    assert fake.state["calls"][-2:] == [("hipSetDevice", 1), ("hipDeviceSynchronize", 1)]
