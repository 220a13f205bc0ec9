"""The one launch path of every kernel family: a pure plan, one runtime, one cache.

A family turns a call's layouts (shapes, strides, dtypes), the device's facts and the served
setting into a `LaunchPlan`: the launches (kernel, grid, argument template, constants), the
output and workspace buffers (also what the op's declared cost reads) and the inputs it reads
through a dense copy. A template's `Slot`s name what each call supplies: its tensors, its outputs
and workspace (allocated by the runtime) and its per-call scalars (a scale, an eps). Everything
else in the template is fixed by the plan.

`execute(plan, values)` runs any plan. On a GPU a launch's first call goes through Triton's JIT;
its repeats call the compiled kernel's launcher directly, found by what Triton specialises each
slot on, read from the kernel's own signature: a pointer by its element type and its 16-byte
alignment, an int by its width and (unless the kernel lists it in `do_not_specialize`) by being 1
or a multiple of 16, any other scalar by its type. A family never restates those rules.

`prepared(plan)` is execute for a signature's repeats (nbx.core.spec's fast path): generated once
per plan, and able to write a signature's whole repeat with its work (`write`, _write_repeat): no
values dict, each launch keyed and called as its runner's bound launch would (_launch_source, the
one writer of both).

`cached(op, signature, build)` keeps plans in one bounded cache keyed by (op, signature,
generation). The signature is the family's: everything `build` reads (the tensors' shapes,
strides and dtypes, the device, flags, an overriding setting). The generation moves when the
device files are read again (`device_files.forget()`) or the autotune serving state is reset:
every plan made before is then dropped. `reset()` drops them for tests and benchmarks. `constant(values, dtype, device)` keeps a small
device tensor a launch reads (a pad's fill) in the same cache.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from math import prod

import numpy as np
import triton

from nbx.core import device_files, dtypes, spec
from nbx.core import layout as core_layout
from nbx.core.device import Device, get_backend
from nbx.core.dispatch import observer
from nbx.core.dtypes import DType
from nbx.core.tensor import Tensor

from . import dependent_launch
from .compiled_launch import HOOK_CHAIN, Compiled, hooks_set, stream_lookup
from .cost import LAUNCH, RESULT, Buffer


@dataclass(frozen=True)
class Slot:
    """A template argument each call supplies: values[name], or a view of it (part: its index
    `part` along dim 0; offset: the element `offset` further, read as a 1-element view)."""
    name: str
    part: int | None = None
    offset: int = 0


@dataclass(frozen=True)
class BufferSpec:
    """An output (lifetime RESULT) or workspace (LAUNCH) buffer the runtime allocates per call."""
    name: str
    shape: tuple[int, ...]
    dtype: DType
    lifetime: str = RESULT

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize

    def buffer(self) -> Buffer:
        return Buffer(self.name, self.nbytes, self.lifetime)


@dataclass(frozen=True)
class Launch:
    """kernel[grid](*args, **meta), args a template of fixed values and Slots."""
    kernel: object
    grid: tuple[int, ...]
    args: tuple
    meta: dict
    # tensor descriptors each program makes (tl.make_tensor_descriptor): Triton's launcher asks nbx's
    # allocator for their global scratch at every launch (descriptor_scratch)
    descriptors: int = 0
    _runner: list = field(default_factory=list, compare=False, repr=False)  # the runtime's, made once


@dataclass(frozen=True)
class LaunchPlan:
    device: Device
    launches: tuple[Launch, ...]
    outputs: tuple[BufferSpec, ...] = ()
    workspace: tuple[BufferSpec, ...] = ()
    copies: tuple[str, ...] = ()   # inputs read through a dense copy (workspace of the call too)
    detail: object = None          # the family's own record of its decisions (tile, path), for its cost and tests

    _allocations: list = field(default_factory=list, compare=False, repr=False)  # the runtime's, made once

    def buffers(self) -> tuple[Buffer, ...]:
        """The outputs, the workspace and the descriptors' scratch, as the declared cost lists them."""
        scratch = descriptor_scratch(self)
        return tuple(b.buffer() for b in self.outputs + self.workspace) + ((scratch,) if scratch else ())


