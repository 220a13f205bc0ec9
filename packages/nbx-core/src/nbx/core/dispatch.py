"""Implementations of nbx.core's ops, registered per op and per backend.

nbx.core registers the CPU implementations (the numpy references); nbx.kernels and the vendor
plugins register theirs for their device types. The front-end looks one up for the device its
operands live on, and a missing one is refused by name.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial

from .device import Device
from .errors import NotSupportedError

_IMPLEMENTATIONS: dict[tuple[str, str], Callable] = {}
_OBSERVER = threading.local()  # .record, .allocated: nbx.core.graph's recorder while one runs on this thread


def register(op: str, backend: str):
    """Decorator: fn implements op for devices of type backend."""
    def decorate(fn: Callable) -> Callable:
        _IMPLEMENTATIONS[op, backend] = fn
        return fn
    return decorate


def implementation(op: str, device: Device) -> Callable:
    fn = _IMPLEMENTATIONS.get((op, device.type))
    if fn is None:
        from .device import discover_plugins
        discover_plugins()  # the kernels distribution registers GPU implementations when loaded
        fn = _IMPLEMENTATIONS.get((op, device.type))
    if fn is None:
        raise NotSupportedError(
            f"{op} is not implemented on {device.type} yet "
            f"(backends implementing it: {sorted(b for o, b in _IMPLEMENTATIONS if o == op)})")
    record = getattr(_OBSERVER, "record", None)
    return fn if record is None else partial(record, op, fn)


@contextmanager
def observed(record: Callable, allocated: Callable):
    """While the block runs, this thread calls every implementation as record(op, fn, *args, **kwargs)
    and tells allocated(storage) of every tensor.empty (nbx.core.graph prices and plans a captured
    step from them); other threads are not observed."""
    outer = getattr(_OBSERVER, "record", None), getattr(_OBSERVER, "allocated", None)
    _OBSERVER.record, _OBSERVER.allocated = record, allocated
    try:
        yield
    finally:
        _OBSERVER.record, _OBSERVER.allocated = outer


def allocation_observer() -> Callable | None:
    return getattr(_OBSERVER, "allocated", None)


def has_implementation(op: str, backend: str) -> bool:
    return (op, backend) in _IMPLEMENTATIONS


def registered_ops(backend: str) -> list[str]:
    return sorted(o for o, b in _IMPLEMENTATIONS if b == backend)
