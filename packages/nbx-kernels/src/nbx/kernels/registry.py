"""Where nbx.kernels' implementations are registered with nbx.core's dispatch."""
from __future__ import annotations

from collections.abc import Callable

from nbx.core import dispatch

def implements(*ops: str) -> Callable:
    """Decorator: fn implements each op for every backend that declares it runs Triton kernels
    (`runs_triton_kernels`: cuda, hip, metal, and interp, Triton's interpreter on host memory)."""
    def decorate(fn: Callable) -> Callable:
        for op in ops:
            dispatch.register(op, dispatch.TRITON)(fn)   # the provider: fn's module (a family)
        return fn
    return decorate
