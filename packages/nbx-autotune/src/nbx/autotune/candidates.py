"""What an autotuned kernel declares: its parameters' candidate values, its key, its workload.

    BLOCKS = Tunable(
        "elementwise",
        params={"block": (256, 512, 1024, 2048, 4096), "num_warps": (2, 4, 8)},
        key={"n": "elements", "dtype": "dtype", "dense": "flag"},
        default_from="tiles.elementwise",
        constraint=lambda s, facts: s["block"] % (s["num_warps"] * facts.value("compute.warp_size")) == 0
                                    or "fewer elements than threads",
        workload=make_workload,        # (representative launch, device) -> screen.Workload
        weights={"n": 1},              # how much the setting depends on each size field (neighbours)
    )
    declare(BLOCKS)                    # the certifier and `nbx autotune check` find it by name

Candidates are the product of the parameters' values, pruned by the device's facts before anything
compiles: num_warps by the threads a block may have, num_stages by the pipelining cap, then the
kernel's own constraint (shared memory and registers helpers below) and its per-key
`fits(setting, rep, facts)`, which sees the key's representative launch (its sizes and dtype). A
constraint answers True (keep), False or a text (pruned, the text saying why).

`weights` says how much the setting depends on each size field of the key (classed or exact): a
key served a neighbour's setting takes the neighbour nearest in octaves weighted so (space.distance).
A field not named weighs 1; a row kernel whose tile follows the row's width and hardly its row
count weighs the width above the element count (nbx.kernels.rows.ROW_WEIGHTS).

`implied` names parameters added after certificates were made, each with the value that a setting
lacking it ran with (conv's split_k: 1, an unsplit K loop): a certificate whose parameters lack one
is read with it filled in (store.validate), so what was certified keeps being served as it ran.
"""
from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from nbx.core.errors import ArgumentError, MissingFactError

from . import keys

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Setting = Mapping[str, object]


@dataclass(frozen=True, eq=False)
class Tunable:
    name: str
    params: Mapping[str, Sequence]
    key: Mapping[str, str]
    workload: Callable | None = None
    constraint: Callable | None = None
    fits: Callable | None = None
    default_from: str | None = None
    weights: Mapping[str, float] | None = None
    implied: Mapping[str, object] | None = None
    # how a launch's dtype becomes its key's dtype field, where it is not the dtype itself (the copies
    # key the word they move: bfloat16 and float16 are u16): the key space maps the stated dtypes so
    key_dtype: Callable | None = None
    # the classed key field counting the elements a launch reads: a neighbour's screen then runs on the
    # launch's own sizes while they stay within autotune.neighbour_screen_max_bytes, so that the screen
    # compiles the very specialization the launch then loads (neighbours.Screener); None: keys.smallest
    screen_at_launch: str | None = None
    key_fields: tuple = field(init=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ArgumentError(f"a tunable kernel's name is a lowercase identifier (its certificate file's "
                                f"name), got {self.name!r}")
        if not isinstance(self.params, Mapping) or not self.params:
            raise ArgumentError(f"kernel {self.name!r} declares no parameter to tune")
        frozen = {}
        for param, values in self.params.items():
            if not isinstance(param, str) or not _PARAM.fullmatch(param):
                raise ArgumentError(f"kernel {self.name!r}: parameter {param!r} is not an identifier")
            values = tuple(values) if isinstance(values, (list, tuple)) else None
            if not values or any(not isinstance(v, (int, str)) for v in values) or len(set(values)) != len(values):
                raise ArgumentError(f"kernel {self.name!r}: parameter {param!r} needs a list of distinct int, "
                                    f"bool or str values, got {self.params[param]!r}")
            frozen[param] = values
        object.__setattr__(self, "params", MappingProxyType(frozen))
        object.__setattr__(self, "key_fields", keys.check_spec(self.name, self.key))
        object.__setattr__(self, "weights", MappingProxyType(self._checked_weights()))
        implied = dict(self.implied or {})
        for name, value in implied.items():
            if name not in frozen or value not in frozen[name]:
                raise ArgumentError(f"kernel {self.name!r}: implied parameter {name!r} = {value!r} is not one of "
                                    f"its declared values")
        object.__setattr__(self, "implied", MappingProxyType(implied))
        if self.screen_at_launch is not None and (self.screen_at_launch, "elements") not in self.key_fields:
            raise ArgumentError(f"kernel {self.name!r}: screen_at_launch names {self.screen_at_launch!r}, which is "
                                f"not an `elements` field of its key {dict(self.key_fields)}")

    def _checked_weights(self) -> dict:
        sizes = [n for n, kind in self.key_fields if kind in keys.LADDERS or kind in keys.OCTAVE_SIZES]
        given = dict(self.weights or {})
        for name, weight in given.items():
            if name not in sizes:
                raise ArgumentError(f"kernel {self.name!r}: weights name {name!r}, which is not a size field of "
                                    f"its key (its size fields: {sizes})")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
                raise ArgumentError(f"kernel {self.name!r}: the weight of key field {name!r} is a number above 0, "
                                    f"got {weight!r}")
        return {name: float(given.get(name, 1.0)) for name in sizes}

    @property
    def parameters(self) -> list[str]:
        return sorted(self.params)

    def settings(self) -> list[dict]:
        """Every setting of the declared space, in the declared order of values."""
        names = list(self.params)
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*self.params.values())]

    def candidates(self, facts, rep: Mapping | None = None) -> tuple[list[dict], list[tuple[dict, str]]]:
        """(kept, pruned with reasons): the declared space cut by the device's facts and the key."""
        kept, pruned = [], []
        default = self.default(facts) if self.default_from else None
        space = self.settings()
        if default is not None and default not in space:
            space.insert(0, default)  # the device file's tile is always compared
        for setting in space:
            reason = self.refusal(setting, facts, rep)
            if reason is None:
                kept.append(setting)
            else:
                pruned.append((setting, reason))
        return kept, pruned

    def refusal(self, setting: Mapping, facts, rep: Mapping | None = None) -> str | None:
        """Why the device's facts, the kernel's constraint or the key (rep) prune a setting, or None."""
        reason = device_limits(setting, facts)
        if reason is None and self.constraint is not None:
            reason = _verdict(self.constraint(setting, facts), "the kernel's constraint")
        if reason is None and self.fits is not None and rep is not None:
            reason = _verdict(self.fits(setting, rep, facts), "the key")
        return reason

    def default(self, facts) -> dict:
        """The device file's tile for this kernel (default_from), restricted to the tuned parameters."""
        if self.default_from is None:
            raise MissingFactError(f"kernel {self.name!r} names no default tile (default_from)")
        record = facts.value(self.default_from)
        missing = [p for p in self.params if p not in record]
        if missing:
            raise MissingFactError(f"{self.default_from!r} states no {missing} for kernel {self.name!r}, "
                                   f"which tunes {list(self.params)}; it holds {sorted(record)}")
        return {p: record[p] for p in self.params}

    def parameter_problems(self, setting: Mapping) -> str | None:
        """Why a setting does not fit this kernel's parameters (names it lacks or does not have), or None."""
        unknown = sorted(set(setting) - set(self.params))
        lacking = sorted(set(self.params) - set(setting) - set(self.implied))
        if not unknown and not lacking:
            return None
        parts = []
        if unknown:
            parts.append(f"names parameter(s) {unknown} that kernel {self.name!r} does not have")
        if lacking:
            parts.append(f"lacks parameter(s) {lacking} of kernel {self.name!r}")
        return "; ".join(parts) + f" (its parameters: {self.parameters})"


