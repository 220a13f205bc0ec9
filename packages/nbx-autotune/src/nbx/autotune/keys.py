"""Launch keys: a pure function of a launch, formed alike by the wrapper, a census and the certifier.

A kernel declares its key's fields in order, each with a kind:

    elements   an element count, classed on the device file's `autotune.buckets.elements` ladder
    dims       a dimension (rows, columns, a length), classed on `autotune.buckets.dims`
    coarse_dims  a dimension whose class may be coarser than `dims` (matmul's m, n, k; linear's n, k;
               attention_decode's k_len: where the H200's bucket losses allow it), classed on
               `autotune.buckets.coarse_dims`, or on `dims` where a device file states no such ladder
               (FALLBACK)
    exact      an integer kept as it is (a head dim, a group count)
    pow2       a size classed to the power of two at or above it (a row's width: its tile is chosen
               for the power of two, the launch keeps its own width)
    dtype      a dtype, written with the dtype table's `key` spelling (f16, bf16, i64, ...)
    flag       a bool, written 1 or 0
    label      a short word (an op name, a layout): letters, digits, '_', '.', '+', '-'

    key = form("elementwise", {"n": "elements", "dtype": "dtype", "dense": "flag"}, facts,
               n=1000, dtype="float32", dense=True)
    str(key)            # 'n=65536,dtype=f32,dense=1'
    key.observed        # {'n': 1000}: the sizes launched, outside the key's identity

`observed` holds the launch's own size of every classed field (elements, dims, pow2): the one way a
launch's sizes are said, so a key formed by a run, written by `nbx autotune record` into a keys file
and parsed back by `nbx warmup` stands for the same launch (keys.launched: the instance a neighbour's
screen runs, and the text its verdict is kept under).

A key that cannot be formed is a LaunchKeyError naming the kernel and the field, never an empty key.
The representative of a key is its classes' top values (the sizes the certifier screens and times);
a size in a ladder's unbounded last row has no top, so the size observed at launch stands in for it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nbx.core import device_files, dtypes
from nbx.core.errors import LaunchKeyError, MissingFactError, NbxError

KINDS = ("elements", "dims", "coarse_dims", "exact", "pow2", "dtype", "flag", "label")
LADDERS = {"elements": "autotune.buckets.elements", "dims": "autotune.buckets.dims",
           "coarse_dims": "autotune.buckets.coarse_dims"}
FALLBACK = {"coarse_dims": "dims"}   # the coarser ladder, where a device file states none: the shared one
POW2 = "pow2"
CLASSED = (*LADDERS, POW2)        # a launch's size classed into the key: observed keeps the size itself
OCTAVE_SIZES = ("exact", POW2)    # sizes the key holds as such: their neighbours lie octaves apart
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_LABEL = re.compile(r"[A-Za-z0-9_.+-]+")
_BY_KEY_SPELLING = {dt.key: dt for dt in dtypes.TABLE.values()}


class Spec(tuple):
    """A checked key declaration, ((field, kind), ...): formed once per kernel, not per launch."""


def check_spec(kernel: str, spec) -> Spec:
    """A kernel's key declaration as ((field, kind), ...), refused by name when malformed."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, tuple) and spec and all(isinstance(p, tuple) and len(p) == 2 for p in spec):
        spec = dict(spec)
    if not isinstance(spec, Mapping) or not spec:
        raise LaunchKeyError(f"kernel {kernel!r}: its key declares no field; a key names at least one "
                             f"(field -> kind, kinds {KINDS})")
    out = []
    for name, kind in spec.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise LaunchKeyError(f"kernel {kernel!r}: key field {name!r} is not a lowercase identifier")
        if kind not in KINDS:
            raise LaunchKeyError(f"kernel {kernel!r}: key field {name!r} has kind {kind!r}; kinds are {KINDS}")
        out.append((name, kind))
    return Spec(out)


@dataclass(frozen=True)
class LaunchKey:
    """A kernel and its key's fields; equal keys share a setting. `observed` is not part of the identity."""

    kernel: str
    fields: tuple[tuple[str, object], ...]
    observed: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)

    def __str__(self) -> str:
        return ",".join(f"{name}={spell(value)}" for name, value in self.fields)

    def values(self) -> dict:
        return dict(self.fields)


