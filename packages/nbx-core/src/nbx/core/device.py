"""Devices and the backends that serve them.

A backend is found by its device type ("cpu", "cuda", "interp", ...). nbx.core registers the CPU
backend itself; the others come from plugins: distributions registering under the entry-point
group `nbx.devices`, and, for a source tree on PYTHONPATH (which has no entry points), the modules
of the `nbx.devices` namespace package.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from importlib import metadata
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from .errors import DeviceError

ENTRY_POINT_GROUP = "nbx.devices"
KERNELS_GROUP = "nbx.kernels"  # op implementations for GPU backends (the nbx-kernels distribution)


class Device(NamedTuple):
    """A device type and its ordinal (None where the type has no ordinals). A tuple, so that the
    signature keys every op call hashes (nbx.core.spec) hash and compare it in C, not in Python."""
    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device('{self}')"


def as_device(value) -> Device:
    """A Device from 'cpu', 'cuda', 'cuda:1', a Device, or None (cpu)."""
    if value is None:
        return CPU
    if type(value) is Device:
        found = _CHECKED.get(value)
        if found is not None and _BACKENDS.get(value.type) is found[0]:  # checked before, by this backend
            return found[1]
    if isinstance(value, Device):
        return _with_index(value)
    if not isinstance(value, str):
        raise DeviceError(f"a device is a string such as 'cpu' or 'cuda:0', got {value!r}")
    kind, _, index = value.partition(":")
    if index and not index.isdigit():
        raise DeviceError(f"bad device string {value!r}")
    backend = get_backend(kind)
    return _with_index(Device(kind, int(index) if index else None), backend)


def _with_index(device: Device, backend=None) -> Device:
    backend = backend or get_backend(device.type)
    if not backend.indexed:
        if device.index not in (None, 0):
            raise DeviceError(f"device type {device.type!r} has no ordinal {device.index}")
        found = Device(device.type)
        _CHECKED[device] = (backend, found)
        return found
    if device.index is None:
        index = backend.current_device()
    else:
        index = device.index
    count = backend.device_count()
    if not 0 <= index < count:
        raise DeviceError(f"{device.type}:{index} does not exist: {count} {device.type} device(s) found")
    if index is device.index:  # a Device is immutable; one naming its ordinal stays checked
        if type(index) is int:  # a bool or numpy index equals an int key: kept out of the memo
            _CHECKED[device] = (backend, device)
        return device
    return Device(device.type, index)


# Devices naming their ordinal (or of a type without ordinals) -> (the backend that checked them, the
# device): every empty() asks. A backend registered again (another device count) clears them.
_CHECKED: dict = {}


@runtime_checkable
class Backend(Protocol):
    """What a device type provides to nbx.core: memory, copies and synchronisation.

    Op implementations are registered separately, per op, in nbx.core.dispatch.
    """

    name: str
    indexed: bool           # devices are numbered (cuda:0, cuda:1) or not (cpu, interp)
    host_accessible: bool   # storage is host memory numpy can view without a copy
    # optional: runs_triton_kernels = True takes the implementations registered for dispatch.TRITON;
    # launch_stream(index) -> int, the handle of the stream its Triton launches go to (nbx.kernels asks it per
    # launch; without it, Triton's active driver is asked)

    def device_count(self) -> int: ...
    def current_device(self) -> int: ...
    def allocate(self, nbytes: int, device: Device): ...
    def upload(self, storage, byte_offset: int, data: np.ndarray) -> None: ...
    def download(self, storage, byte_offset: int, nbytes: int) -> np.ndarray: ...
    def copy(self, dst, dst_offset: int, src, src_offset: int, nbytes: int) -> None: ...
    def synchronize(self, device: Device) -> None: ...
    def device_guard(self, device: Device): ...   # context manager: device is current inside


_BACKENDS: dict[str, Backend] = {}
_DISCOVERED = False
_PLUGIN_ERRORS: dict[str, str] = {}


def register_backend(backend: Backend) -> None:
    if not isinstance(backend, Backend):
        raise DeviceError(f"{backend!r} does not implement the Backend protocol")
    _BACKENDS[backend.name] = backend
    _CHECKED.clear()
    from . import dispatch
    dispatch.forget_resolved()  # a backend running Triton kernels takes the TRITON registrations


def get_backend(kind: str) -> Backend:
    if kind not in _BACKENDS:
        discover_plugins()
    try:
        return _BACKENDS[kind]
    except KeyError:
        hint = "".join(f"\n  plugin {name} failed to load: {err}" for name, err in _PLUGIN_ERRORS.items())
        raise DeviceError(
            f"no backend for device type {kind!r}; available: {sorted(_BACKENDS)}. "
            f"GPU backends come from extras such as `pip install \"nbx-core[nvidia]\"`{hint}") from None


def backends() -> dict[str, Backend]:
    discover_plugins()
    return dict(_BACKENDS)


def record_unavailable(name: str, reason: str) -> None:
    """A plugin part that cannot serve on this machine says why (shown by `nbx info`)."""
    _PLUGIN_ERRORS[name] = reason


def plugin_errors() -> dict[str, str]:
    discover_plugins()
    return dict(_PLUGIN_ERRORS)


def discover_plugins() -> None:
    """Load each vendor plugin once: entry points first, then a scan of the nbx.devices namespace."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    loaded = set()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        _load_plugin(ep.name, ep.load)
        loaded.add(ep.value.split(":")[0])
    for ep in metadata.entry_points(group=KERNELS_GROUP):
        _load_plugin(ep.name, ep.load)
        loaded.add(ep.value.split(":")[0])
    if "nbx.kernels" not in loaded and importlib.util.find_spec("nbx.kernels") is not None:
        _load_plugin("kernels", lambda: importlib.import_module("nbx.kernels"))
    try:
        namespace = importlib.import_module("nbx.devices")
    except ImportError:
        return
    for info in pkgutil.iter_modules(namespace.__path__, "nbx.devices."):
        if info.name not in loaded:
            _load_plugin(info.name.rsplit(".", 1)[-1], lambda n=info.name: importlib.import_module(n))


def _load_plugin(name: str, load) -> None:
    try:
        module = load()
        register = getattr(module, "register", None)
        if callable(register):
            register()
    except Exception as exc:  # a broken plugin must not break the CPU library; it is reported
        _PLUGIN_ERRORS[name] = f"{type(exc).__name__}: {exc}"


CPU = Device("cpu")