def descriptor_scratch(plan: LaunchPlan) -> Buffer | None:
    """The global scratch Triton's launcher asks for at the plan's launches that make tensor descriptors:
    programs x descriptors x the device's descriptor_scratch_bytes, plus as many bytes of alignment
    (nbx's allocator, nvidia.triton_driver.scratch_allocator, pads by the alignment it is asked). Each
    launch's scratch is freed when it returns, so the largest is what the call holds at once. None where
    the device's launcher asks for none (no such fact: the interpreter's descriptors are host objects)."""
    wanted = [prod(one.grid) * one.descriptors for one in plan.launches if one.descriptors]
    if not wanted:
        return None
    in_force = device_files.in_force(plan.device)
    if "matrix_unit.descriptor_scratch_bytes" not in in_force:
        return None
    each = int(in_force.value("matrix_unit.descriptor_scratch_bytes"))
    return Buffer("descriptor_scratch", max(wanted) * each + each, LAUNCH)


def workspace(name: str, shape, dtype: DType) -> BufferSpec:
    return BufferSpec(name, tuple(shape), dtype, LAUNCH)


def output(name: str, shape, dtype: DType) -> BufferSpec:
    return BufferSpec(name, tuple(shape), dtype, RESULT)


# ---- the cache ------------------------------------------------------------------------------------

MAX_PLANS = 8192
_PLANS: dict = {}
_generation_cached = [device_files.generation()]


def cached(op: str, signature: tuple, build: Callable[[], LaunchPlan]) -> LaunchPlan:
    """The plan of op for signature, built once per generation; past MAX_PLANS the oldest goes."""
    generation = device_files.generation()
    key = (op, signature, generation)
    found = _PLANS.get(key)
    if found is None:
        if generation != _generation_cached[0]:  # every plan of an older generation is stale
            _PLANS.clear()
            _generation_cached[0] = generation
        if len(_PLANS) >= MAX_PLANS:
            del _PLANS[next(iter(_PLANS))]
        found = _PLANS[key] = build()
    return found


def constant(values: np.ndarray, dtype: DType, device) -> Tensor:
    """A kept device tensor of values (a fill a kernel reads through a pointer: no upload a call),
    held in the plan cache as the `detail` of a plan of no launch: bounded and dropped with the plans."""
    from nbx.core.ops.creation import asarray
    host = np.ascontiguousarray(values, dtype=dtype.host)
    signature = (dtype, device, host.shape, host.tobytes())
    return cached("constant", signature, lambda: LaunchPlan(device, (), detail=asarray(host, device=device))).detail


def reset() -> None:
    """Forget every plan and the compiled launchers they hold (tests, benchmarks of the first call),
    and the front-ends' prepared signatures holding them."""
    _PLANS.clear()
    spec.forget()


def cached_count(op: str | None = None) -> int:
    """How many plans the cache holds (of op, when given)."""
    return len(_PLANS) if op is None else sum(1 for key in _PLANS if key[0] == op)


def compiled_count() -> int:
    """How many compiled launchers the cached plans hold (tests check that repeats reuse them)."""
    return sum(len(l._runner[0].compiled) for p in _PLANS.values() for l in p.launches if l._runner)


def setting_key(setting: dict | None) -> tuple | None:
    """A launch's overriding setting (the certifier's) as part of a signature."""
    return None if setting is None else tuple(sorted(setting.items()))


# ---- the runtime ----------------------------------------------------------------------------------

def execute(plan: LaunchPlan, values: dict) -> dict:
    """Run plan over values (its slots by name): the copies made, the outputs and workspace not
    given allocated, every launch in order. Returns values, outputs included."""
    device = plan.device
    for name in plan.copies:
        if values.get(name) is not None:
            values[name] = values[name].contiguous()
    if plan._allocations:
        backend, buffers = plan._allocations
    else:
        backend, buffers = _allocations(plan)
    watching = observer()
    for name, nbytes, dtype, shape, strides in buffers:
        if values.get(name) is None:  # what nbx.core.tensor.empty makes, its arguments checked once
            storage = backend.allocate(nbytes, device)
            if watching is not None:  # a step being captured plans its memory, as empty() tells it
                watching.allocated(storage)
            values[name] = Tensor._of(storage, dtype, shape, strides)
    for one in plan.launches:
        runner = one._runner[0] if one._runner else _make_runner(one, device)
        runner.run(values)
    return values


