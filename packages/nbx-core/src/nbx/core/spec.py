"""One spec per op: its signature, its checks, its output and compute dtypes and its cost hook.

The front-end, the CPU implementation, the kernels and `price()` all read an op's `OpSpec`:
- `spec.call(*args, **kwargs)` is the op's front-end. It binds the arguments to the signature
  (defaults, keyword aliases such as numpy's axis= for dim=), runs the spec's check, which refuses
  what the op does not take and derives the facts the implementation reads (dims, an eps, the
  output dtype), and hands the implementation registered for the operands' device one `Call`:
  the arguments and the derived facts by name (`call.x`, `call.dims`, `call.out_dtype`).
- The checks run once per signature: the operands' (dtype, shape, strides, device), the Python
  floats' and complexes' types (a scale or a scalar operand may change every call) and every other
  argument's value. A repeat of a signature is one dict lookup: the new arguments over the facts
  derived before, straight to the implementation's prepared path (`prepare(call)`, when the
  implementation offers one: the kernels' cached plan with its compiled launcher). So a check may
  read floats' types but never their values, and derives facts only from what the signature holds.
- `price(op, call)` (nbx.kernels.cost) reads the same call; `price(op, *args, **kwargs)` binds
  through the spec first.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

from . import device_files, dispatch
from .errors import ArgumentError, SignatureError
from .tensor import Tensor

REQUIRED = object()   # a parameter without a default


class Param:
    __slots__ = ("name", "default", "aliases")

    def __init__(self, name: str, default=REQUIRED, aliases: tuple[str, ...] = ()):
        self.name, self.default, self.aliases = name, default, tuple(aliases)

    def __repr__(self):
        return self.name if self.default is REQUIRED else f"{self.name}={self.default!r}"


def params(*names: str, **defaults) -> tuple[Param, ...]:
    """Parameters by name (required) then by name=default; dim and keepdim also take numpy's
    axis= and keepdims= (docs/core.md, Keywords)."""
    found = [Param(n) for n in names] + [Param(n, d) for n, d in defaults.items()]
    return tuple(Param(p.name, p.default, _NUMPY_SPELLINGS.get(p.name, ())) for p in found)


_NUMPY_SPELLINGS = {"dim": ("axis",), "keepdim": ("keepdims",)}


class Facts:
    """What a check derives from a signature (shared by every call of it): the device, the output
    and compute dtypes, and the spec's own (set as attributes by the check)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __repr__(self):
        return f"Facts({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class Call:
    """One checked call: the arguments by name (slots), then the derived facts (read through)."""
    __slots__ = ("spec", "facts")

    def __getattr__(self, name):  # a fact, or a parameter left at its default
        if name == "facts":
            raise AttributeError(name)
        return getattr(self.facts, name)

    def values(self) -> tuple:
        """The arguments in the signature's order."""
        return tuple(getattr(self, name) for name in self.spec._names)

    def arguments(self) -> dict:
        return {p.name: getattr(self, p.name) for p in self.spec.params}

    def __repr__(self):
        args = ", ".join(f"{k}={_short(v)}" for k, v in self.arguments().items())
        return f"{self.spec.name}({args})"


def _short(v):
    return f"Tensor({v.dtype.name}, {v.shape})" if isinstance(v, Tensor) else repr(v)


