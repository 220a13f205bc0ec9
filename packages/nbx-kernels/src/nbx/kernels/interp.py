"""The `interp` device: host memory whose tensors run the same Triton kernels through Triton's
interpreter (TRITON_INTERPRET=1). This is how kernels are tested on machines without a GPU.

Triton's interpreter copies torch tensors to the host before a launch and back after it. nbx's
interp tensors already live in host memory, so the copies are the identity: the launcher hands
the interpreter the host pointers directly, and no torch is needed.
"""
from __future__ import annotations

import triton

from nbx.core.cpu import HostMemoryBackend
from nbx.core.device import register_backend
from nbx.core.errors import DeviceError

NAME = "interp"


def interpreter_active() -> bool:
    """Triton decides at decoration time whether @triton.jit functions are interpreted."""
    return bool(triton.knobs.runtime.interpret)


class InterpBackend(HostMemoryBackend):
    """Host memory for tensors whose op implementations are interpreted Triton kernels."""

    runs_triton_kernels = True

    def __init__(self):
        super().__init__(NAME)

    def target(self, device) -> str:
        return NAME


def _pass_host_arguments_through() -> None:
    from triton.runtime import interpreter

    def init_args(self, args_dev, kwargs):
        return list(args_dev), dict(kwargs)

    def restore_args(self, args_dev, args_hst, kwargs, kwargs_hst):
        return None

    interpreter.GridExecutor._init_args_hst = init_args
    interpreter.GridExecutor._restore_args_dev = restore_args


def register() -> None:
    if not interpreter_active():
        raise DeviceError(
            "the interp device needs Triton's interpreter: set TRITON_INTERPRET=1 before triton is imported")
    _pass_host_arguments_through()
    register_backend(InterpBackend())
