"""Launching a kernel: its device's facts and settings, the device made current, the output.

Settings (tiles, warps) come from nbx.autotune's certified settings per launch key, or from the
device file in force for the launch's device.

On a GPU the first launch of a kernel with given constants and argument specialisations goes
through Triton's JIT, which compiles it and returns the compiled kernel. Later launches whose
arguments specialise the same way call that compiled kernel's launcher directly, skipping the
JIT's argument binding, specialisation and cache lookup (about 20 us a launch). The key is what
Triton specialises on: a pointer's dtype and 16-byte alignment, an int's width and whether it is
1 or a multiple of 16, the type of any other scalar. With Triton's launch hooks set, every launch
goes through the JIT.

A call site whose own key fixes everything but its tensors' addresses and its scalars' values (the
elementwise plans and the softmax, norm and reduction sites, whose records `Sites` keeps) keeps a
CallSite: its repeats look the compiled kernel up by their pointers' alignment alone, without
forming that key from every argument.
"""
from __future__ import annotations

import numpy as np
import triton

from nbx.core import device_files
from nbx.core.device import Device, get_backend
from nbx.core.dtypes import DType
from nbx.core.errors import ArgumentError
from nbx.core.tensor import Tensor, empty


def facts(device: Device) -> device_files.DeviceFacts:
    return device_files.in_force(device)


_TILES: dict = {}


def tiles(family: str, device: Device) -> dict:
    """The default launch of a kernel family on this device (tiles.<family> of its device file).

    Kept per facts object: device_files.forget() makes new ones, so a reread file is seen."""
    in_force = facts(device)
    found = _TILES.get((family, in_force))
    if found is None:
        found = _TILES[family, in_force] = in_force.value(f"tiles.{family}")
    return found


def screen_tolerance(dtype: DType, device: Device) -> float:
    """The deviation from the float64 oracle a kernel's output of dtype may show on this device."""
    return facts(device).value("autotune.screen_tolerance")[dtype.name]


def output(shape, dtype: DType, device: Device, out: Tensor | None = None) -> Tensor:
    """A new contiguous output, or out (a caller's, the certifier's) checked to be one like it."""
    if out is None:
        return empty(shape, dtype, device)
    if tuple(out.shape) != tuple(shape) or out.dtype is not dtype or not out.is_contiguous():
        raise ArgumentError(f"this launch writes a contiguous {dtype.name} output of shape {tuple(shape)}; got a "
                            f"{out.dtype.name} output of shape {out.shape}, contiguous: {out.is_contiguous()}")
    return out


MAX_COMPILED = 8192
_COMPILED: dict = {}
_INT32 = 2 ** 31


def int_width(value: int) -> str:
    """The type Triton passes an int as: all it specialises a do_not_specialize int on."""
    return "i32" if -_INT32 <= value < _INT32 else "i64" if -2 ** 63 <= value < 2 ** 63 else "u64"


def int_class(value: int) -> tuple:
    """The part of an int argument Triton specialises on: width, == 1, % 16 == 0."""
    return (int_width(value), value == 1, value % 16 == 0)


_INT_CLASSES: dict = {}   # int_class by value, for the ints launches repeat (sizes, strides)
_SCALAR_CLASSES = {type(None): type(None), bool: bool, float: float}


def _direct(args) -> tuple[list, tuple] | None:
    """The launcher's arguments (pointers as ints) and their specialisation key; None where an
    argument is of a kind this key does not describe (the JIT then decides)."""
    direct, spec = list(args), []
    for i, a in enumerate(args):
        kind = type(a)
        if kind is int:
            found = _INT_CLASSES.get(a)
            if found is None:
                found = int_class(a)
                if len(_INT_CLASSES) < 65536:
                    _INT_CLASSES[a] = found
            spec.append(found)
        elif kind in _SCALAR_CLASSES:
            spec.append(kind)
        elif isinstance(a, Tensor):
            pointer = direct[i] = a.data_ptr()
            spec.append((a.dtype, pointer % 16 == 0))
        elif isinstance(a, (int, np.integer)):  # bool is caught above
            direct[i] = int(a)
            spec.append(int_class(int(a)))
        else:
            return None
    return direct, tuple(spec)


def hooks_set() -> bool:
    """Whether Triton's launch hooks want to see launches (3.6 keeps them in HookChains, empty
    unless someone registered a hook)."""
    runtime = triton.knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


class _Compiled:
    """A compiled kernel's launcher and what follows the positional arguments (constants, in the
    kernel's signature order)."""

    __slots__ = ("run", "function", "packed", "tail")

    def __init__(self, kernel, compiled, n_args: int, meta: dict):
        self.run, self.function, self.packed = compiled.run, compiled.function, compiled.packed_metadata
        params = kernel.params[n_args:]
        self.tail = tuple(meta[p.name] if p.name in meta else p.default for p in params)


