"""What the distributions above nbx.core lend it, by name, so that nbx.core never imports them.

The layers point one way (core <- memory <- autotune <- kernels <- devices, DESIGN.md): a part of
nbx.core that can use an upper layer's work when it is installed (nbx.graph's CUDA capture and its
memory plan, the autotune report line `nbx.models` prints) asks for it here, and the upper layer
provides it when it loads (nbx.kernels' `register()`, nbx.autotune's import). Absent, the caller
takes its plain path or refuses by name.

    graph_capture   nbx.memory.graphs (capture_support(device_type), capture(fn, device, warmup=))
    memory_plan     nbx.memory.slab.greedy_by_size (a slab plan of alloc/free events)
    costs           nbx.kernels.cost (price(op, *args, **kwargs), total(costs))
    autotune_report nbx.autotune.report_line
"""
from __future__ import annotations

_PROVIDED: dict[str, object] = {}


def provide(name: str, service: object) -> None:
    _PROVIDED[name] = service


def provided(name: str):
    """The service an installed upper layer provides under name, or None."""
    if name not in _PROVIDED:
        from .device import discover_plugins
        discover_plugins()  # nbx.kernels registers (and so provides) when the plugins load
    return _PROVIDED.get(name)
