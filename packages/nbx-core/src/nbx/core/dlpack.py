"""DLPack: handing tensors to numpy, torch, CuPy, JAX (and taking theirs) without copies.

The Python protocol of DLPack 1.x: `Tensor.__dlpack__(stream=, max_version=, dl_device=, copy=)`
returns a 'dltensor_versioned' capsule when the consumer's max_version is (1, 0) or later and a
legacy 'dltensor' capsule otherwise; `__dlpack_device__` names the device; `from_dlpack` takes
any producer. An exported struct keeps the tensor's storage alive in a registry keyed by the
struct's address until the consumer calls the deleter; a capsule nobody consumed (its name
unchanged) calls the deleter when it is collected.

Device backends take part through optional hooks: `dlpack_device_type` (the DLPack device type
code of their memory), `dlpack_export_sync(index, stream)` (make the consumer's stream wait for
the producer's work) and `dlpack_consumer_stream(index)` (the stream number nbx passes to a
producer). Host-memory backends export as kDLCPU.
"""
from __future__ import annotations

import ctypes
import enum
import sys
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)

import numpy as np

from . import dtypes, layout
from .device import CPU, Device, as_device, backends, get_backend
from .errors import DLPackError
from .storage import Storage, host_bytes
from .tensor import Tensor

VERSION = (1, 1)                 # float8 type codes arrived with DLPack 1.1
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1


class DLDeviceType(enum.IntEnum):
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


_HOST_TYPES = (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost, DLDeviceType.kDLROCMHost)


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", DELETER),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


# ---- the capsule C API (names must outlive every capsule: module constants) ----------------------
_VERSIONED, _LEGACY = b"dltensor_versioned", b"dltensor"
_USED = {_VERSIONED: b"used_dltensor_versioned", _LEGACY: b"used_dltensor"}

_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, c_char_p, c_void_p)(("PyCapsule_New", _api))
_is_valid = ctypes.PYFUNCTYPE(c_int, ctypes.py_object, c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object, c_char_p)(("PyCapsule_GetPointer", _api))
_set_name = ctypes.PYFUNCTYPE(c_int, ctypes.py_object, c_char_p)(("PyCapsule_SetName", _api))
_get_destructor = ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object)(("PyCapsule_GetDestructor", _api))
# the fallback destructor sees a capsule being deallocated: it touches it only through raw pointers
_is_valid_raw = ctypes.PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _api))

_EXPORTS: dict[int, tuple] = {}   # struct address -> (struct, shape, strides, holder): the Python-deleter path


class _Export:
    """What an exported struct owns: the tensor's storage, released when the consumer's deleter runs.

    Its count is live_exports(). It is dropped either by numpy's C deleter (Py_XDECREF of the
    struct's manager_ctx) or by the Python deleter's registry; either way __del__ runs as a
    finalizer, which CPython shields from an exception in flight.
    """
    live = 0

    def __init__(self, storage):
        self.storage = storage
        _Export.live += 1

    def __del__(self):
        _Export.live -= 1


def _delete_export(address) -> None:
    """The Python deleter, used only where numpy's C deleter cannot be borrowed (see _c_deleter).

    It runs as a C callback, possibly while the consumer has an exception in flight: so no calls
    (a call would turn that exception into a SystemError), no lock (the GIL makes each dict
    operation atomic), nothing that can raise. Even so, ctypes reports an exception in flight at
    that moment as a SystemError: the C deleter is why the usual path never gets here.
    """
    if address in _EXPORTS:
        del _EXPORTS[address]


def _capsule_destructor(capsule) -> None:
    for name in (_VERSIONED, _LEGACY):  # an unconsumed capsule still holds our struct
        if _is_valid_raw(capsule, name):
            _delete_export(_get_pointer_raw(capsule, name))
            return