def run(kernel, grid, device: Device, *args, **meta):
    """kernel[grid](*args, **meta) with device current (Triton reads device and stream from nbx)."""
    backend = get_backend(device.type)
    if device.type == "interp":  # numpy warns of NaNs in masked-off lanes; a GPU says nothing
        with np.errstate(all="ignore"), backend.device_guard(device):
            kernel[grid](*args, **meta)
        return
    prepared = _direct(args)
    key = None if prepared is None else (kernel, device.index, grid, tuple(meta.items()), prepared[1])
    fast = _COMPILED.get(key) if key is not None else None
    if fast is None or hooks_set():
        with backend.device_guard(device):
            compiled = kernel[grid](*args, **meta)
        if key is not None and hasattr(compiled, "packed_metadata"):
            if len(_COMPILED) >= MAX_COMPILED:
                _COMPILED.clear()
            _COMPILED[key] = _Compiled(kernel, compiled, len(args), meta)
        return
    _call(fast, grid, device, backend, prepared[0])


def _stream_of(index: int) -> int:
    return triton.runtime.driver.active.get_current_stream(index)


def _call(fast: _Compiled, grid, device: Device, backend, direct) -> None:
    """The compiled kernel's launcher on device's current stream, device made current if it is not."""
    grid = (*grid, 1, 1)
    stream = _stream_of(device.index)
    if backend.device_count() == 1 or backend.current_device() == device.index:  # one device: it is current
        fast.run(grid[0], grid[1], grid[2], stream, fast.function, fast.packed, None, None, None, *direct, *fast.tail)
        return
    with backend.device_guard(device):
        fast.run(grid[0], grid[1], grid[2], stream, fast.function, fast.packed, None, None, None, *direct, *fast.tail)


_PLAIN = (int, float, bool, type(None))   # scalars the launcher takes as they are


class CallSite:
    """One call site's launches of kernel: grid, device and meta fixed, and every argument's kind
    (tensor dtypes, scalar types, int classes) fixed by the caller's own key, so that only the
    tensors' addresses and the scalars' values change between calls. A repeat finds its compiled
    kernel by its pointers' 16-byte alignment; anything else goes through run()."""

    __slots__ = ("kernel", "grid", "device", "meta", "pointers", "fixed", "_compiled", "_backend", "_direct_ok")

    def __init__(self, kernel, grid, device: Device, meta: dict, pointers: tuple[int, ...], fixed: tuple = ()):
        self.kernel, self.grid, self.device, self.meta = kernel, grid, device, meta
        self.pointers = pointers   # the positions of the tensor arguments
        self.fixed = fixed         # the arguments launch() passes after the tensors on every call
        self._compiled: dict = {}  # alignment of the pointers -> _Compiled
        self._backend = get_backend(device.type)
        # False once an argument proved of a kind the launcher is not handed as it is (a numpy
        # scalar): the caller's key fixes the kinds, so every call of this site then takes run()
        self._direct_ok = device.type != "interp"

    def run(self, args: list) -> None:
        if not self._direct_ok or hooks_set():
            run(self.kernel, self.grid, self.device, *args, **self.meta)
            return
        addresses = [args[i].data_ptr() for i in self.pointers]
        aligned = tuple(a % 16 == 0 for a in addresses)
        fast = self._compiled.get(aligned)
        if fast is None:
            run(self.kernel, self.grid, self.device, *args, **self.meta)
            prepared = _direct(args)
            self._direct_ok = prepared is not None and all(
                type(a) in _PLAIN or i in self.pointers for i, a in enumerate(args))
            if self._direct_ok:
                key = (self.kernel, self.device.index, self.grid, tuple(self.meta.items()), prepared[1])
                found = _COMPILED.get(key)
                if found is not None:
                    self._compiled[aligned] = found
            return
        for i, address in zip(self.pointers, addresses):
            args[i] = address
        _call(fast, self.grid, self.device, self._backend, args)

    def launch(self, tensors: tuple, *tail) -> None:
        """run() of tensors (the first arguments: see site()), the fixed arguments, then tail."""
        self.run([*tensors, *self.fixed, *tail])


def site(kernel, grid, device: Device, n_tensors: int, fixed: tuple, **meta) -> CallSite:
    """The CallSite of launches whose arguments are n_tensors tensors, then fixed (ints the caller's
    key decides), then a tail each call passes (scalars whose types the key fixes, and, for an int
    the kernel does not specialise on, its width: launch.int_width)."""
    return CallSite(kernel, grid, device, meta, tuple(range(n_tensors)), tuple(fixed))


def setting_key(setting: dict | None) -> tuple | None:
    """A launch's overriding setting (the certifier's) as part of a hashable key."""
    return None if setting is None else tuple(sorted(setting.items()))


MAX_SITES = 4096


_EVERY_SITES: list = []


class Sites(dict):
    """A family's call-site records by key; past MAX_SITES (a long run of new shapes) all are forgotten."""

    def __init__(self):
        super().__init__()
        _EVERY_SITES.append(self)

    def remember(self, key, record):
        if len(self) >= MAX_SITES:
            self.clear()
        self[key] = record
        return record


def forget_sites() -> None:
    """Forget every family's call-site records (benchmarks measure the first-call path with it)."""
    for sites in _EVERY_SITES:
        sites.clear()


def compiled_count() -> int:
    """How many compiled kernels the direct path holds (tests check that repeats reuse them)."""
    return len(_COMPILED)


def forget_compiled() -> None:
    _COMPILED.clear()