def prepared(plan: LaunchPlan) -> Callable[[dict], dict] | None:
    """execute(plan, values) for a signature's repeats (nbx.core.spec's fast path, which runs only
    while no observer watches): the backend, the buffers and the launch runners looked up once.
    None for a plan reading dense copies (execute makes them)."""
    if plan.copies:
        return None
    backend, buffers = plan._allocations if plan._allocations else _allocations(plan)
    runners = tuple(l._runner[0] if l._runner else _make_runner(l, plan.device) for l in plan.launches)
    # run's loops unrolled over this plan's buffers and launches (one source for every plan): each
    # output not given allocated as empty() makes it, then every launch's one entry, its runner's run
    # (Tensor._of inline: no frame of its a call)
    names = {"allocate": backend.allocate, "device": plan.device, "new": object.__new__, "Tensor": Tensor}
    body = []
    for i, (name, nbytes, dtype, shape, strides) in enumerate(buffers):
        names.update({f"name{i}": name, f"nbytes{i}": nbytes, f"dtype{i}": dtype, f"shape{i}": shape,
                      f"strides{i}": strides})
        body += [f"if values.get(name{i}) is None:",
                 "    t = new(Tensor)",
                 f"    t._storage, t.dtype, t.shape, t._strides, t._offset = allocate(nbytes{i}, device), dtype{i}, "
                 f"shape{i}, strides{i}, 0",
                 f"    values[name{i}] = t"]
    for i, runner in enumerate(runners):
        names[f"runner{i}"] = runner
        body.append(f"runner{i}.run(values)")
    source = "def run(values):\n" + "".join(f"    {line}\n" for line in body) + "    return values\n"
    exec(compile(source, f"<nbx prepared run of {len(buffers)} buffers, {len(runners)} launches>", "exec"), names)
    run = names["run"]
    run.write = partial(_write_repeat, plan.device, backend, buffers, runners)
    return run


def _write_repeat(device: Device, backend, buffers: tuple, runners: tuple, exprs: dict, sample: dict,
                  result: str | None) -> tuple[list, dict] | None:
    """The prepared run's `write` (nbx.core.spec's repeat of a signature, Slots.run.write): the source of
    run(values)[result] written out for one signature, with no values dict and no frame of run's, of its
    runners' or of their bound launches. exprs gives each slot's value as an expression of the repeat
    (a call's argument, a value fixed for the signature), sample its value in this call, whose kind
    (and, for an int, whose value) every call of the signature repeats: nbx.core.spec keys a signature
    by its tensors' layouts, its floats' types and its other arguments' values, so no kind is checked
    again. Each output not given is allocated as run allocates it, then each launch is written as its
    bound launch is (_launch_source); where one cannot go that way (no compiled launcher yet, a hook
    set, another device current) the values made so far go to run's own path, from that launch on
    (`run` and `result` name the repeat's prepared run and result slot). None where a slot is not in
    exprs or reads a buffer through a view, and on the interpreter (whose launches are all the JIT's):
    run's path then serves every repeat."""
    if any(runner.interp for runner in runners):
        return None
    names = {"_allocate": backend.allocate, "_device": device, "_new": object.__new__, "Tensor": Tensor}
    body, local = [], dict(exprs)  # slot -> its expression (outputs: their local)
    made = {}  # a buffer allocated here -> (its dtype, its address) as expressions
    for i, (name, nbytes, dtype, shape, strides) in enumerate(buffers):
        if sample.get(name) is not None:  # given (a tensor on every call of the signature)
            continue
        names.update({f"_nbytes{i}": nbytes, f"_dtype{i}": dtype, f"_shape{i}": shape, f"_strides{i}": strides})
        body += [f"_s{i} = _allocate(_nbytes{i}, _device)", f"_o{i} = _new(Tensor)",
                 f"_o{i}._storage, _o{i}.dtype, _o{i}.shape, _o{i}._strides, _o{i}._offset = "
                 f"_s{i}, _dtype{i}, _shape{i}, _strides{i}, 0"]
        local[name], made[name] = f"_o{i}", (f"_dtype{i}", f"_s{i}._ptr")
    for k, runner in enumerate(runners):
        if any(slot not in local or (view is not None and slot in made) for _, slot, view, _ in runner.slots):
            return None
        values = "{" + ", ".join(f"{name!r}: {x}" for name, x in local.items()) + "}"
        rest = f"return run_from{k}({values})" + ("" if result is None else "[result]")
        names[f"run_from{k}"] = partial(_run_from, runners[k:])
        written = _launch_source(runner, local.__getitem__, lambda slot: _A_TENSOR if slot in made else sample[slot],
                                 rest, rest, f"_l{k}_", checked=lambda slot: False, made=made)
        if written is None:
            return None
        body += written[0]
        names.update(written[1])
    body.append("return " + ("{" + ", ".join(f"{name!r}: {x}" for name, x in local.items()) + "}"
                             if result is None else local[result]))
    return body, names


