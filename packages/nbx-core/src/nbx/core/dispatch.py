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
_OBSERVER = threading.local()  # .current: nbx.core.graph's recorder while one runs on this thread


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
    observer = getattr(_OBSERVER, "current", None)
    return fn if observer is None else partial(observer.record, op, fn)


@contextmanager
def observed(observer):
    """While the block runs, this thread's work is shown to observer (nbx.core.graph's recorder, which
    prices, plans and checks a step being captured); other threads are not observed:
    - every implementation is called as observer.record(op, fn, *args, **kwargs);
    - every storage tensor.empty makes is passed to observer.allocated(storage);
    - every host read (Tensor.numpy and what uses it) and upload is passed to
      observer.host_access(tensor, what) before it happens."""
    outer = getattr(_OBSERVER, "current", None)
    _OBSERVER.current = observer
    try:
        yield
    finally:
        _OBSERVER.current = outer


def observer():
    """The observer of this thread's work (dispatch.observed), or None."""
    return getattr(_OBSERVER, "current", None)


def has_implementation(op: str, backend: str) -> bool:
    return (op, backend) in _IMPLEMENTATIONS


def registered_ops(backend: str) -> list[str]:
    return sorted(o for o, b in _IMPLEMENTATIONS if b == backend)