class OpSpec:
    """An op's signature and rules. check(call, facts) refuses what the op does not take and sets
    the facts it derives (facts.device and facts.out_dtype at least; compute_dtype defaults to
    dtypes.computes_in(out_dtype)); cost names the declared cost (nbx.kernels.cost) of the op."""

    def __init__(self, name: str, signature: tuple[Param, ...], check: Callable, cost: str | None = None,
                 doc: str | None = None, by_value: tuple[str, ...] = ()):
        """by_value: float parameters whose value the check reads (an eps: one value per model), so
        that the signature holds their value, not their type."""
        self.name, self.params, self.check, self.cost = name, tuple(signature), check, cost or name
        self.doc, self.by_value = doc, frozenset(by_value)
        self._value_positions = frozenset(i for i, p in enumerate(signature) if p.name in by_value)
        self._names = tuple(p.name for p in self.params)
        self._alias = {a: p.name for p in self.params for a in (p.name, *p.aliases)}
        self.call_type = type(f"{name}_call", (Call,), {"__slots__": self._names})
        self._repeats: dict[tuple[str, ...], Callable] = {}   # _repeat's functions by the fields they bind
        self.call = self._front_end()

    def __repr__(self):
        return f"OpSpec({self.name})"

    # ---- binding ---------------------------------------------------------------------------
    def _fields(self, n_args: int, keywords) -> tuple[str, ...]:
        """The parameter each positional and keyword argument fills, refused by name where the
        signature does not take them."""
        if n_args > len(self._names):
            raise SignatureError(f"{self.name} takes at most {len(self._names)} positional arguments, got {n_args}")
        fields = list(self._names[:n_args])
        spelled = dict.fromkeys(fields)   # parameter -> the keyword that gave it (None: positionally)
        for key in keywords:
            name = self._alias.get(key)
            if name is None:
                raise SignatureError(f"{self.name} got an unexpected keyword argument {key!r} "
                                     f"(it takes {', '.join(self._names)})")
            if name in spelled:
                other = next((k for k in (key, spelled[name]) if k not in (None, name)), None)
                raise (ArgumentError(f"{self.name} got both {name}= and {other}=; pass one") if other else
                       SignatureError(f"{self.name} got multiple values for {name!r}"))
            spelled[name] = key
            fields.append(name)
        for p in self.params:
            if p.default is REQUIRED and p.name not in fields:
                raise SignatureError(f"{self.name} is missing its argument {p.name!r}")
        return tuple(fields)

    def bind(self, *args, **kwargs) -> Call:
        """The checked call of op(*args, **kwargs) (what the implementation and price() take)."""
        fields = self._fields(len(args), kwargs)
        call = self.call_type.__new__(self.call_type)
        call.spec = self
        for name, value in zip(fields, (*args, *kwargs.values())):
            setattr(call, name, value)
        facts = Facts(**{p.name: p.default for p in self.params if p.name not in fields})
        call.facts = facts  # the defaults read through first, so that the check sees every argument
        defaults = dict(facts.__dict__)
        self.check(call, facts)
        found = facts.__dict__
        shadowed = [n for n in self._names if n in found and (n not in defaults or found[n] is not defaults[n])]
        if shadowed:  # a fact named as a parameter would be hidden by the argument itself
            raise TypeError(f"{self.name}'s check derives {sorted(shadowed)}, named as its parameters")
        if "compute_dtype" not in facts.__dict__:
            from .dtypes import computes_in
            facts.compute_dtype = computes_in(facts.out_dtype)
        return call

    # ---- the front-end ---------------------------------------------------------------------
    def _front_end(self) -> Callable:
        """spec.call: op(*args, **kwargs), checked once per signature, then dispatched with one Call.
        A function of this spec's own rather than a method: an operator (Tensor.__add__) and a front-end
        are it, with no frame of their own between the caller and the signature's lookup. The key of the
        call's signature is written out for each number of positional arguments (every op call of a decode
        step builds one): a tensor by its layout, a float or complex by its type (its value where the
        spec reads it, by_value), anything else by its value; keywords by name, after them. Unhashable
        where an argument is (a list): then the call has none and is checked every time."""
        tensor = "(v{i}.dtype, v{i}.shape, v{i}._strides, v{i}._storage.device) if (k := type(v{i})) is Tensor else "
        lines = ["def call(*args, **kwargs):", "    n = len(args)"]  # (inside make(), below)
        for n in (*range(1, len(self.params) + 1), 0):  # the usual counts first
            elements = "".join(("(" + tensor + ("(k, v{i})), " if i in self._value_positions else
                                                "k if k in _BY_TYPE else (k, v{i})), ")).format(i=i) for i in range(n))
            lines += [f"    {'if' if n == 1 or not self.params else 'elif'} n == {n}:"]
            lines += [f"        {''.join(f'v{i}, ' for i in range(n))}= args"] if n else []
            lines += ["        if not kwargs:",
                      f"            key = (spec, {elements})",
                      "        elif len(kwargs) == 1:  # one keyword (dim=): its element written out too",
                      "            (name, v), = kwargs.items()",
                      f"            key = (spec, {elements}(name, (v.dtype, v.shape, v._strides, v._storage.device) if "
                      "(k := type(v)) is Tensor else k if k in _BY_TYPE and name not in by_value else (k, v)))",
                      "        else:",
                      f"            key = [spec, {elements}]",
                      "            for name, v in kwargs.items():",
                      "                kind = type(v)",
                      "                key.append((name, (v.dtype, v.shape, v._strides, v._storage.device) if kind is Tensor",
                      "                            else kind if kind in _BY_TYPE and name not in by_value else (kind, v)))",
                      "            key = tuple(key)"]
        lines += ["    else:  # more than the signature takes: refused by name",
                  "        return spec._checked(None, args, kwargs)",
                  "    if observed.current is None:  # no step recording: a signature may be kept",
                  "        try:  # the device facts' generation empties _FAST when it moves (forget, a listener)",
                  "            found = _FAST.get(key)",
                  "        except TypeError:  # an unhashable argument: no signature, checked every call",
                  "            return spec._checked(None, args, kwargs)",
                  "        if found is not None:  # the repeat: the signature's own function",
                  "            return found(*args, *kwargs.values()) if kwargs else found(*args)",
                  "        return spec._checked(key, args, kwargs)",
                  "    return spec._checked(None, args, kwargs)"]
        # made inside a function of this module's globals: the spec's facts are its closure's, _FAST is read
        # as the module holds it when called (a tool may put another dict there)
        source = "def make(spec, by_value, observed):\n" + "".join(f"    {line}\n" for line in lines) + "    return call\n"
        names: dict = {}
        exec(compile(source, f"<nbx front-end of {self.name}>", "exec"), globals(), names)
        return names["make"](self, self.by_value, dispatch._OBSERVER)

    def _checked(self, key: tuple | None, args: tuple, kwargs: dict):
        """A call not seen before (or one that keeps no signature: key None): checked, dispatched, and
        under key its repeat's function kept."""
        call = self.bind(*args, **kwargs)
        impl = dispatch.implementation(self.name, call.facts.device)
        if key is not None:
            prepare = getattr(impl, "prepare", None)
            run = (prepare(call) if prepare is not None else None) or impl
            if len(_FAST) >= MAX_SIGNATURES:
                del _FAST[next(iter(_FAST))]
            fields = self._fields(len(args), kwargs)
            _FAST[key] = (self._slots_repeat(fields, run, call) if type(run) is Slots else
                          partial(self._repeat(fields), call.facts, run))
            return run(call)
        return impl(call)

    def _repeat(self, fields: tuple[str, ...]) -> Callable:
        """The function a repeat of a signature binding fields calls as (facts, run, *arguments):
        its Call made with the arguments stored by name (no loop over the fields) and run. Written
        once per spec and fields (signatures of one arity share it)."""
        made = self._repeats.get(fields)
        if made is None:
            names = {"new": object.__new__, "call_type": self.call_type, "spec": self}
            args = [f"a{i}" for i in range(len(fields))]
            source = (f"def repeat(facts, run, {', '.join(args)}):\n    call = new(call_type)\n"
                      "    call.spec, call.facts = spec, facts\n"
                      + "".join(f"    call.{name} = {a}\n" for name, a in zip(fields, args)) + "    return run(call)\n")
            exec(compile(source, f"<nbx repeat of {self.name}>", "exec"), names)
            made = self._repeats[fields] = names["repeat"]
        return made

    def _slots_repeat(self, fields: tuple[str, ...], slots: Slots, call: Call) -> Callable:
        """A repeat of a signature binding fields whose prepared path is slots: a function of the
        arguments building slots' dict from them (no Call), written once per spec, fields and slots'
        layout; the fixed values (and the arguments left at their defaults) are bound to it."""
        layout = tuple((name, v if type(v) is Arg and v in fields else None) for name, v in slots.slots.items())
        written = self._written_repeat(fields, layout, slots, call)
        if written is not None:
            return written
        made = self._repeats.get((fields, layout, slots.result is None))
        if made is None:
            fixed = [f"f{k}" for k in range(sum(arg is None for _, arg in layout))]
            items, k = [], 0
            for name, arg in layout:
                items.append(f"{name!r}: a{fields.index(arg)}" if arg is not None else f"{name!r}: f{k}")
                k += arg is None
            result = "" if slots.result is None else "[result]"
            source = (f"def repeat({', '.join(['run', 'result', *fixed, *(f'a{i}' for i in range(len(fields)))])}):\n"
                      f"    return run({{{', '.join(items)}}}){result}\n")
            names: dict = {}
            exec(compile(source, f"<nbx repeat of {self.name}>", "exec"), names)
            made = self._repeats[(fields, layout, slots.result is None)] = names["repeat"]
        fixed = [getattr(call, v) if type(v) is Arg else v for (name, arg), v in zip(layout, slots.slots.values())
                 if arg is None]
        return partial(made, slots.run, slots.result, *fixed)


    def _written_repeat(self, fields: tuple[str, ...], layout: tuple, slots: Slots, call: Call) -> Callable | None:
        """_slots_repeat's function with slots.run's own work written into it, where slots.run offers to
        write it (`write`: nbx.kernels.plans.prepared's runs do): one function of the arguments, made for
        this signature, which goes to slots.run with the dict of its slots wherever run's written work
        cannot serve a call. None where run does not write (or declines)."""
        write = getattr(slots.run, "write", None)
        if write is None:
            return None
        exprs, sample, fixed = {}, {}, []
        for (name, arg), v in zip(layout, slots.slots.values()):
            if arg is not None:
                exprs[name], sample[name] = f"a{fields.index(arg)}", getattr(call, arg)
            else:
                value = getattr(call, v) if type(v) is Arg else v
                exprs[name], sample[name] = f"f{len(fixed)}", value
                fixed.append(value)
        # every call of the signature repeats each value's kind, and an int's value (the key holds them)
        written = write(exprs, sample, slots.result)
        if written is None:
            return None
        body, names = written
        # made for this signature alone: its prepared run, result slot and fixed values are the function's
        # globals (no partial between the lookup and it)
        names.update({"run": slots.run, "result": slots.result}, **{f"f{k}": v for k, v in enumerate(fixed)})
        source = f"def repeat({', '.join(f'a{i}' for i in range(len(fields)))}):\n" + "".join(f"    {line}\n" for line in body)
        exec(compile(source, f"<nbx written repeat of {self.name}>", "exec"), names)
        return names["repeat"]