def _run_from(runners: tuple, values: dict) -> dict:
    """The launches of runners over values, each through its runner's run (a written repeat's way out)."""
    for runner in runners:
        runner.run(values)
    return values


def _allocations(plan: LaunchPlan) -> tuple:
    specs = plan.outputs + plan.workspace
    for spec in specs:  # refused here as empty() would refuse it, without allocating (a captured
        dtypes.as_dtype(spec.dtype)            # step's recorder counts every allocation)
        core_layout.as_shape(spec.shape)
    found = (get_backend(plan.device.type), tuple(
        (b.name, b.nbytes, b.dtype, b.shape, core_layout.contiguous_strides(b.shape)) for b in specs))
    plan._allocations.extend(found)
    return found


_I32, _I64 = 2 ** 31, 2 ** 63


def int_class(value: int, free: bool = False):
    """What Triton specialises an int argument on: its width (0: int32, 1: int64, 2: uint64) and,
    unless the kernel lists it in do_not_specialize (free), whether it is 1 and a multiple of 16."""
    width = 0 if -_I32 <= value < _I32 else 1 if -_I64 <= value < _I64 else 2
    return width if free else (width, value == 1, value % 16 == 0)


def _at(t: Tensor, offset: int) -> Tensor:
    return Tensor(t.storage, t.dtype, (1,), (1,), t.storage_offset + offset)


def _view(slot: Slot):
    """The function taking a slot's value to what the kernel reads, or None (the value itself)."""
    if slot.part is None and not slot.offset:
        return None
    if slot.offset:
        return lambda v: _at(v if slot.part is None else v[slot.part], slot.offset)
    return lambda v: v[slot.part]


def _plain(v):
    """A numpy scalar as the Python scalar the launcher takes."""
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _slow_key(v, free: bool):
    """(what the launcher takes, its specialisation) of a value of a kind the fast loop does not
    name; the same keys as that loop."""
    v = _plain(v)
    if isinstance(v, Tensor):
        return v.data_ptr(), (v.dtype, v.data_ptr() % 16 == 0)
    return v, int_class(v, free) if type(v) is int else type(v)


class _Runner:
    """One launch's runtime: its template, its slots with the specialisation rule of their kernel
    parameters, and its compiled launchers by the slots' specialisation. Written for few Python
    calls a launch: an eager decode step runs thousands of them."""

    __slots__ = ("launch", "device", "backend", "template", "slots", "compiled", "interp", "single", "grid", "bound",
                 "stream_of", "meta")

    def __init__(self, one: Launch, device: Device):
        self.launch, self.device, self.backend = one, device, get_backend(device.type)
        self.stream_of = stream_lookup(self.backend)
        self.interp = device.type == "interp"
        self.single = self.interp or self.backend.device_count() == 1   # one device: it is always current
        self.template = list(one.args)
        self.grid = (*one.grid, 1, 1)[:3]
        self.meta = dependent_launch.launch_meta(one.kernel, device, one.meta)  # the plan's, PDL where allowed
        params = getattr(one.kernel, "params", None) or []
        free = {p.num for p in params if getattr(p, "do_not_specialize", False)}
        self.slots = tuple((pos, a.name, _view(a), pos in free) for pos, a in enumerate(one.args) if isinstance(a, Slot))
        self.compiled: dict = {}
        self.bound = None  # the repeats' launch, written for the kinds of its slots (_bound_launch); False: none

    def arguments(self, values: dict) -> list:
        """The template filled with this call's values (tensors as tensors: what the JIT takes)."""
        args = self.template.copy()
        for pos, name, view, _ in self.slots:
            v = values[name]
            args[pos] = _plain(v if view is None else view(v))
        return args

    def run(self, values: dict) -> None:
        bound = self.bound
        if not (bound and bound(values)):
            self.launch_unbound(values)

    def launch_unbound(self, values: dict) -> None:
        """The launch by run's own loop: the first calls (the JIT's), a hook set, other kinds of slots."""
        bound = self.bound
        one = self.launch
        if self.interp:  # numpy warns of NaNs in masked-off lanes; a GPU says nothing
            with np.errstate(all="ignore"), self.backend.device_guard(self.device):
                one.kernel[one.grid](*self.arguments(values), **self.meta)
            return
        args, key = self.template.copy(), []
        for pos, name, view, free in self.slots:
            v = values[name]
            if view is not None:
                v = view(v)
            kind = type(v)
            if kind is Tensor:  # Triton types a pointer by its element type too (data_ptr(), inlined)
                dtype = v.dtype
                key.append(dtype)
                v = v._storage._ptr + v._offset * dtype.itemsize
                key.append(v % 16 == 0)
            elif kind is int:  # int_class, written out: the hot loop of every launch
                width = 0 if -_I32 <= v < _I32 else 1 if -_I64 <= v < _I64 else 2
                key.append(width if free else (width, v == 1, v % 16 == 0))
            elif kind is float or kind is bool or v is None:
                key.append(kind)
            else:  # a numpy scalar, a Tensor subclass: the slow way, keyed alike
                v, k = _slow_key(v, free)
                key.append(k)
            args[pos] = v
        fast = self.compiled.get(tuple(key))
        if fast is None or hooks_set():
            with self.backend.device_guard(self.device):
                compiled = one.kernel[one.grid](*self.arguments(values), **self.meta)
            if hasattr(compiled, "packed_metadata"):
                self.compiled[tuple(key)] = Compiled(one.kernel, compiled, len(args), self.meta)
            return
        if bound is None:
            self.bound = _bound_launch(self, values)
        grid, index = self.grid, self.device.index
        if self.single or self.backend.current_device() == index:
            fast.run(grid[0], grid[1], grid[2], self.stream_of(index), *fast.head, None, None, None, *args, *fast.tail)
            return
        with self.backend.device_guard(self.device):
            fast.run(grid[0], grid[1], grid[2], self.stream_of(index), *fast.head, None, None, None, *args, *fast.tail)