_DELETER = DELETER(_delete_export)
_DESTRUCTOR = CFUNCTYPE(None, c_void_p)(_capsule_destructor)
_capsule_destructors: dict[bytes, int | None] = {}
_c_deleters: dict[bytes, int | None] = {}
_mem_malloc = ctypes.PYFUNCTYPE(c_void_p, ctypes.c_size_t)(("PyMem_Malloc", _api))
_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", _api))
_STRUCTS = {_VERSIONED: DLManagedTensorVersioned, _LEGACY: DLManagedTensor}


def _numpy_sample(name: bytes):
    """A capsule numpy exported (its destructor and its struct's deleter are C), or None."""
    try:
        sample = np.empty(0).__dlpack__(max_version=(1, 0)) if name == _VERSIONED else np.empty(0).__dlpack__()
    except (TypeError, BufferError):
        return None
    return sample if _is_valid(sample, name) else None


def _destructor_for(name: bytes) -> int | None:
    """numpy's C destructor of an unconsumed capsule (it calls the struct's deleter), else None.

    A capsule may be dropped while an exception is in flight (a consumer refusing it: numpy given
    a bfloat16 or a CUDA capsule). Python code cannot run then without turning that exception into
    a SystemError, so the destructor and the deleter it calls must be C: numpy's are.
    """
    if name not in _capsule_destructors:
        sample = _numpy_sample(name)
        _capsule_destructors[name] = _get_destructor(sample) if sample is not None else None
    return _capsule_destructors[name]


def _c_deleter(name: bytes) -> int | None:
    """numpy's C deleter of its own exported structs, checked to do what nbx relies on; else None.

    numpy's deleter (numpy >= 1.22, versioned structs from 2.1) frees the struct with PyMem_Free
    (shape and strides in the same allocation) and Py_XDECREFs manager_ctx, taking the GIL itself:
    so a struct allocated with PyMem_Malloc whose manager_ctx holds a reference to an _Export is
    released by it from any thread, exception in flight or not. It is tried once on a probe first.
    """
    if name not in _c_deleters:
        found = None
        struct = _STRUCTS[name]
        sample = _numpy_sample(name) if _destructor_for(name) else None
        if sample is not None:
            address = _get_pointer(sample, name)
            candidate = c_void_p.from_address(address + struct.deleter.offset).value
            probe = object()
            block = _mem_malloc(ctypes.sizeof(struct))
            if candidate and block:
                ctypes.memset(block, 0, ctypes.sizeof(struct))
                c_void_p.from_address(block + struct.manager_ctx.offset).value = id(probe)
                _incref(probe)
                before = sys.getrefcount(probe)
                CFUNCTYPE(None, c_void_p)(candidate)(block)
                found = candidate if sys.getrefcount(probe) == before - 1 else None
        _c_deleters[name] = found
    return _c_deleters[name]


def live_exports() -> int:
    """Structs handed out whose deleter has not run yet (for tests and leak checks)."""
    return _Export.live


# ---- devices ---------------------------------------------------------------------------------
def dlpack_device(device: Device) -> tuple[DLDeviceType, int]:
    backend = get_backend(device.type)
    if backend.host_accessible:
        return DLDeviceType.kDLCPU, 0
    code = getattr(backend, "dlpack_device_type", None)
    if code is None:
        raise DLPackError(f"device type {device.type!r} has no DLPack device type")
    return DLDeviceType(code), device.index or 0


def _nbx_device(device_type: int, device_id: int) -> Device:
    if device_type in _HOST_TYPES:
        return CPU
    for name, backend in backends().items():
        if getattr(backend, "dlpack_device_type", None) == device_type:
            return as_device(f"{name}:{device_id}")
    kind = DLDeviceType(device_type).name if device_type in DLDeviceType._value2member_map_ else device_type
    raise DLPackError(f"DLPack device {kind}:{device_id} has no nbx backend installed "
                      f"(available: {sorted(backends())})")


