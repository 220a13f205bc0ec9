"""Implementations of nbx.core's ops, registered per op and per backend.

nbx.core registers the CPU implementations (the numpy references); nbx.kernels and the vendor
plugins register theirs. A registration names its provider (by default the registering function's
module). Registrations for `TRITON` serve every backend that declares `runs_triton_kernels`.
When two providers implement one op for one device type, the one of higher `priority` serves (no
priority counts as 0), whatever the order the plugins loaded in; two without a priority, or of
equal priority, are refused by name (DuplicateRegistrationError). The front-end looks the
implementation up for the device its operands live on, and a missing one is refused by name.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from .device import Device
from .errors import DuplicateRegistrationError, NotSupportedError

TRITON = "triton"   # the target of implementations that serve every backend running Triton kernels


class _Observed(threading.local):
    current = None  # nbx.core.graph's recorder while one runs on this thread (read by every op call)


_OBSERVER = _Observed()


@dataclass(frozen=True)
class Registration:
    fn: Callable
    provider: str
    priority: int | None = None   # None: no claim beyond being the only one

    @property
    def rank(self) -> int:
        return 0 if self.priority is None else self.priority


_REGISTRATIONS: dict[tuple[str, str], list[Registration]] = {}
_IMPLEMENTATIONS: dict[tuple[str, str], Callable] = {}   # resolved, by (op, device type)
_LISTENERS: list[Callable[[], None]] = []   # told when what serves an op may have changed


def on_change(listener: Callable[[], None]) -> None:
    """listener() runs whenever a registration or a backend may change what serves an op
    (nbx.core.spec drops the implementations its signatures prepared)."""
    _LISTENERS.append(listener)


def _changed() -> None:
    for listener in _LISTENERS:
        listener()


def register(op: str, backend: str, *, provider: str | None = None, priority: int | None = None):
    """Decorator: fn implements op for devices of type backend (or for every backend running Triton
    kernels: backend=TRITON). provider defaults to fn's module; priority decides between providers."""
    def decorate(fn: Callable) -> Callable:
        entry = Registration(fn, provider or getattr(fn, "__module__", repr(fn)), priority)
        candidates = [r for r in _REGISTRATIONS.get((op, backend), []) if r.provider != entry.provider] + [entry]
        _winner(op, backend, candidates)  # a conflict is refused now, by name, and not kept
        _REGISTRATIONS[op, backend] = candidates
        for key in [k for k in _IMPLEMENTATIONS if k[0] == op]:
            del _IMPLEMENTATIONS[key]
        _changed()
        return fn
    return decorate


def forget_resolved() -> None:
    """Resolve every op again (a backend registered: it may run Triton kernels)."""
    _IMPLEMENTATIONS.clear()
    _changed()


def _winner(op: str, device_type: str, candidates: list[Registration]) -> Registration | None:
    if not candidates:
        return None
    ranked = sorted(candidates, key=lambda r: r.rank, reverse=True)
    if len(ranked) > 1 and ranked[0].rank == ranked[1].rank:
        raise DuplicateRegistrationError(
            f"{op} on {device_type} is implemented by {ranked[0].provider} and by {ranked[1].provider}, "
            f"{'neither with a priority' if ranked[0].priority is None else f'both at priority {ranked[0].rank}'}: "
            f"give the one that should serve a higher priority, or remove the other")
    return ranked[0]


def _runs_triton(device_type: str) -> bool:
    from .device import _BACKENDS
    return bool(getattr(_BACKENDS.get(device_type), "runs_triton_kernels", False))


def _resolve(op: str, device_type: str) -> Callable | None:
    candidates = list(_REGISTRATIONS.get((op, device_type), []))
    if _runs_triton(device_type):
        candidates += _REGISTRATIONS.get((op, TRITON), [])
    found = _winner(op, device_type, candidates)
    if found is None:
        return None
    _IMPLEMENTATIONS[op, device_type] = found.fn
    return found.fn


def backend_implementation(op: str, device: Device) -> Callable:
    """What the device's backend registered for op itself (cuda's fill_: a memset), else what serves op: for
    a call that should compile no kernel of its own (the autotune screen's fill of an output with NaN,
    which the launch it screens never makes)."""
    found = _winner(op, device.type, list(_REGISTRATIONS.get((op, device.type), [])))
    return found.fn if found is not None else implementation(op, device)


def implementation(op: str, device: Device) -> Callable:
    fn = _IMPLEMENTATIONS.get((op, device.type))
    if fn is None:
        from .device import discover_plugins
        discover_plugins()  # the kernels distribution registers GPU implementations when loaded
        fn = _resolve(op, device.type)
    if fn is None:
        raise NotSupportedError(
            f"{op} is not implemented on {device.type} yet "
            f"(backends implementing it: {sorted(b for o, b in _REGISTRATIONS if o == op)})")
    observer = _OBSERVER.current
    return fn if observer is None else partial(observer.record, op, fn)


@contextmanager
def observed(observer):
    """While the block runs, this thread's work is shown to observer (nbx.core.graph's recorder, which
    prices, plans and checks a step being captured); other threads are not observed:
    - every implementation is called as observer.record(op, fn, *args, **kwargs);
    - every storage tensor.empty makes is passed to observer.allocated(storage);
    - every host read (Tensor.numpy and what uses it) and upload is passed to
      observer.host_access(tensor, what) before it happens."""
    outer = _OBSERVER.current
    _OBSERVER.current = observer
    try:
        yield
    finally:
        _OBSERVER.current = outer


def observer():
    """The observer of this thread's work (dispatch.observed), or None."""
    return _OBSERVER.current


def provider(op: str, device_type: str) -> str:
    """Who serves op on device_type (the provider of the registration that wins)."""
    fn = implementation(op, Device(device_type, None))
    for r in _REGISTRATIONS.get((op, device_type), []) + _REGISTRATIONS.get((op, TRITON), []):
        if r.fn is fn:
            return r.provider
    return getattr(fn, "__module__", repr(fn))


def has_implementation(op: str, backend: str) -> bool:
    return (op, backend) in _IMPLEMENTATIONS or _resolve(op, backend) is not None


def registered_ops(backend: str) -> list[str]:
    targets = (backend, TRITON) if _runs_triton(backend) else (backend,)
    return sorted({o for o, b in _REGISTRATIONS if b in targets})
