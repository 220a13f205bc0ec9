"""A Triton driver that answers from nbx's CUDA runtime, so that launching a kernel never imports torch.

Triton's stock CudaDriver (3.6) takes the current device and stream from torch and picks itself
only when torch sees a GPU. The subclass here skips the base classes' __init__ (which import
torch), answers get_current_device / set_current_device / get_current_stream /
get_device_capability from nbx (the stream is nbx's current stream of that device), replaces
the benchmarking hooks with CUDA-event timing and nbx buffers, and is made active with
`triton.runtime.driver.set_active`. It relies only on names Triton 3.6 and later share:
CudaDriver, CudaUtils, CudaLauncher and GPUTarget.
"""
from __future__ import annotations

import importlib.util
import threading

from nbx.core.device import Device
from nbx.core.errors import NotSupportedError

from . import properties, runtime
from .streams import current_handle, current_stream

_lock = threading.Lock()
_installed = None


class _Scratch:
    """Device memory handed to a Triton launch (global or profile scratch); data_ptr() aligned."""

    def __init__(self, size: int, alignment: int):
        from nbx.core.tensor import empty
        alignment = max(int(alignment or 1), 1)   # a Device, not a string: as_device's memo serves it
        self.tensor = empty((size + alignment,), "uint8", Device("cuda", runtime.get_device()))
        base = self.tensor.data_ptr()
        self.ptr = base + (-base % alignment)

    def data_ptr(self) -> int:
        return self.ptr


def scratch_allocator(size: int, alignment: int, stream) -> _Scratch:
    """triton.set_allocator's callable: workspace for kernels that ask for global memory at launch."""
    return _Scratch(size, alignment)


def driver_class():
    """The subclass of Triton's CudaDriver (built on demand: Triton is optional)."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia import driver as stock

    class NbxCudaDriver(stock.CudaDriver):
        def __init__(self):  # CudaDriver/GPUDriver.__init__ import torch: deliberately not called
            self.launcher_cls = stock.CudaLauncher
            self._utils = None

        @property
        def utils(self):
            if self._utils is None:  # compiles Triton's small C helper module on first use
                self._utils = stock.CudaUtils()
            return self._utils

        @utils.setter
        def utils(self, value):
            self._utils = value

        @staticmethod
        def is_active() -> bool:
            return runtime.available()

        def get_current_device(self) -> int:
            return runtime.get_device()

        def set_current_device(self, device: int) -> None:
            runtime.set_device(device)

        def get_current_stream(self, device: int | None = None) -> int:
            return current_stream(device).handle if device is None else current_handle(device)

        def get_device_capability(self, device: int | None = None) -> tuple[int, int]:
            return properties.compute_capability(runtime.get_device() if device is None else device)

        def get_current_target(self):
            index = runtime.get_device()
            major, minor = properties.compute_capability(index)
            return GPUTarget("cuda", major * 10 + minor, properties.properties(index).warp_size)

        def get_active_torch_device(self):
            raise NotSupportedError("nbx's Triton driver is torch-free: there is no torch device to return")

        def get_device_interface(self):
            raise NotSupportedError(
                "nbx's Triton driver is torch-free and has no torch.cuda device interface; "
                "time kernels with nbx.devices.nvidia.timing.bench")

        def get_benchmarker(self):
            from .timing import bench
            return bench

        def get_empty_cache_for_benchmark(self):
            from nbx.core.tensor import empty

            from .timing import L2_FLUSH_BYTES
            return empty((L2_FLUSH_BYTES // 4,), "int32", f"cuda:{runtime.get_device()}")

        def clear_cache(self, cache) -> None:
            index = cache.device.index
            with runtime.device_guard(index):
                runtime.memset_async(cache.data_ptr(), 0, cache.nbytes, current_stream(index).handle)

        def allocate_default_profile_scratch(self, size: int, alignment: int, stream):
            return _Scratch(size, alignment)

    return NbxCudaDriver


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def install():
    """Make nbx's driver Triton's active driver (once per process); returns it."""
    global _installed
    with _lock:
        if _installed is None:
            import triton
            import triton.runtime
            _installed = driver_class()()
            triton.runtime.driver.set_active(_installed)
            _install_scratch_allocator(triton)
            init_specializer_without_torch()
        return _installed


class _RefuseTorch:
    """A meta-path finder that makes `import torch` fail while it is installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"nbx: {name} is not imported for Triton's argument specializer",
                                      name=name)
        return None


def init_specializer_without_torch(first_call=None) -> bool:
    """Initialize Triton's native argument specializer (once a process) without importing torch.

    Triton 3.6's C++ specializer imports torch on its first call, only to look torch.Tensor up
    for a fast path; where torch is installed that import costs 2-3 s of every process's first
    launch (most of a warm first run: tools/bench/first_run.py). nbx launches with its own
    tensors, which the specializer reads by their data_ptr either way, so it is initialized once
    here with `import torch` refused. A process that imported torch already keeps Triton's fast
    path (nothing is refused then), and torch stays importable afterwards as always. Returns
    whether the specializer was initialized here. `first_call` replaces Triton's first call (tests)."""
    import sys
    if "torch" in sys.modules:
        return False
    if first_call is None:
        try:
            from triton._C.libtriton import native_specialize_impl
            from triton.backends.compiler import BaseBackend
        except ImportError:  # a Triton without the native specializer: nothing imports torch there
            return False

        def first_call():
            native_specialize_impl(BaseBackend, 0, False, False, False)
    finder = _RefuseTorch()
    sys.meta_path.insert(0, finder)
    try:
        first_call()
    finally:
        sys.meta_path.remove(finder)
    return True


def _install_scratch_allocator(triton) -> None:
    """Serve Triton's launch-time workspace from nbx, unless the application set an allocator itself."""
    try:
        from triton.runtime import _allocation
        current = _allocation._allocator.get()
        if type(current).__name__ != "NullAllocator":
            return
    except (ImportError, AttributeError):  # a Triton without this hook: leave it alone
        return
    triton.set_allocator(scratch_allocator)


def install_if_triton() -> bool:
    """Install at backend start when Triton is importable; False (and nothing done) when it is not."""
    if not triton_available():
        return False
    install()
    return True


def installed():
    return _installed