def spell(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def ladder_fact(kind: str, facts) -> str:
    """The fact a laddered kind classes on in facts: its own, else its FALLBACK's where facts state none."""
    fact = LADDERS[kind]
    if kind in FALLBACK and fact not in facts:
        return LADDERS[FALLBACK[kind]]
    return fact


def ladder(kind: str, facts):
    """The ladder a laddered kind classes on in facts (MissingFactError where they state none)."""
    return facts.value(ladder_fact(kind, facts))


def _ladder(kernel: str, name: str, kind: str, facts):
    try:
        return ladder(kind, facts)
    except MissingFactError as exc:
        raise LaunchKeyError(f"kernel {kernel!r}: key field {name!r} is classed on {LADDERS[kind]!r}, which the "
                             f"device file does not state: {exc}") from exc


def _size(kernel: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LaunchKeyError(f"kernel {kernel!r}: key field {name!r} is a size, an integer >= 0; got {value!r}")
    return value


def pow2_at_least(value: int) -> int:
    """The power of two at or above value (at least 1); nbx.kernels' row and tile sizes take it too."""
    return 1 << (max(int(value), 1) - 1).bit_length()


def _classed(kernel: str, name: str, kind: str, value, facts) -> int:
    """The class of a launch's size in a classed field (a ladder's class, or its power of two)."""
    size = _size(kernel, name, value)
    return pow2_at_least(size) if kind == POW2 else device_files.bucket(_ladder(kernel, name, kind, facts), size)


def _field(kernel: str, name: str, kind: str, value, facts) -> object:
    if kind in CLASSED:
        return _classed(kernel, name, kind, value, facts)
    if kind == "exact":
        return _size(kernel, name, value)
    if kind == "dtype":
        try:
            return dtypes.as_dtype(value).key
        except NbxError as exc:
            raise LaunchKeyError(f"kernel {kernel!r}: key field {name!r} is a dtype; {exc}") from exc
    if kind == "flag":
        if not isinstance(value, bool):
            raise LaunchKeyError(f"kernel {kernel!r}: key field {name!r} is a flag, True or False; got {value!r}")
        return value
    if not isinstance(value, str) or not _LABEL.fullmatch(value):
        raise LaunchKeyError(f"kernel {kernel!r}: key field {name!r} is a label (letters, digits, _ . + -); "
                             f"got {value!r}")
    return value


def form(kernel: str, spec, facts, **inputs) -> LaunchKey:
    """The launch key of `kernel` for these inputs on the device whose facts are given."""
    fields = check_spec(kernel, spec)
    if len(inputs) != len(fields) or any(name not in inputs for name, _ in fields):
        names = [name for name, _ in fields]
        missing, extra = [n for n in names if n not in inputs], sorted(set(inputs) - set(names))
        raise LaunchKeyError(f"kernel {kernel!r}: key fields {names}; missing {missing}, unexpected {extra}")
    formed, observed = [], {}
    for name, kind in fields:
        value = inputs[name]
        formed.append((name, _field(kernel, name, kind, value, facts)))
        if kind in CLASSED:
            observed[name] = value
    return LaunchKey(kernel, tuple(formed), observed)


def parse(kernel: str, spec, text: str, facts, observed: Mapping | None = None) -> LaunchKey:
    """The key written as `text` (a certificate's, a keys file's), checked against the kernel's fields.

    A bucketed value must be a class of the device file's ladder: a key classed on another ladder
    is refused, not re-classed.
    """
    fields = check_spec(kernel, spec)
    parts = text.split(",") if isinstance(text, str) and text else []
    pairs = [p.split("=", 1) for p in parts]
    if any(len(p) != 2 for p in pairs) or [p[0] for p in pairs] != [n for n, _ in fields]:
        raise LaunchKeyError(f"kernel {kernel!r}: key {text!r} does not have the kernel's fields "
                             f"{[n for n, _ in fields]} in that order")
    values = []
    for (name, kind), (_, raw) in zip(fields, pairs, strict=True):
        values.append((name, _parse_value(kernel, name, kind, raw, text, facts)))
    seen = {k: v for k, v in (observed or {}).items()}
    for name, value in seen.items():
        kind = dict(fields).get(name)
        if kind not in CLASSED:
            raise LaunchKeyError(f"kernel {kernel!r}: key {text!r} records an observed size for {name!r}, "
                                 f"which is not a classed field")
        if _classed(kernel, name, kind, value, facts) != dict(values)[name]:
            raise LaunchKeyError(f"kernel {kernel!r}: key {text!r} records {name}={value}, which is not in "
                                 f"its class {dict(values)[name]}")
    return LaunchKey(kernel, tuple(values), seen)


def _parse_value(kernel, name, kind, raw, text, facts):
    where = f"kernel {kernel!r}: key {text!r}: field {name!r}"
    if kind in LADDERS or kind in OCTAVE_SIZES:
        if not raw.isdigit():
            raise LaunchKeyError(f"{where} is a size, got {raw!r}")
        value = int(raw)
        if kind == POW2 and pow2_at_least(value) != value:
            raise LaunchKeyError(f"{where} is a power of two, got {value}")
        if kind in LADDERS and device_files.bucket(_ladder(kernel, name, kind, facts), value) != value:
            file = getattr(facts, "name", "the device file")
            raise LaunchKeyError(f"{where}: {value} is not a class of {ladder_fact(kind, facts)!r} in {file}; the key was "
                                 f"formed on another ladder: form it again")
        return value
    if kind == "dtype":
        if raw not in _BY_KEY_SPELLING:
            raise LaunchKeyError(f"{where}: {raw!r} is no dtype's key spelling ({sorted(_BY_KEY_SPELLING)})")
        return raw
    if kind == "flag":
        if raw not in ("0", "1"):
            raise LaunchKeyError(f"{where} is a flag, 1 or 0; got {raw!r}")
        return raw == "1"
    if not _LABEL.fullmatch(raw):
        raise LaunchKeyError(f"{where} is a label; got {raw!r}")
    return raw


def unbounded(ladder, n: int) -> bool:
    """Whether n falls in the ladder's last, unbounded row (which has no top value)."""
    return ladder[-1]["up_to"] is None and (len(ladder) == 1 or n > ladder[-2]["up_to"])


def representative(key: LaunchKey, spec, facts) -> dict:
    """The launch the key stands for: classed sizes at their class's top, dtypes as DType objects.

    In a ladder's unbounded row the size observed at launch stands in; without one it is refused.
    """
    kinds = dict(check_spec(key.kernel, spec))
    rep = {}
    for name, value in key.fields:
        kind = kinds[name]
        if kind in LADDERS:
            ladder = _ladder(key.kernel, name, kind, facts)
            if unbounded(ladder, value):
                if name not in key.observed:
                    raise LaunchKeyError(
                        f"kernel {key.kernel!r}: key {key}: {name}={value} lies in the unbounded last row of "
                        f"{ladder_fact(kind, facts)!r}, which has no top value, and no observed size was recorded for it; "
                        f"record the launch (nbx autotune record) so the keys file carries the size")
                value = key.observed[name]
        elif kind == "dtype":
            value = _BY_KEY_SPELLING[value]
        rep[name] = value
    return rep


# Triton specializes an integer argument divisible by 16 (and one equal to 1) into its own compiled
# kernel: a screen on sizes of the launch's own kinds compiles the variant that launch takes.
ALIGN = 16


def specialization(value: int) -> int:
    """How Triton specializes an integer argument of this value: 1 (equal to 1), ALIGN (a multiple
    of it) or 0 (neither)."""
    return 1 if value == 1 else ALIGN if value % ALIGN == 0 else 0


def smallest(key: LaunchKey, spec, facts, like: Mapping[str, int] | None = None) -> dict:
    """The key's smallest launch: each classed size at the smallest size of its class that Triton
    specializes as it does the size in `like` (the launch observed: key.observed), else as a multiple
    of ALIGN (the variant most launches take); the class's smallest size where it holds none of that
    kind. dtypes as DType objects.

    A setting served to a key it was not proven on (a neighbour's) is screened on this instance, so the
    screen's compile is the one its launch then loads.
    """
    from .space import smallest_in_class
    kinds = dict(check_spec(key.kernel, spec))
    rep = {}
    for name, value in key.fields:
        kind = kinds[name]
        if kind in LADDERS:
            low = smallest_in_class(_ladder(key.kernel, name, kind, facts), value)
            want = specialization(like[name]) if like and name in like else ALIGN
            value = _smallest_of_kind(low, value, want)
        elif kind == "dtype":
            value = _BY_KEY_SPELLING[value]
        rep[name] = value
    return rep


def launched(key: LaunchKey, spec) -> dict | None:
    """The launch itself as an instance of its key: each classed size (elements, dims, pow2) at the size
    observed (key.observed: a row's own width, where the key holds its power of two), each exact field at
    its value; dtypes as DType objects. None where a classed size was not observed (a key parsed from a
    file without one).

    A neighbour's screen on this instance compiles exactly the specialization the launch then loads
    (the same constexprs, integer and pointer specializations): its compile is the launch's, not one
    more (Tunable.screen_at_launch).
    """
    kinds = dict(check_spec(key.kernel, spec))
    instance = {}
    for name, value in key.fields:
        kind = kinds[name]
        if kind in CLASSED:
            if name not in key.observed:
                return None
            value = key.observed[name]
        elif kind == "dtype":
            value = _BY_KEY_SPELLING[value]
        instance[name] = value
    return instance


def _smallest_of_kind(low: int, top: int, want: int) -> int:
    """The smallest size in [low, top] that specialization() calls `want`; low where none is."""
    if want == 1:
        return 1 if low <= 1 <= top else low
    if want == ALIGN:
        aligned = -(-low // ALIGN) * ALIGN
        return aligned if aligned <= top else low
    size = next((v for v in range(low, min(top, low + ALIGN + 1) + 1) if specialization(v) == 0), None)
    return low if size is None else size