# ---- export ----------------------------------------------------------------------------------
def to_dlpack(t: Tensor, *, stream=None, max_version=None, dl_device=None, copy=None):
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    source = dlpack_device(t.device)
    copied = False
    if dl_device is not None and (int(dl_device[0]), int(dl_device[1])) != (int(source[0]), source[1]):
        if int(dl_device[0]) != DLDeviceType.kDLCPU:
            raise DLPackError(f"cannot export a tensor on {t.device} to DLPack device {tuple(dl_device)}")
        if copy is False:
            raise DLPackError(f"exporting a tensor on {t.device} to the cpu needs a copy, and copy=False")
        t, copied = t.to(CPU), True
    elif copy:
        t, copied = t.clone(), True
    backend = get_backend(t.device.type)
    if backend.host_accessible:
        from .deferred_checks import check
        check(t.device)  # the host reads it now: a bounds check pending there is raised first
        if stream not in (None, -1) and not copied:
            raise DLPackError(f"stream must be None for a host-memory (kDLCPU) tensor, got {stream!r}")
    else:  # the consumer's stream waits for nbx's work on the tensor (a fresh copy's too)
        sync = getattr(backend, "dlpack_export_sync", None)
        if sync is not None:
            sync(t.device.index, stream)
    readonly = t.storage.readonly and not copied
    if readonly and not versioned:
        raise DLPackError("a read-only tensor needs a versioned DLPack capsule (max_version >= (1, 0)) "
                          "to carry its read-only flag")
    return _capsule(t, versioned, (FLAG_READ_ONLY if readonly else 0) | (FLAG_IS_COPIED if copied else 0))


def _capsule(t: Tensor, versioned: bool, flags: int):
    ndim, n = t.ndim, max(t.ndim, 1)
    name = _VERSIONED if versioned else _LEGACY
    struct = _STRUCTS[name]
    holder = _Export(t.storage)
    deleter = _c_deleter(name)
    if deleter is not None:  # one PyMem block: the struct, then shape and strides (numpy's layout)
        address = _mem_malloc(ctypes.sizeof(struct) + 2 * n * ctypes.sizeof(c_int64))
        if not address:
            raise MemoryError("PyMem_Malloc refused a DLPack struct")
        managed = struct.from_address(address)
        ctypes.memset(address, 0, ctypes.sizeof(struct))
        shape = (c_int64 * n).from_address(address + ctypes.sizeof(struct))
        strides = (c_int64 * n).from_address(address + ctypes.sizeof(struct) + n * ctypes.sizeof(c_int64))
    else:
        managed, shape, strides = struct(), (c_int64 * n)(), (c_int64 * n)()
        address = ctypes.addressof(managed)
    shape[:ndim], strides[:ndim] = t.shape, t.strides
    device_type, device_id = dlpack_device(t.device)
    managed.dl_tensor = DLTensor(data=t.data_ptr() or None, device=DLDevice(device_type, device_id), ndim=ndim,
                                 dtype=DLDataType(*t.dtype.dlpack), shape=ctypes.cast(shape, POINTER(c_int64)),
                                 strides=ctypes.cast(strides, POINTER(c_int64)), byte_offset=0)
    if versioned:
        managed.version, managed.flags = DLPackVersion(*VERSION), flags
    if deleter is not None:
        c_void_p.from_address(address + struct.manager_ctx.offset).value = id(holder)
        c_void_p.from_address(address + struct.deleter.offset).value = deleter
        _incref(holder)  # the struct's reference, dropped by the deleter
    else:
        managed.deleter = _DELETER
        _EXPORTS[address] = (managed, shape, strides, holder)
    return _capsule_new(address, name, _destructor_for(name) or ctypes.cast(_DESTRUCTOR, c_void_p).value)


# ---- import ----------------------------------------------------------------------------------
class _ImportedMemory:
    """Ownership of a consumed DLPack struct: its deleter runs when the last nbx view is gone."""

    def __init__(self, address: int, deleter):
        self.address = address
        self.deleter = deleter

    def __del__(self):
        if self.deleter:
            self.deleter(self.address)


