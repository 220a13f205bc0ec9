"""A family's key space: the classes of the device file's ladders, the distance between two keys, coverage.

A ladder (`autotune.buckets.*`) classes sizes: a size is rounded up to the step of the first row
whose `up_to` holds it; its classes, in increasing order, have an index (class_index) and a
smallest member (smallest_in_class). Two keys of one kernel are as far apart as the octaves
between their classes' values (|log2 a - log2 b|), summed over their size fields (classed and
exact), each field's octaves times its weight (the Tunable's `weights`: how much the kernel's
setting depends on that field; a row kernel's tile follows the row's width, its row count hardly
does, so a width octave away costs more than an element-count octave): the octave, not the rung,
because the dims ladder's rungs are one apart below 64 and 128 apart at 4096, and a tile's fit
follows the ratio of the sizes, not their count of rungs. Keys that
differ in a dtype, flag or label field are no neighbours at all (another layout, another dtype:
another kernel as far as a setting is concerned).

The key space of a kernel is what the device file's `autotune.key_space` says models launch:
classed sizes up to `elements_up_to` / `dims_up_to` (a coarse_dims field's bound too: keys.FALLBACK)
from the first class above 0, exact sizes the powers of two up to `exact_up_to`, the dtypes listed,
both flag values, and the label values listed per field. An element count and an exact size in one
key are a row's elements and its width: a class whose top holds no full row is no launch and is
left out. uncovered_keys picks one key for each dtype, flag and label combination no certified key
shares: what certifying takes for every key of a space to have a neighbour.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from nbx.core import device_files, dtypes
from nbx.core.errors import LaunchKeyError, MissingFactError

from . import keys

KEY_SPACE = "autotune.key_space"


def _rows(ladder) -> Iterator[tuple[int, int | None, int, int]]:
    """(low, up_to, step, first k) per row: the row holds classes k * step for k >= first, above low."""
    low = -1  # the first row holds the class 0
    for row in ladder:
        step = row["step"]
        yield low, row["up_to"], step, low // step + 1
        if row["up_to"] is None:
            return
        low = row["up_to"]


def class_index(ladder, value: int) -> int:
    """The position of a class (a value bucket() returns) among the ladder's classes, 0 for the class 0."""
    offset = 0
    for _low, up, step, first in _rows(ladder):
        if up is None or value <= up:
            return offset + value // step - first
        offset += up // step - first + 1
    raise LaunchKeyError(f"{value} is above the ladder's last row")


def smallest_in_class(ladder, value: int) -> int:
    """The smallest size the ladder classes as `value` (a class): the key's smallest launch."""
    for low, up, step, _first in _rows(ladder):
        if up is None or value <= up:
            return max(low + 1, value - step + 1, 0)
    raise LaunchKeyError(f"{value} is above the ladder's last row")


def classes(ladder, up_to: int) -> list[int]:
    """The ladder's classes above 0, in increasing order, up to and including the class of up_to."""
    top = device_files.bucket(ladder, up_to)
    out = []
    for _low, up, step, first in _rows(ladder):
        k = max(first, 1)
        while (up is None or k * step <= up) and k * step <= top:
            out.append(k * step)
            k += 1
        if up is None or up >= top:
            break
    return out


def octaves(a: int, b: int) -> float:
    """|log2 a - log2 b|: how far apart two sizes (two classes' values) are; infinite from the class 0."""
    if a > 0 and b > 0:
        return abs(math.log2(a) - math.log2(b))
    return 0.0 if a == b else math.inf


def distance(spec, a: keys.LaunchKey, b: keys.LaunchKey, weights=None) -> tuple[float, float] | None:
    """(octaves apart, octaves b lies above a) summed over two keys' size fields (classes and exact sizes),
    each times its weight (weights: field -> weight, 1 where not named); None when a dtype, flag or label
    field differs."""
    apart = above = 0.0
    weights = weights or {}
    for (name, kind), (_, va), (_, vb) in zip(keys.check_spec(a.kernel, spec), a.fields, b.fields, strict=True):
        if kind in keys.LADDERS or kind in keys.OCTAVE_SIZES:
            far = octaves(va, vb) * weights.get(name, 1.0)
            apart += far
            above += far if vb > va else -far if vb < va else 0.0
        elif va != vb:
            return None
    return apart, above


# ---- the key space of a kernel ------------------------------------------------------------------

