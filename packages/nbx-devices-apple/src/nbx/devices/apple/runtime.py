"""Metal through PyObjC, and the Triton build for Metal that compiles nbx's kernels; both found lazily.

`load()` checks, in order: macOS on Apple silicon, the `Metal` module of pyobjc-framework-Metal and
a default MTLDevice, then a Triton build for Metal (a `triton.backends` entry point or package
named metal/apple, or the triton_msl / triton_metal distributions). Anything missing is one
MetalUnavailable naming what was looked at. Memory is MTLBuffers in shared storage: one physical
memory that the host reads at the buffer's contents address once the GPU work writing it is done.
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.util
import platform
import sys
import threading
from importlib import metadata

from .errors import MetalUnavailable

TRITON_BACKEND_GROUP = "triton.backends"
TRITON_METAL_NAMES = ("metal", "apple")
TRITON_METAL_MODULES = ("triton.backends.metal", "triton.backends.apple", "triton_msl", "triton_metal")
STORAGE_MODE_SHARED = 0  # MTLResourceStorageModeShared << MTLResourceStorageModeShift


def target_from_name(name: str) -> str:
    """The target string of a Metal device: its name lowercased, words joined by '-'.

    "Apple M4 Pro" -> 'apple-m4-pro'
    """
    return "-".join(name.lower().split())


def find_triton_metal() -> tuple[str | None, list[str]]:
    """(where the Triton build for Metal was found or None, every place looked at)."""
    tried = []
    for ep in metadata.entry_points(group=TRITON_BACKEND_GROUP):
        if ep.name in TRITON_METAL_NAMES:
            return f"entry point {TRITON_BACKEND_GROUP}:{ep.name} ({ep.value})", tried
    tried.append(f"entry points {TRITON_BACKEND_GROUP} named {' or '.join(TRITON_METAL_NAMES)} (none)")
    for module in TRITON_METAL_MODULES:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            return f"module {module}", tried
        tried.append(f"module {module} (not installed)")
    return None, tried


class MetalRuntime:
    """The default MTLDevice, its command queue, and the MTLBuffers handed out, by contents address."""

    def __init__(self, device, triton_metal: str):
        self.device = device
        self.triton_metal = triton_metal
        self.queue = device.newCommandQueue()
        self._buffers: dict[int, object] = {}
        self._lock = threading.Lock()

    def name(self) -> str:
        return str(self.device.name())

    def target(self) -> str:
        return target_from_name(self.name())

    def malloc(self, nbytes: int, index: int) -> int:
        """A shared-storage MTLBuffer of nbytes; returns its contents address (the Storage's pointer)."""
        from nbx.core.device import Device
        from nbx.core.errors import OutOfMemoryError
        buffer = self.device.newBufferWithLength_options_(nbytes, STORAGE_MODE_SHARED)
        if buffer is None:  # Metal answers nil when it cannot serve the length
            raise OutOfMemoryError(f"Metal refused a buffer of {nbytes} bytes on metal:{index}", requested=nbytes,
                                   device=Device("metal", index))
        view = buffer.contents().as_buffer(nbytes)
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(view))
        with self._lock:
            self._buffers[ptr] = buffer
        return ptr

    def free(self, ptr: int, index: int) -> None:
        with self._lock:
            self._buffers.pop(ptr, None)  # the last reference: Metal releases the buffer

    def buffer_at(self, ptr: int):
        """The MTLBuffer whose contents start at ptr (a launcher binds it with the offset it needs)."""
        with self._lock:
            return self._buffers[ptr]


_runtime: MetalRuntime | None = None
_lock = threading.Lock()


def load() -> MetalRuntime:
    """The process's Metal runtime, made at first use; MetalUnavailable names what is missing."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = _load()
        return _runtime


def _load() -> MetalRuntime:
    tried = [f"platform {sys.platform} on {platform.machine() or 'an unknown machine'}"]
    if sys.platform != "darwin" or platform.machine() != "arm64":
        raise MetalUnavailable("Metal needs macOS on Apple silicon (darwin, arm64)", tried)
    try:
        metal = importlib.import_module("Metal")
    except ImportError as exc:
        raise MetalUnavailable("pyobjc-framework-Metal is not installed (pip install pyobjc-framework-Metal)",
                               tried + [f"module Metal ({exc})"]) from None
    device = metal.MTLCreateSystemDefaultDevice()
    if device is None:
        raise MetalUnavailable("MTLCreateSystemDefaultDevice returned no device", tried + ["module Metal (found)"])
    where, looked = find_triton_metal()
    if where is None:
        raise MetalUnavailable("no Triton build for Metal is installed, so no nbx kernel can run", tried + looked)
    return MetalRuntime(device, where)


def use_runtime(rt: MetalRuntime | None) -> None:
    """Replace the process's runtime (tests drive the backend through a fake device); None forgets it."""
    global _runtime
    with _lock:
        _runtime = rt