class Arg(str):
    """In a Slots' dict: the call's argument of this name (fixed values are anything else)."""


class Slots:
    """What an implementation's prepare(call) may return instead of a function of the Call:
    run(values) over a fresh dict of its slots, each the call's argument named by an Arg or a fixed
    value, giving values[result] (the dict itself where result is None). A repeat of the signature
    then makes no Call: its function builds the dict from the arguments as they come."""
    __slots__ = ("run", "slots", "result")

    def __init__(self, run: Callable[[dict], dict], slots: dict, result: str | None):
        self.run, self.slots, self.result = run, slots, result

    def __call__(self, call: Call):
        values = self.run({name: getattr(call, v) if type(v) is Arg else v for name, v in self.slots.items()})
        return values if self.result is None else values[self.result]


# ---- the per-signature fast path -------------------------------------------------------------

MAX_SIGNATURES = 4096
_FAST: dict = {}
_BY_TYPE = (float, complex)   # values a call may change freely: in the signature by type only


def forget() -> None:
    """Drop every signature's checks and prepared path (the device facts, the served settings, the
    registered implementations or the cached plans changed)."""
    _FAST.clear()


dispatch.on_change(forget)
device_files.on_generation(forget)

_SPECS: dict[str, OpSpec] = {}


def define(spec: OpSpec) -> OpSpec:
    """Register spec as its op's one spec; its front-end is spec.call."""
    _SPECS[spec.name] = spec
    return spec


def spec_of(op: str) -> OpSpec | None:
    return _SPECS.get(op)


def specs() -> list[str]:
    return sorted(_SPECS)


def front_end(spec: OpSpec) -> Callable:
    """The op's public function: spec.call itself (a plain function), named and documented as the op."""
    op = spec.call
    op.__name__ = op.__qualname__ = spec.name
    op.__doc__ = spec.doc
    op.spec = spec
    return op


__all__ = ["OpSpec", "Param", "Call", "Facts", "Slots", "Arg", "params", "define", "spec_of", "specs", "front_end", "forget",
           "REQUIRED", "MAX_SIGNATURES"]