def _bound_launch(runner: _Runner, values: dict):
    """runner's repeats as one function written for the kinds its slots hold in this call (a tensor,
    an int, a float, a bool, None): run's loop unrolled, its keys and arguments the same, so that a
    repeat spends no Python on the loop itself (an eager decode step runs thousands of launches).
    It returns False, for run's own loop to launch, where the compiled launcher is not found, a hook
    is set, the device is not current, or a slot holds another kind (then runner keeps run's loop).
    Not written (False) where a slot holds a kind run's loop keys the slow way (a numpy scalar, a
    Tensor subclass)."""
    written = _launch_source(runner, lambda name: f"values[{name!r}]", values.__getitem__, "return _other_kinds()",
                             "return False", "")
    if written is None:
        return False
    lines, names = written
    names["runner"] = runner
    source = ("def _other_kinds():\n    runner.bound = False\n    return False\n"
              "def launch(values):\n" + "".join(f"    {line}\n" for line in lines) + "    return True\n")
    exec(compile(source, f"<nbx launch of {getattr(runner.launch.kernel, '__name__', 'a kernel')}>", "exec"), names)
    return names["launch"]


def _launch_source(runner: _Runner, read: Callable[[str], str], sample: Callable[[str], object], other: str,
                   miss: str, p: str, checked: Callable[[str], bool] = lambda name: True,
                   made: dict | None = None) -> tuple[list, dict] | None:
    """The source of a repeat of runner's launch, written for the kinds its slots hold now (sample(name)
    gives a slot's value): each slot's value read by the expression read(name), checked to hold its kind
    (else the statement `other`; not where checked(name) says it always holds that kind: an output the
    repeat allocates, a value fixed for the signature, whose int class is then fixed too), keyed as run's
    loop keys it, its compiled launcher found and called (else, where none is found, a hook is set or
    the device is not current, the statement `miss`). made: tensors the repeat itself made, by slot, with
    their dtype and address as expressions (read from there, not from the tensor).
    Local and global names start with p (several launches in one function). Returns (lines, the globals
    they read), or None where a slot holds a kind run's loop keys the slow way (a numpy scalar, a Tensor
    subclass)."""
    names = {"Tensor": Tensor, "NoneType": type(None), f"{p}compiled": runner.compiled, "hooks_set": hooks_set, "knobs": triton.knobs.runtime,
             f"{p}stream_of": runner.stream_of, "I32": _I32, "I64": _I64, f"{p}index": runner.device.index,
             f"{p}backend": runner.backend}
    body, key, args = [], [], list(runner.template)
    tensors: dict[str, int] = {}  # a tensor slot's name (no view) -> the slot that reads it first
    dtypes_of: dict[int, str] = {}  # a tensor slot -> its dtype's expression
    reads = Counter(name for _, name, view, _ in runner.slots if view is None)
    for i, (pos, name, view, free) in enumerate(runner.slots):
        v, x = sample(name), f"{p}v{i}"
        if view is not None:
            names[f"{p}view{i}"], v = view, view(v)
        kind = type(v)
        if kind is Tensor and view is None and name in tensors:  # one value in several parameters
            j = tensors[name]  # (a fused kernel's absent operands point at a present one): read it once
            key += [dtypes_of[j], f"{p}a{j}"]
            args[pos] = _Arg(f"{p}v{j}")
            continue
        body.append(f"{x} = {read(name)}" if view is None else f"{x} = {p}view{i}({read(name)})")
        check = checked(name)
        if kind is Tensor:
            if view is None:
                tensors[name] = i
            if made and name in made and view is None:  # its dtype known, its address its storage's
                dtypes_of[i], body[-1] = made[name][0], f"{x} = {made[name][1]}"
            else:
                dtypes_of[i] = f"{p}d{i}"
                body += [f"if type({x}) is not Tensor: {other}"] * check + [
                    f"{p}d{i} = {x}.dtype", f"{x} = {x}._storage._ptr + {x}._offset * {p}d{i}.itemsize"]
            if reads[name] > 1:
                body.append(f"{p}a{i} = {x} % 16 == 0")
            key += [dtypes_of[i], f"{p}a{i}" if reads[name] > 1 else f"{x} % 16 == 0"]
        elif kind is int and not check:  # fixed: its class too
            names[f"{p}k{i}"] = int_class(v, free)
            key.append(f"{p}k{i}")
        elif kind is int:
            body += [f"if type({x}) is not int: {other}",
                     f"{p}w{i} = 0 if -I32 <= {x} < I32 else 1 if -I64 <= {x} < I64 else 2"]
            key.append(f"{p}w{i}" if free else f"({p}w{i}, {x} == 1, {x} % 16 == 0)")
        elif kind is float or kind is bool:
            body += [f"if type({x}) is not {kind.__name__}: {other}"] * check
            key.append(kind.__name__)
        elif v is None:
            body += [f"if {x} is not None: {other}"] * check
            key.append("NoneType")
        else:
            return None
        args[pos] = _Arg(x)
    passed = []  # the template's fixed values in runs, each run one tuple unpacked
    for is_slot, group in groupby(args, key=lambda a: type(a) is _Arg):
        if is_slot:
            passed += group
        else:
            names[f"{p}fixed{len(passed)}"] = tuple(group)
            passed.append(f"*{p}fixed{len(passed)}")
    g = tuple(int(n) for n in runner.grid)
    knobs = triton.knobs.runtime  # hooks_set, inline for the HookChains this launch was written under
    enter, leave = names[f"{p}enter"], names[f"{p}leave"] = knobs.launch_enter_hook, knobs.launch_exit_hook
    hooks = (f"({p}enter.calls or {p}leave.calls if knobs.launch_enter_hook is {p}enter and knobs.launch_exit_hook is "
             f"{p}leave else hooks_set())" if type(enter) is type(leave) is HOOK_CHAIN else "hooks_set()")
    body += [f"{p}fast = {p}compiled.get(({''.join(k + ', ' for k in key)}))",
             f"if {p}fast is None or {hooks}: {miss}"]
    if not runner.single:
        body.append(f"if {p}backend.current_device() != {p}index: {miss}")
    body.append(f"{p}fast.run({g[0]}, {g[1]}, {g[2]}, {p}stream_of({p}index), *{p}fast.head, None, None, None, "
                f"{', '.join(passed)}{', ' if passed else ''}*{p}fast.tail)")
    return body, names


_A_TENSOR = Tensor._of(None, None, (), ())  # an output's kind, as _launch_source reads kinds


class _Arg(str):
    """A slot's value in _bound_launch's source (a name, not a fixed value of the template)."""


def _make_runner(one: Launch, device: Device) -> _Runner:
    runner = _Runner(one, device)
    one._runner.append(runner)
    return runner


__all__ = ["Slot", "BufferSpec", "Launch", "LaunchPlan", "output", "workspace", "cached", "constant", "execute", "prepared", "reset",
           "cached_count", "compiled_count", "setting_key", "int_class", "MAX_PLANS"]
