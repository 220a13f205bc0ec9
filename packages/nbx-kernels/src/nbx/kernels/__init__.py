"""nbx.kernels: Triton kernels implementing nbx.core's ops on GPU backends and on `interp`.

nbx.core finds this distribution through the entry-point group `nbx.kernels` (or, in a source tree,
by importing it) and calls `register()`: every op family registers its implementations for the
backends that declare `runs_triton_kernels` (nbx.core.dispatch.TRITON), and the `interp` device is
registered when Triton's interpreter is on.
"""
from __future__ import annotations

import importlib

from .version import __version__

FAMILIES = ("elementwise", "random", "softmax", "reduction", "norm", "matmul", "gather", "sort", "copies", "sampling",
            "attention", "moe", "conv", "pool", "resample",
            "fft")


def register() -> None:
    from nbx.core import services
    from nbx.core.device import record_unavailable
    from nbx.core.errors import DeviceError
    from nbx.memory import graphs, slab

    from . import cost, interp
    # what nbx.core may use of the layers below this one and of this one (nbx.core.services)
    services.provide("graph_capture", graphs)
    services.provide("memory_plan", slab.greedy_by_size)
    services.provide("costs", cost)
    for family in FAMILIES:
        importlib.import_module(f".{family}", __name__)
    try:
        interp.register()
    except DeviceError as exc:
        record_unavailable("interp", str(exc))


__all__ = ["register", "__version__"]