def _verdict(answer, who: str) -> str | None:
    if answer is True or answer is None:
        return None
    if answer is False:
        return f"refused by {who}"
    if isinstance(answer, str) and answer:
        return answer
    raise ArgumentError(f"{who} answered {answer!r}; a constraint answers True, False or a reason")


def device_limits(setting: Mapping, facts) -> str | None:
    """Limits every launch obeys: threads per block, and the pipelining cap on stages."""
    if "num_warps" in setting:
        threads = setting["num_warps"] * facts.value("compute.warp_size")
        limit = facts.value("compute.max_threads_per_block")
        if threads > limit:
            return f"{setting['num_warps']} warps are {threads} threads, above compute.max_threads_per_block {limit}"
    if "num_stages" in setting:
        cap = facts.value("pipelining.max_num_stages")
        if setting["num_stages"] > cap:
            return f"{setting['num_stages']} stages, above pipelining.max_num_stages {cap}"
    return None


def shared_memory(bytes_of: Callable[[Mapping], int]) -> Callable:
    """A constraint: the setting's shared memory (bytes_of(setting)) fits memory.max_shared_memory_per_block."""
    def fits(setting, facts):
        need, have = bytes_of(setting), facts.value("memory.max_shared_memory_per_block")
        return need <= have or f"needs {need} bytes of shared memory, above memory.max_shared_memory_per_block {have}"
    return fits


def registers(per_thread: Callable[[Mapping], int]) -> Callable:
    """A constraint: per_thread(setting) registers fit a thread's and a block's register limits."""
    def fits(setting, facts):
        regs = per_thread(setting)
        cap = facts.value("compute.max_registers_per_thread")
        if regs > cap:
            return f"needs {regs} registers a thread, above compute.max_registers_per_thread {cap}"
        block = regs * setting.get("num_warps", 1) * facts.value("compute.warp_size")
        have = facts.value("memory.max_registers_per_block")
        return block <= have or f"needs {block} registers a block, above memory.max_registers_per_block {have}"
    return fits


def all_of(*constraints: Callable) -> Callable:
    """A constraint that holds when each of constraints holds (the first refusal's reason)."""
    def fits(setting, facts):
        for constraint in constraints:
            reason = _verdict(constraint(setting, facts), "a constraint")
            if reason is not None:
                return reason
        return True
    return fits


_registry: dict[str, Tunable] = {}
_registry_lock = threading.Lock()


def declare(tunable: Tunable) -> Tunable:
    """Register a tunable kernel by name; a second, different declaration of the name is refused."""
    with _registry_lock:
        known = _registry.get(tunable.name)
        if known is not None and known is not tunable and (
                dict(known.params) != dict(tunable.params) or known.key_fields != tunable.key_fields
                or dict(known.weights) != dict(tunable.weights)):
            raise ArgumentError(f"kernel {tunable.name!r} is declared twice with different parameters or keys")
        _registry[tunable.name] = tunable
    return tunable


def declared() -> dict[str, Tunable]:
    with _registry_lock:
        return dict(_registry)


def lookup(name: str) -> Tunable:
    with _registry_lock:
        found = _registry.get(name)
    if found is None:
        raise ArgumentError(f"no kernel named {name!r} declares tuned settings; declared: {sorted(declared())} "
                            f"(kernels declare them when nbx.kernels is imported)")
    return found
