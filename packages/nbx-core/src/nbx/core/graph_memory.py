"""What a captured step's memory is: its ops' declared costs, laid out by the slab planner.

nbx.core.graph runs a step's function once under dispatch.observed(Recorder(...)):
- every op the function calls (the outermost implementation call: what an implementation calls
  inside is part of its own declaration) is priced with nbx.kernels.cost.price;
- every storage tensor.empty makes (outputs, workspaces, the function's own empty/zeros) is a slab
  event: allocated then, freed when the last tensor viewing it is gone (CPython frees a temporary as
  soon as the function drops it, so the events follow the function's own order);
- a host read (`numpy()`, `item()`, `print`) or an upload in the function's own code is refused,
  on every device: where steps are graphs it is a host synchronization.
nbx.memory.slab plans those events: the plan's live peak is the least memory the step runs in, its
extent what a slab laid out ahead would hold; the graph's private pool (on a device that captures)
reserves at least the live peak. The declared costs and the allocations are two accounts of the
same run: tests check that they agree.

Pricing needs nbx.kernels (the declarations) and planning nbx.memory; a step on a bare nbx-core
install runs and replays all the same, and asking for its memory names the missing distribution.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from . import services
from .errors import GraphCaptureError, NbxError, NotSupportedError

ALIGNMENT = 512  # the pool rounds every request up to 512 bytes (docs/memory.md, rule 1): the plan does too


class Recorder:
    """dispatch.observed's observer: prices each outermost op call, logs each new storage, refuses host access."""

    def __init__(self, price):
        self.price = price          # nbx.kernels.cost.price, or None where nbx.kernels is absent
        self.calls: list[str] = []
        self.costs: list = []
        self.unpriced: list[tuple[str, str]] = []
        self.events: list[tuple] = []
        self.requested = 0          # bytes the run asked for (before the pool's rounding)
        self.open = True
        self._depth = 0
        self._ids = 0

    def record(self, op: str, fn, *args, **kwargs):
        if self._depth or not self.open:
            return fn(*args, **kwargs)
        self._priced(op, args, kwargs)
        self.calls.append(op)
        self._depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            self._depth -= 1

    def _priced(self, op, args, kwargs) -> None:
        if self.price is None:
            self.unpriced.append((op, "nbx.kernels is not installed"))
            return
        try:
            self.costs.append(self.price(op, *args, **kwargs))
        except NbxError as exc:  # a copy, a fill: no declaration (or none on this device)
            self.unpriced.append((op, str(exc)))
        except TypeError as exc:  # the declaration does not take the arguments the front-end passed
            self.unpriced.append((op, f"its declaration does not take the implementation's arguments ({exc})"))

    def allocated(self, storage) -> None:
        """A storage tensor.empty made during the run: allocated now, freed when the last view of it is gone."""
        if not self.open:
            return
        self._ids += 1
        ident = self._ids
        self.requested += storage.nbytes
        self.events.append(("alloc", ident, -(-storage.nbytes // ALIGNMENT) * ALIGNMENT, ALIGNMENT))
        weakref.finalize(storage, self._freed, ident)

    def _freed(self, ident: int) -> None:
        if self.open:
            self.events.append(("free", ident))

    def host_access(self, tensor, what: str) -> None:
        """A host read or upload: refused in the step's own code (an op may read its operands inside
        its implementation on cpu), so that a step that runs here runs where steps are graphs."""
        if self.open and not self._depth:
            raise GraphCaptureError(
                f"{what} of a {tensor.device} tensor inside a captured step: where steps are graphs it is a host "
                f"synchronization, which a capture cannot hold (and a value read once would be replayed "
                f"stale); read results after the step, pass values in as static inputs", operation=what)

    def close(self) -> None:
        """The run is over: what is still live (the outputs) lives to the end of the plan."""
        self.open = False


@dataclass(frozen=True)
class StepMemory:
    """A captured step's memory: declared by its ops, planned, and held by its private pool."""
    calls: tuple[str, ...]     # the ops the step's function called, in order
    declared: object           # nbx.kernels.cost.Cost: the sum of the priced calls' costs
    unpriced: tuple[tuple[str, str], ...]  # (op, why) of the calls with no declaration (copies, fills)
    requested: int             # bytes the run's allocations asked for
    plan: object               # nbx.memory.slab.SlabPlan of the run's allocations (rounded as the pool does)
    reserved: int              # bytes the capture's private pool holds from the driver (0: eager, or closed)

    @property
    def live_peak(self) -> int:
        return self.plan.live_peak


def recorder() -> Recorder:
    costs = services.provided("costs")
    return Recorder(None if costs is None else costs.price)


def summarize(rec: Recorder, reserved: int) -> StepMemory:
    costs, plan = services.provided("costs"), services.provided("memory_plan")
    if costs is None or plan is None:
        raise NotSupportedError("a captured step's memory is priced by nbx.kernels and planned by nbx.memory "
                                "(nbx.kernels is not installed)")
    return StepMemory(tuple(rec.calls), costs.total(rec.costs), tuple(rec.unpriced), rec.requested,
                      plan(rec.events), reserved)
