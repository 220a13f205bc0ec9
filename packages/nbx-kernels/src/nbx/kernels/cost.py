"""What a launch costs, declared by its wrapper before anything runs.

A planner prices a model from these declarations without launching it (`price`), and a GPU test
checks that each op's declared allocation equals the allocator's measured peak for that call.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nbx.core.errors import NotSupportedError
from nbx.core.spec import Call, spec_of

RESULT = "result"    # returned to the caller: lives past the launch
LAUNCH = "launch"    # workspace the launch needs, freed when the wrapper returns


@dataclass(frozen=True)
class Buffer:
    name: str
    nbytes: int
    lifetime: str = RESULT


@dataclass(frozen=True)
class Cost:
    buffers: tuple[Buffer, ...] = ()
    bytes_moved: int = 0      # bytes read plus bytes written by the kernels
    flops: int = 0
    launches: int = 1
    notes: tuple[str, ...] = field(default=())

    @property
    def allocated(self) -> int:
        """Bytes the call allocates at its peak (every buffer is live at once inside the wrapper)."""
        return sum(b.nbytes for b in self.buffers)

    @property
    def outputs(self) -> int:
        return sum(b.nbytes for b in self.buffers if b.lifetime == RESULT)

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.buffers + other.buffers, self.bytes_moved + other.bytes_moved,
                    self.flops + other.flops, self.launches + other.launches, self.notes + other.notes)


_COSTS: dict[str, Callable[..., Cost]] = {}


def declares(op: str):
    """Decorator: fn(*args, **kw) -> Cost is the cost of one call of op."""
    def decorate(fn):
        _COSTS[op] = fn
        return fn
    return decorate


def price(op: str, *args, **kwargs) -> Cost:
    """The declared cost of `op(*args, **kwargs)`, computed without launching anything. An op with a
    spec (nbx.core.spec) is priced from its checked call: the one the implementation receives, given
    as price(op, call), or bound here from the front-end's arguments."""
    try:
        fn = _COSTS[op]
    except KeyError:
        raise NotSupportedError(f"{op} declares no cost (no kernel implements it yet)") from None
    if not (len(args) == 1 and not kwargs and isinstance(args[0], Call)):
        op_spec = spec_of(op)
        if op_spec is not None:
            return fn(op_spec.bind(*args, **kwargs))
    return fn(*args, **kwargs)


def total(costs) -> Cost:
    """The sum of several calls' costs (no call: nothing allocated, no launch)."""
    return sum(costs, Cost(launches=0))


def priced_ops() -> list[str]:
    return sorted(_COSTS)
