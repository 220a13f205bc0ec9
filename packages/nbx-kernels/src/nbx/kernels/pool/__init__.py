"""max_pool, avg_pool, adaptive_avg_pool and adaptive_max_pool (1-D to 3-D) on the window kernel
of the conv family (conv/kernel.py): one launch a call, a BLOCK_C x BLOCK_W tile of one output
row, the taps walked with scalar depth and height and vector width; the output (and max's int64
indices) keeps the input's layout. Tiles: the device file's tiles.window (memory-bound: no tuning). A
global average pool (every output size 1) is the reduction family's mean over the spatial dims.
"""
from __future__ import annotations

from math import prod

from nbx.core import dtypes
from nbx.core.ops.pooling import adaptive_window, pool_args

from .. import plans, reduction
from ..conv import check_dtype, is_channels_last, storage_layout, three, window_tile
from ..conv.kernel import AVG, MAX, window_kernel
from ..cost import Cost, declares, price
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements


def _window_plan(shape, strides, dtype, device, mode: int, kernel, stride, padding, dilation, outs, adaptive: bool,
                 include_pad: bool, divisor: int) -> LaunchPlan:
    n = len(outs)
    batched = len(shape) == n + 2
    if not batched:  # unbatched (C, *S): one sample
        shape, strides = (1, *shape), (0, *strides)
    batch, channels = shape[0], shape[1]
    cl = is_channels_last(shape, strides)
    storage, o_strides, view = storage_layout(batch, channels, outs, cl)
    tile = window_tile(device, cl)
    outs3, sizes = three(outs, 1), three(shape[2:], 1)
    xs = (strides[0], strides[1], *three(strides[2:], 0))
    os_ = (o_strides[0], o_strides[1], *three(o_strides[2:], 0))
    args = (Slot("x"), Slot("x"), Slot("x"), Slot("out"), Slot("indices") if mode == MAX else Slot("out"),
            Slot("x"), channels, *sizes, *outs3, *three(kernel, 1), 1, *three(stride, 1), *three(padding, 0),
            *three(dilation, 1), divisor, *xs, 0, 0, 0, 0, *os_, 0, 0, 0, 0, 0)
    grid = (batch * outs3[0] * outs3[1], -(-outs3[2] // tile["block_w"]), -(-channels // tile["block_c"]))
    meta = dict(MODE=mode, ADAPTIVE=adaptive, INCLUDE_PAD=include_pad, HAS_BIAS=False, ACTIVATION=None, HAS_RES=False,
                BLOCK_C=tile["block_c"],
                BLOCK_W=tile["block_w"], num_warps=tile["num_warps"])
    outputs = [plans.output("out", storage, dtype)]
    if mode == MAX:
        outputs.append(plans.output("indices", storage, dtypes.int64))
    if not batched:
        view = tuple(d - 1 for d in view[1:])
        outputs = [plans.output(o.name, o.shape[1:], o.dtype) for o in outputs]
    return LaunchPlan(device, (Launch(window_kernel, grid, args, meta),), tuple(outputs), detail=view)


def _run(op: str, x, mode, kernel, stride, padding, dilation, outs, adaptive, include_pad=False, divisor=0):
    check_dtype(op, x.dtype)
    key = (x.shape, x.strides, x.dtype, x.device, mode, kernel, stride, padding, dilation, outs, adaptive,
           include_pad, divisor)
    plan = plans.cached("pool", key, lambda: _window_plan(x.shape, x.strides, x.dtype, x.device, mode, kernel, stride,
                                                          padding, dilation, outs, adaptive, include_pad, divisor))
    values = plans.execute(plan, {"x": x})
    out = values["out"].permute(*plan.detail)
    return (out, values["indices"].permute(*plan.detail)) if mode == MAX else out


def _max_pool(x, kernel, stride, padding, dilation, ceil_mode):
    n = len(kernel)
    *_, outs = pool_args(f"max_pool{n}d", n, x, kernel, stride, padding, dilation, ceil_mode)
    return _run(f"max_pool{n}d", x, MAX, kernel, stride, padding, dilation, outs, False)


def _avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    n = len(kernel)
    *_, outs = pool_args(f"avg_pool{n}d", n, x, kernel, stride, padding, 1, ceil_mode)
    return _run(f"avg_pool{n}d", x, AVG, kernel, stride, padding, (1,) * n, outs, False, count_include_pad,
                divisor or 0)


def adaptive_taps(x, sizes) -> tuple[int, ...]:
    """The widest window of each spatial dim of an adaptive pool (the kernel walks that many taps)."""
    n = len(sizes)
    widths = []
    for d, out in enumerate(sizes):
        start, end = adaptive_window(x.shape[x.ndim - n + d], out)
        widths.append(int((end - start).max()))
    return tuple(widths)


def _adaptive(mode: int):
    def run(x, sizes):
        n = len(sizes)
        ones = (1,) * n
        if mode == AVG and all(s == 1 for s in sizes):   # a global mean: the reduction family's
            check_dtype("adaptive_pool", x.dtype)
            return reduction.mean(x, tuple(range(x.ndim - n, x.ndim)), True, x.dtype)
        return _run("adaptive_pool", x, mode, adaptive_taps(x, sizes), ones, (0,) * n, ones, tuple(sizes), True)
    return run


for _n in (1, 2, 3):
    implements(f"max_pool{_n}d")(_max_pool)
    implements(f"avg_pool{_n}d")(_avg_pool)
    implements(f"adaptive_avg_pool{_n}d")(_adaptive(AVG))
    implements(f"adaptive_max_pool{_n}d")(_adaptive(MAX))


def _priced(x, plan: LaunchPlan) -> Cost:
    written = sum(b.nbytes for b in plan.buffers())
    return Cost(plan.buffers(), x.size * x.dtype.itemsize + written, prod(plan.outputs[0].shape), 1)


def _pool_cost(mode):
    def cost(x, *args):
        if mode == "max":
            kernel, stride, padding, dilation, ceil_mode = args
            *_, outs = pool_args("max_pool", len(kernel), x, kernel, stride, padding, dilation, ceil_mode)
            plan = _window_plan(x.shape, x.strides, x.dtype, x.device, MAX, kernel, stride, padding, dilation, outs,
                                False, False, 0)
        elif mode == "avg":
            kernel, stride, padding, ceil_mode, include, divisor = args
            *_, outs = pool_args("avg_pool", len(kernel), x, kernel, stride, padding, 1, ceil_mode)
            plan = _window_plan(x.shape, x.strides, x.dtype, x.device, AVG, kernel, stride, padding,
                                (1,) * len(kernel), outs, False, include, divisor or 0)
        elif mode == "adaptive_avg" and all(s == 1 for s in args[0]):   # the reduction's mean runs it: its cost
            return price("mean", x, dim=tuple(range(x.ndim - len(args[0]), x.ndim)), keepdim=True)
        else:
            (sizes,) = args
            ones = (1,) * len(sizes)
            plan = _window_plan(x.shape, x.strides, x.dtype, x.device, MAX if mode == "adaptive_max" else AVG,
                                adaptive_taps(x, sizes), ones, (0,) * len(sizes), ones, tuple(sizes), True, False, 0)
        return _priced(x, plan)
    return cost


for _n in (1, 2, 3):
    for _kind in ("max", "avg", "adaptive_avg", "adaptive_max"):
        declares(f"{_kind}_pool{_n}d")(_pool_cost(_kind))

__all__ = ["adaptive_taps"]