def from_capsule(capsule) -> Tensor:
    """Consume a DLPack capsule (renaming it, so its producer's destructor leaves it alone)."""
    if _is_valid(capsule, _VERSIONED):
        name, struct_type = _VERSIONED, DLManagedTensorVersioned
    elif _is_valid(capsule, _LEGACY):
        name, struct_type = _LEGACY, DLManagedTensor
    else:
        raise DLPackError("not an unconsumed DLPack capsule (its name is neither 'dltensor' nor "
                          "'dltensor_versioned': a capsule can be consumed once)")
    address = _get_pointer(capsule, name)
    managed = struct_type.from_address(address)
    _set_name(capsule, _USED[name])
    owner = _ImportedMemory(address, managed.deleter)
    flags = 0
    if struct_type is DLManagedTensorVersioned:
        if managed.version.major != 1:
            raise DLPackError(f"DLPack version {managed.version.major}.{managed.version.minor} is not "
                              f"supported (nbx reads 1.x)")
        flags = managed.flags
    return _wrap(managed.dl_tensor, owner, bool(flags & FLAG_READ_ONLY))


def _wrap(dl: DLTensor, owner, readonly: bool) -> Tensor:
    dt = dtypes.from_dlpack(dl.dtype.code, dl.dtype.bits, dl.dtype.lanes)
    ndim = dl.ndim
    shape = tuple(dl.shape[i] for i in range(ndim))
    strides = tuple(dl.strides[i] for i in range(ndim)) if dl.strides else layout.contiguous_strides(shape)
    device = _nbx_device(dl.device.device_type, dl.device.device_id)
    item = dt.itemsize
    base = (dl.data or 0) + dl.byte_offset
    lo, hi = layout.element_span(shape, strides, 0)
    ptr, nbytes = base + lo * item, (hi - lo) * item
    if device == CPU:
        host = host_bytes(ptr, nbytes, owner, readonly)  # numpy views keep the producer's memory alive
        storage = Storage(CPU, nbytes, ptr if nbytes else 0, host=host, owner=owner, readonly=readonly)
    else:
        storage = Storage(device, nbytes, ptr, owner=owner, readonly=readonly)
    return Tensor(storage, dt, shape, strides, -lo)


def from_dlpack(x, /, *, device=None, copy: bool | None = None) -> Tensor:
    """A tensor over a DLPack producer's memory (zero-copy when copy is not True).

    device: the nbx device wanted (a copy when it differs, refused by name under copy=False).
    """
    target = None if device is None else as_device(device)
    if not hasattr(x, "__dlpack__"):
        raise DLPackError(f"{type(x).__name__} does not implement __dlpack__")
    device_type, device_id = (int(v) for v in x.__dlpack_device__())
    try:
        source = _nbx_device(device_type, device_id)
    except DLPackError:
        if target != CPU:
            raise
        source = None  # nbx cannot hold it there: ask the producer for a host copy
    if target is not None and source is not None and target != source and copy is False:
        raise DLPackError(f"from_dlpack(copy=False) cannot bring memory on {source} to {target}")
    stream = None
    if source is not None and source != CPU:
        hook = getattr(get_backend(source.type), "dlpack_consumer_stream", None)
        stream = hook(source.index) if hook else None
    kwargs = {"stream": stream, "max_version": VERSION, "copy": copy}
    if source is None:
        kwargs["dl_device"] = (int(DLDeviceType.kDLCPU), 0)
    try:
        capsule = x.__dlpack__(**kwargs)
        producer_copied = bool(copy)
    except TypeError:  # a producer older than DLPack 1.0's keywords
        capsule = x.__dlpack__(stream=stream) if stream is not None else x.__dlpack__()
        producer_copied = False
    out = from_capsule(capsule)
    if target is not None and out.device != target:
        return out.to(target)
    if copy and not producer_copied:
        return out.clone()
    return out


__all__ = ["from_dlpack", "to_dlpack", "from_capsule", "dlpack_device", "DLDeviceType"]
