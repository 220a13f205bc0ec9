"""What a captured step's memory is: its ops' declared costs, laid out by the slab planner.

nbx.core.graph runs a step's function once under dispatch.observed(Recorder(...)): every op the
function calls (the outermost implementation call; what an implementation calls inside is part of
its own declared cost) is priced with nbx.kernels.cost.price, and its buffers become slab events:
the launch's workspace is freed when the call returns, its results when the last tensor viewing
their storage is gone (CPython frees a temporary as soon as the function drops it, so the events
follow the function's own order). nbx.memory.slab plans those events: the plan's live peak is the
least memory the step can run in, its extent what a slab laid out ahead would hold, and the graph's
private pool (on a device that captures) reserves at least that much.

Pricing needs nbx.kernels (the declarations) and planning nbx.memory; a step on a bare nbx-core
install runs and replays all the same, and asking for its memory names the missing distribution.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from .errors import NbxError, NotSupportedError
from .tensor import Tensor

ALIGNMENT = 512  # the pool rounds every request up to 512 bytes (docs/memory.md, rule 1): the plan does too


def _price_args(op: str, args: tuple) -> tuple:
    """The arguments a cost declaration takes, from those the front-end passed the implementation.

    Elementwise front-ends pass (spec, operands, out_dtype) and their costs take the operands; every
    other family's cost takes the implementation's own arguments."""
    if len(args) == 3 and getattr(args[0], "name", None) == op and isinstance(args[1], (tuple, list)):
        return tuple(args[1])
    return args


def _tensors(result) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for t in result if isinstance(t, Tensor)]
    return []


class Recorder:
    """dispatch.observed's record: prices each outermost op call and logs its buffers as slab events."""

    def __init__(self, price):
        self.price = price          # nbx.kernels.cost.price, or None where nbx.kernels is absent
        self.calls: list[str] = []
        self.costs: list = []
        self.unpriced: list[str] = []
        self.events: list[tuple] = []
        self.open = True
        self._depth = 0
        self._ids = 0
        self._seen = weakref.WeakValueDictionary()  # id -> storage: the inputs' and earlier results' (weak: they may die)

    def know(self, tensors) -> None:
        """Storages that exist before the run (its inputs): returned again, they are no new buffer."""
        self._seen.update({id(t.storage): t.storage for t in tensors})

    def __call__(self, op: str, fn, *args, **kwargs):
        if self._depth or not self.open:
            return fn(*args, **kwargs)
        cost = self._priced(op, args, kwargs)
        self._depth += 1
        try:
            result = fn(*args, **kwargs)
        finally:
            self._depth -= 1
        self.calls.append(op)
        fresh = {id(t.storage): t.storage for t in _tensors(result) if id(t.storage) not in self._seen}
        self._seen.update(fresh)  # a storage seen again (an op returning its input) is no new buffer
        if cost is None:  # unpriced: its results are buffers all the same (its workspace is not known)
            buffers = [(s.nbytes, "result") for s in fresh.values()]
        else:
            buffers = [(b.nbytes, b.lifetime) for b in cost.buffers]
        self._log(buffers, fresh)
        return result

    def _priced(self, op, args, kwargs):
        if self.price is None:
            self.unpriced.append((op, "nbx.kernels is not installed"))
            return None
        try:
            cost = self.price(op, *_price_args(op, args), **kwargs)
        except NbxError as exc:  # a copy, a fill: no declaration (or none on this device)
            self.unpriced.append((op, str(exc)))
            return None
        except TypeError as exc:  # the declaration does not take the arguments the front-end passed
            self.unpriced.append((op, f"its declaration does not take the implementation's arguments ({exc})"))
            return None
        self.costs.append(cost)
        return cost

    def _log(self, buffers, storages) -> None:
        from_launch, from_result = [], []
        for nbytes, lifetime in buffers:
            self._ids += 1
            self.events.append(("alloc", self._ids, -(-max(nbytes, 1) // ALIGNMENT) * ALIGNMENT, ALIGNMENT))
            (from_result if lifetime == "result" else from_launch).append(self._ids)
        self.events += [("free", i) for i in from_launch]
        if from_result and storages:
            left = [len(storages)]

            def one_gone():
                left[0] -= 1
                if left[0] == 0 and self.open:
                    self.events += [("free", i) for i in from_result]
            for storage in storages.values():
                weakref.finalize(storage, one_gone)
        elif from_result:  # results with no storage returned (an op writing into its argument)
            self.events += [("free", i) for i in from_result]

    def close(self) -> None:
        """The run is over: what is still live (the outputs) lives to the end of the plan."""
        self.open = False


@dataclass(frozen=True)
class StepMemory:
    """A captured step's memory: declared by its ops, planned, and held by its private pool."""
    calls: tuple[str, ...]     # the ops the step's function called, in order
    declared: object           # nbx.kernels.cost.Cost: the sum of the priced calls' costs
    unpriced: tuple[tuple[str, str], ...]  # (op, why): no declaration; planned by the bytes they returned
    plan: object               # nbx.memory.slab.SlabPlan of the priced buffers' lifetimes
    reserved: int              # bytes the capture's private pool holds from the driver (0: eager, or closed)

    @property
    def live_peak(self) -> int:
        return self.plan.live_peak


def recorder() -> Recorder:
    try:
        from nbx.kernels.cost import price
    except ImportError:
        price = None
    return Recorder(price)


def summarize(rec: Recorder, reserved: int) -> StepMemory:
    try:
        from nbx.kernels.cost import Cost
        from nbx.memory.slab import greedy_by_size
    except ImportError as exc:
        raise NotSupportedError(f"a captured step's memory is priced by nbx.kernels and planned by nbx.memory "
                                f"({exc.name} is not installed)") from None
    declared = sum(rec.costs, Cost(launches=0))
    return StepMemory(tuple(rec.calls), declared, tuple(rec.unpriced), greedy_by_size(rec.events), reserved)