@dataclass(frozen=True)
class Space:
    """Per field, the values a kernel's key space holds; the size standing for an unbounded class."""

    kernel: str
    kinds: tuple[tuple[str, str], ...]
    values: tuple[tuple[str, tuple], ...]
    stand_ins: dict = field(default_factory=dict)   # field -> (its unbounded class, the size standing for it)

    def contains(self, fields: dict) -> bool:
        return all(fields[n] in v for n, v in self.values) and self._holds_a_row(fields)

    def _holds_a_row(self, fields: dict) -> bool:
        kinds = dict(self.kinds)
        exact = [fields[n] for n, k in kinds.items() if k in keys.OCTAVE_SIZES]
        tops = [self.stand_ins[n][1] if n in self.stand_ins and fields[n] == self.stand_ins[n][0] else fields[n]
                for n, k in kinds.items() if k == "elements"]
        return not (exact and tops) or all(t >= max(exact) for t in tops)

    def size(self) -> int:
        """The number of keys; counted without listing them where no row rule applies (a matmul's millions)."""
        kinds = {k for _, k in self.kinds}
        if not _row_rule(kinds):
            return math.prod(len(v) for _, v in self.values)
        return sum(1 for _ in self.keys())

    def keys(self) -> Iterator[tuple[str, dict]]:
        """(key text, observed sizes) of every key of the space, in field order."""
        names = [n for n, _ in self.values]
        for combo in itertools.product(*(v for _, v in self.values)):
            fields = dict(zip(names, combo, strict=True))
            if self._holds_a_row(fields):
                text = ",".join(f"{n}={keys.spell(v)}" for n, v in fields.items())
                yield text, {n: s[1] for n, s in self.stand_ins.items() if fields[n] == s[0]}


def key_space(tunable, facts) -> Space:
    """The key space of a tunable kernel over the shape ranges the device file's autotune.key_space states."""
    try:
        stated = facts.value(KEY_SPACE)
    except MissingFactError as exc:
        raise MissingFactError(f"the key space of kernel {tunable.name!r} needs {KEY_SPACE}, which "
                               f"{getattr(facts, 'name', 'the device file')} does not state: {exc}") from exc
    labels = {item["field"]: tuple(item["values"]) for item in stated["labels"]}
    values, stand_ins = [], {}
    for name, kind in tunable.key_fields:
        if kind in keys.LADDERS:
            ladder = keys.ladder(kind, facts)
            bound = stated[f"{keys.FALLBACK.get(kind, kind)}_up_to"]
            found = tuple(classes(ladder, bound))
            if keys.unbounded(ladder, found[-1]):
                stand_ins[name] = (found[-1], bound)
        elif kind in keys.OCTAVE_SIZES:
            found = tuple(1 << i for i in range(stated["exact_up_to"].bit_length()))
        elif kind == "dtype":
            as_key = tunable.key_dtype or dtypes.as_dtype
            found = tuple(dict.fromkeys(as_key(dtypes.as_dtype(d)).key for d in stated["dtypes"]))
        elif kind == "flag":
            found = (False, True)
        elif name in labels:
            found = labels[name]
        else:
            raise MissingFactError(f"kernel {tunable.name!r}: label field {name!r} has no values in {KEY_SPACE}.labels "
                                   f"of {getattr(facts, 'name', 'the device file')}; state the values models launch")
        values.append((name, found))
    return Space(tunable.name, tuple(tunable.key_fields), tuple(values), stand_ins)


@dataclass
class SpaceCoverage:
    kernel: str
    size: int
    certified: int
    outside: list   # certified keys the space does not hold (another range, or infeasible)
    by_neighbour: int = 0   # keys of the space with no certificate of their own and a certified neighbour

    @property
    def uncovered(self) -> int:
        return self.size - self.certified - self.by_neighbour


def _row_rule(kinds: set) -> bool:
    """Whether a key's space holds only rows: an element count and a width (an exact or pow2 size) in one key."""
    return "elements" in kinds and bool(kinds & set(keys.OCTAVE_SIZES))


def _size_field(kind: str) -> bool:
    return kind in keys.LADDERS or kind in keys.OCTAVE_SIZES


def _signature(fields: dict, kinds: dict) -> tuple:
    """A key's dtype, flag and label values, in field order: keys that differ in them are no neighbours."""
    return tuple(v for n, v in fields.items() if not _size_field(kinds[n]))


