"""Where nbx.kernels' implementations are registered with nbx.core's dispatch."""
from __future__ import annotations

from collections.abc import Callable

from nbx.core import dispatch

# Device types whose ops run nbx's Triton kernels. `interp` is Triton's interpreter on host memory.
KERNEL_DEVICE_TYPES = ("cuda", "hip", "metal", "interp")


def implements(*ops: str) -> Callable:
    """Decorator: fn implements each op for every device type that runs Triton kernels."""
    def decorate(fn: Callable) -> Callable:
        for op in ops:
            for device_type in KERNEL_DEVICE_TYPES:
                dispatch.register(op, device_type)(fn)
        return fn
    return decorate
