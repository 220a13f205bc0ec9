"""A compiled kernel's launcher as nbx.kernels.plans calls it on a launch's repeats: Triton's C launch
itself where Triton's own launcher would add nothing, the stream a launch goes to, and whether Triton's
launch hooks want to see launches (then every launch goes through the JIT)."""
from __future__ import annotations

import inspect
from collections.abc import Callable

import triton


def hooks_set() -> bool:
    """Whether Triton's launch hooks want to see launches (3.6 keeps them in HookChains, empty
    unless someone registered a hook): every launch then goes through the JIT."""
    runtime = triton.knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(enter is not None and getattr(enter, "calls", True)
                or leave is not None and getattr(leave, "calls", True))


HOOK_CHAIN = getattr(triton.knobs, "HookChain", None)  # Triton >= 3.6 keeps its launch hooks in these


class Compiled:
    """A compiled kernel's launcher, called as run(grid x, y, z, stream, *head, launch metadata, enter and
    exit hooks (None: no hook set), *the kernel's arguments, *tail (its constants, in signature order)).

    Triton's CudaLauncher.__call__ (3.6) only asks nbx's allocator for the global and profile scratch
    the kernel declares, then calls its C launch with them after the grid, stream and function, with the
    kernel's cooperative-grid and PDL flags. Where the kernel declares no scratch, run is that C launch
    itself, head those arguments: no Python frame of Triton's a launch (tests/nbx-kernels/test_launch_direct.py
    reads __call__ for it). Any other launcher is called as Triton's JIT calls it."""

    __slots__ = ("run", "head", "tail")

    def __init__(self, kernel, compiled, n_args: int, meta: dict):
        launcher = compiled.run
        if calls_its_c_launch_alone(launcher):
            self.run = launcher.launch
            self.head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                         compiled.packed_metadata)
        else:
            self.run, self.head = launcher, (compiled.function, compiled.packed_metadata)
        params = kernel.params[n_args:]
        self.tail = tuple(meta[p.name] if p.name in meta else p.default for p in params)


def calls_its_c_launch_alone(launcher) -> bool:
    """Whether launcher is Triton's own CudaLauncher (not a subclass) of 3.6's form (its __call__ takes the
    grid, stream and function, then passes the rest on as they come: later Triton versions pass more) for
    a kernel that declares no scratch."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except ImportError:  # a Triton without its NVIDIA backend
        return False
    return (type(launcher) is CudaLauncher and direct_form(CudaLauncher) and not launcher.global_scratch_size
            and not launcher.profile_scratch_size)


def direct_form(cls) -> bool:
    """Whether cls.__call__ is (self, gridX, gridY, gridZ, stream, function, *args), Triton 3.6's."""
    code = getattr(cls.__call__, "__code__", None)
    return (code is not None and code.co_flags & inspect.CO_VARARGS and code.co_kwonlyargcount == 0
            and code.co_varnames[:code.co_argcount] == ("self", "gridX", "gridY", "gridZ", "stream", "function"))


def _stream_of(index: int) -> int:
    return triton.runtime.driver.active.get_current_stream(index)


def stream_lookup(backend) -> Callable[[int], int]:
    """The function giving the handle of the stream a launch on device index goes to: the backend's own
    where it declares one (launch_stream: nbx's current stream, with no Triton driver between), else the
    current stream of Triton's active driver (which nbx's backends answer from that same stream)."""
    return getattr(backend, "launch_stream", None) or _stream_of


__all__ = ["Compiled", "hooks_set", "stream_lookup", "calls_its_c_launch_alone", "direct_form", "HOOK_CHAIN"]