def space_coverage(tunable, facts, certified_keys) -> SpaceCoverage:
    """How many keys of the kernel's key space have a certified setting (certified_keys: key texts), and how
    many more a certified neighbour would serve (one with the same dtype, flag and label fields: a run
    serves its setting after a screen on the key, neighbours.py)."""
    space = key_space(tunable, facts)
    inside, outside, kinds = 0, [], dict(tunable.key_fields)
    signatures = set()   # the dtype, flag and label values of the certified keys: who has a neighbour
    for text in sorted(set(certified_keys)):
        fields = keys.parse(tunable.name, tunable.key, text, facts).values()
        signatures.add(_signature(fields, kinds))
        if space.contains(fields):
            inside += 1
        else:
            outside.append(text)
    size = space.size()
    return SpaceCoverage(tunable.name, size, inside, outside, _with_a_neighbour(space, signatures) - inside)


def _with_a_neighbour(space: Space, signatures: set) -> int:
    """The keys of the space whose dtype, flag and label fields some certified key shares (counted per
    signature without listing the keys where no row rule applies)."""
    kinds = dict(space.kinds)
    fixed = [(n, v) for n, v in space.values if not _size_field(kinds[n])]
    sized = [v for n, v in space.values if _size_field(kinds[n])]
    held = sum(1 for combo in itertools.product(*(v for _, v in fixed)) if combo in signatures)
    if not _row_rule(set(kinds.values())):
        return held * math.prod(len(v) for v in sized)
    names = [n for n, _ in space.values]
    count = 0
    for combo in itertools.product(*(v for _, v in space.values)):
        fields = dict(zip(names, combo, strict=True))
        if tuple(fields[n] for n, _ in fixed) in signatures and space._holds_a_row(fields):
            count += 1
    return count


def uncovered_keys(tunable, facts, certified: Mapping) -> list[tuple[str, dict]]:
    """One key for each dtype, flag and label combination of the kernel's key space that no certified key
    shares: certified, they give every key of the space a neighbour to be served from (neighbours.py).
    Its sizes are those of the certified key nearest it (the most such fields in common, then the median
    size among those), observed as that certificate's representative; certified: key text -> Entry."""
    space, kinds = key_space(tunable, facts), dict(tunable.key_fields)
    known = [(keys.parse(tunable.name, tunable.key, text, facts).values(), entry)
             for text, entry in sorted(certified.items())]
    known = [(fields, entry) for fields, entry in known if space.contains(fields)]
    if not known:
        raise MissingFactError(f"kernel {tunable.name!r} has no certified key in its key space to take sizes "
                               f"from: certify one of its keys files first")
    fixed = [n for n, _ in space.values if not _size_field(kinds[n])]
    held = {_signature(f, kinds) for f, _ in known}
    out = []
    for combo in itertools.product(*(v for n, v in space.values if n in fixed)):
        if combo in held:
            continue
        wanted = dict(zip(fixed, combo, strict=True))
        shared = [sum(f[n] == v for n, v in wanted.items()) for f, _ in known]
        nearest = sorted((math.prod(f[n] for n in f if _size_field(kinds[n])), i)
                         for i, (f, _) in enumerate(known) if shared[i] == max(shared))
        fields, entry = known[nearest[len(nearest) // 2][1]]
        fields = {**fields, **wanted}
        shown = entry.proof.get("representative", {})
        observed = {n: shown[n] for n in fields if kinds[n] in keys.CLASSED and n in shown}
        out.append((",".join(f"{n}={keys.spell(v)}" for n, v in fields.items()), observed))
    return out


def row_of(ladder, value: int) -> dict:
    """The ladder row that holds a size: {up_to, step}."""
    for row in ladder:
        if row["up_to"] is None or value <= row["up_to"]:
            return dict(row)
    raise LaunchKeyError(f"{value} is above the ladder's last row")


def neighbour_value(kind: str, ladder, value: int, rungs: int) -> int | None:
    """The class `rungs` rungs above (below, when negative) a class; an exact size that many octaves away.
    None below the first class above 0."""
    if kind in keys.OCTAVE_SIZES:
        moved = value * 2 ** rungs if rungs >= 0 else value // 2 ** -rungs
        return moved if moved >= 1 and (rungs >= 0 or moved * 2 ** -rungs == value) else None
    index = class_index(ladder, value) + rungs
    if index < 1:
        return None
    top = max(value, 1) * 2 ** max(rungs, 0) * 4 + 1
    found = classes(ladder, top)
    while len(found) < index:
        top *= 4
        found = classes(ladder, top)
    return found[index - 1]
