"""layer_norm, rms_norm, group_norm (and instance_norm through it), batch_norm (inference) and the
fused add_rms_norm.

Each reads its input as rows (nbx/kernels/rows.py) in place: layer and RMS norm's trailing dims, a
group's channels and positions, batch norm's positions of one (sample, channel). A channels-last
group is read in place too, its channels as the row's inner dim (kernel.py's TWO_D), and its
output is channels-last (as conv's). A layout whose
normalized dims do not merge into one stride, or whose row dims keep more than three dims, is read
through a dense copy; so are non-contiguous weights, biases and running statistics. The copies
are declared in each call's cost, computed from the same plan the launch follows.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from nbx.core.spec import Arg, Slots
from nbx.core.dtypes import DType, statistics_dtype
from nbx.core.errors import ArgumentError
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost, declares, price
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..rows import (LOOPED, SPLIT, Blocks, Rows, as_rows, blocks, contiguous_strides, float_bits, is_strided,
                    merged_stride, pow2_at_least, row_path, row_setting, wide_columns)
from ..types import compute_type
from ..conv import is_channels_last, storage_layout
from .kernel import channel_affine_kernel, norm_chunk_stats_kernel, norm_chunk_write_kernel, norm_rows_kernel
from .tuning import NORM

FLOPS_PER_ELEMENT = 6   # sum, centre, square, sum, scale, affine: about six


def _merged_view(shape, strides, keep: int, groups: int | None):
    """(shape, strides) with dims keep.. merged into one (split into groups rows first when
    groups is given), or None when those dims do not merge."""
    tail_stride = merged_stride(shape[keep:], strides[keep:])
    if tail_stride is None:
        return None
    size = prod(shape[keep:])
    lead, lead_strides = tuple(shape[:keep]), tuple(strides[:keep])
    if groups is None:
        return lead + (size,), lead_strides + (tail_stride,)
    return lead + (groups, size // groups), lead_strides + (size // groups * tail_stride, tail_stride)


def _channels_inner_view(shape, strides, groups: int):
    """A group of (N, C, *S) read with its channels as the row's inner dim: (shape (N, groups, n),
    strides (sample, group, inner: a channel), outer: a position), or None when the positions do
    not merge into one stride."""
    outer = merged_stride(shape[2:], strides[2:])
    if outer is None:
        return None
    group_channels = shape[1] // groups
    return ((shape[0], groups, group_channels * prod(shape[2:])),
            (strides[0], group_channels * strides[1], strides[1]), outer)


@dataclass(frozen=True)
class Plan:
    layout: Rows                  # strides of the row inputs then of the outputs, after any copy
    tile: Blocks
    path: str                     # rows.ONE_PASS, LOOPED or SPLIT
    copies: tuple[str, ...]       # inputs read through a dense copy
    part_dtype: DType             # the partials of split rows
    two_d: tuple | None = None    # a channels-inner group read in 2-D: (x's outer stride, out's outer stride)
    inner: int = 0                # channels a row's inner dim holds (its channel is j % inner); 0: channels-first
    positions: int = 1            # channels-first: elements of a group's row one channel apart
    storage: tuple | None = None  # the output's storage shape and the permutation that views it, if not x's shape


def _channels_last_groups(shape, x_strides, groups):
    """(merged shape, x's and out's row strides, two_d, inner, (storage shape, view)) of a channels-last
    group read in place (its output channels-last), or None."""
    if groups is None or not is_channels_last(shape, x_strides):
        return None
    x_view = _channels_inner_view(shape, x_strides, groups)
    if x_view is None:
        return None
    storage, out_strides, view = storage_layout(shape[0], shape[1], tuple(shape[2:]), True)
    (merged, xs, x_outer), (_, os_, o_outer) = x_view, _channels_inner_view(shape, out_strides, groups)
    inner = shape[1] // groups
    if inner == 1:  # instance norm: a channel's positions, one stride
        xs, os_, two_d = xs[:2] + (x_outer,), os_[:2] + (o_outer,), None
    elif x_outer == inner * xs[2] and o_outer == inner * os_[2]:  # channels and positions merge
        two_d = None
    else:
        two_d = (x_outer, o_outer)
    return merged, [xs, os_], two_d, inner, (storage, view)


def _decide(shape, inputs, params, dtype: DType, keep: int, groups, device, family: str, setting) -> Plan:
    two_d, inner, positions, storage = None, 0, prod(shape[2:]) if groups is not None else 1, None
    in_place = _channels_last_groups(shape, inputs[0][2], groups) if len(inputs) == 1 else None
    if in_place is not None:
        merged_shape, strides, two_d, inner, storage = in_place
        copies = []
        layout = as_rows(merged_shape, strides, len(merged_shape) - 1)
    else:
        merged_shape, dense = _merged_view(shape, contiguous_strides(shape), keep, groups)
        copies, strides = [], []
        for name, t_shape, t_strides in inputs:
            view = _merged_view(t_shape, t_strides, keep, groups)
            if view is None:
                copies.append(name)
            strides.append(dense if view is None else view[1])
        layout = as_rows(merged_shape, strides + [dense], len(merged_shape) - 1)
    if layout is None:  # row dims that do not collapse: every row input through a dense copy
        copies = [name for name, _, _ in inputs]
        layout = as_rows(merged_shape, [dense] * (len(strides) + 1), len(merged_shape) - 1)
    copies += [name for name, contiguous in params if not contiguous]
    strided = is_strided(layout)
    if setting is None:  # certified for the launch key (the device file's tile on interp)
        setting = row_setting(NORM, device, layout.rows, layout.n, dtype, strided)
    tile = blocks(layout.rows, layout.n, strided, {**launch.tiles("norm", device), **dict(setting)})
    path = LOOPED if family == "batch_norm" else row_path(tile, device)
    return Plan(layout, tile, path, tuple(copies), statistics_dtype(dtype), two_d, inner, positions, storage)


def plan(inputs: dict, params: dict, keep: int, groups: int | None = None, batch_norm: bool = False,
         setting=None) -> Plan:
    """inputs: the row tensors by name (x first); params: per-column or per-channel tensors. setting
    overrides the served one (the certifier's launches). The launches' plans keep it (_rows_plan)."""
    x = next(iter(inputs.values()))
    return _decide(tuple(x.shape), tuple((k, tuple(t.shape), tuple(t.strides)) for k, t in inputs.items()),
                 tuple((k, t.is_contiguous()) for k, t in params.items() if t is not None), x.dtype, keep, groups,
                 x.device, "batch_norm" if batch_norm else "norm", setting)


def _key(t: Tensor | None):
    return None if t is None else (t.shape, t.strides, t.dtype)


_X, _RES, _OUT, _NEW_RES, _W, _B, _PART, _EPS = (Slot(n) for n in (
    "x", "residual", "out", "new_residual", "weight", "bias", "partials", "eps_bits"))


def _rows_plan(x: Tensor, keep: int, weight, bias, rms: bool, residual, groups, setting,
               activation=None) -> LaunchPlan:
    inputs = {"x": x} if residual is None else {"x": x, "residual": residual}
    p = plan(inputs, {"weight": weight, "bias": bias}, keep, groups, setting=setting)
    lay, tile = p.layout, p.tile
    x_strides, out_strides = lay.strides[0], lay.strides[-1]
    res_strides = lay.strides[1] if residual is not None else (0, 0, 0, 0)
    group_args = (1, 1, 1) if groups is None else (groups, x.shape[1] // groups, p.positions)
    two_d_args = p.two_d or (0, 0)
    # a channels-inner row's last element lies (n / inner) outer strides in: int64 offsets past 2**31
    wide = wide_columns(lay) or (lay.n // max(p.inner, 1) + 1) * max(map(abs, two_d_args)) >= 2**31 - 1
    flags = dict(RMS=rms, ADD=residual is not None, COMPUTE=compute_type(x.dtype), BLOCK_ROWS=tile.block_rows,
                 BLOCK_N=tile.block_n, WIDE=wide, INNER=p.inner, TWO_D=p.two_d is not None, num_warps=tile.num_warps)
    affine = dict(HAS_W=weight is not None, HAS_B=bias is not None, GROUPED=groups is not None,
                  ACTIVATION=activation)
    rows = (lay.rows, lay.n)
    batch = (lay.batch[1], lay.batch[2])
    out_shape = x.shape if p.storage is None else p.storage[0]
    outputs = tuple(plans.output(name, out_shape, x.dtype) for name in ("out", "new_residual")[:len(inputs)])
    # an absent operand's pointer is x's or out's (never read or written)
    res, new_res = (_X, _OUT) if residual is None else (_RES, _NEW_RES)
    w, b = _W if weight is not None else _X, _B if bias is not None else _X
    if p.path != SPLIT:
        return LaunchPlan(x.device, (Launch(norm_rows_kernel, (tile.row_tiles,), (
            _X, res, _OUT, new_res, w, b, *rows, *batch, *x_strides, *res_strides, *out_strides, *group_args,
            *two_d_args, _EPS), dict(ONE_PASS=tile.chunks == 1, **affine, **flags)),), outputs, (), p.copies, p)
    grid = (tile.row_tiles * tile.chunks,)
    part_block = min(pow2_at_least(tile.chunks), tile.block_rows * tile.block_n)
    return LaunchPlan(x.device, (
        Launch(norm_chunk_stats_kernel, grid, (_X, res, new_res, _PART, *rows, tile.chunks, *batch, *x_strides,
                                               *res_strides, *out_strides, *two_d_args), flags),
        Launch(norm_chunk_write_kernel, grid, (_X, new_res, _OUT, w, b, _PART, *rows, tile.chunks, *batch,
                                               *x_strides, *out_strides, *group_args, *two_d_args, _EPS),
               dict(PART_BLOCK=part_block, **affine, **flags))),
        outputs, (plans.workspace("partials", (2, lay.rows, tile.chunks), p.part_dtype),), p.copies, p)


def rows_norm_plan(x: Tensor, keep: int, weight=None, bias=None, rms: bool = False, residual: Tensor | None = None,
                   groups: int | None = None, setting=None, activation=None) -> LaunchPlan:
    """The launch plan of launch_rows_norm's arguments, kept per layout."""
    key = (x.shape, x.strides, x.dtype, x.device, keep, groups, rms, _key(residual), _key(weight), _key(bias),
           plans.setting_key(setting), activation)
    return plans.cached("norm", key, lambda: _rows_plan(x, keep, weight, bias, rms, residual, groups, setting,
                                                        activation))


def launch_rows_norm(x: Tensor, keep: int, weight=None, bias=None, eps: float = 0.0, rms: bool = False,
                     residual: Tensor | None = None, groups: int | None = None, out: Tensor | None = None,
                     setting=None, activation=None):
    """The normalized rows of x (and, with a residual, the new residual x + residual), into out when
    given (contiguous, x's shape and dtype); setting overrides the served (certified) one. eps's
    value is an argument of every call (its float64 bits). activation (a name of
    nbx.core.ops.products.ACTIVATIONS) follows the affine map in the store. A channels-last group
    norm's output is channels-last."""
    if out is not None or x.size == 0:
        out = launch.output(x.shape, x.dtype, x.device, out)
        if x.size == 0:
            return out if residual is None else (out, launch.output(x.shape, x.dtype, x.device))
    p = rows_norm_plan(x, keep, weight, bias, rms, residual, groups, setting, activation)
    if out is not None and p.detail.storage is not None:
        raise ArgumentError("a channels-last group norm writes its own channels-last output; out= is contiguous")
    values = plans.execute(p, {"x": x, "residual": residual, "out": out, "weight": weight, "bias": bias,
                               "eps_bits": float_bits(eps)})
    if residual is not None:
        return values["out"], values["new_residual"]
    return values["out"] if p.detail.storage is None else values["out"].permute(*p.detail.storage[1])


def _batch_norm_plan(x: Tensor, params: dict) -> LaunchPlan:
    p = plan({"x": x}, params, keep=2, batch_norm=True)
    lay, tile = p.layout, p.tile
    w, b = _W if params["weight"] is not None else _X, _B if params["bias"] is not None else _X
    return LaunchPlan(x.device, (Launch(channel_affine_kernel, (tile.row_tiles,), (
        _X, _OUT, Slot("running_mean"), Slot("running_var"), w, b, lay.rows, lay.n, x.shape[1], lay.batch[1],
        lay.batch[2], *lay.strides[0], *lay.strides[-1], _EPS), dict(
        HAS_W=params["weight"] is not None, HAS_B=params["bias"] is not None, COMPUTE=compute_type(x.dtype),
        BLOCK_ROWS=tile.block_rows, BLOCK_N=tile.block_n, WIDE=wide_columns(lay), num_warps=tile.num_warps)),),
        (plans.output("out", x.shape, x.dtype),), (), p.copies, p)


def launch_batch_norm(x: Tensor, mean: Tensor, var: Tensor, weight=None, bias=None, eps: float = 0.0) -> Tensor:
    if x.size == 0:
        return launch.output(x.shape, x.dtype, x.device)
    params = {"running_mean": mean, "running_var": var, "weight": weight, "bias": bias}
    key = (x.shape, x.strides, x.dtype, x.device, *(_key(t) for t in params.values()))
    p = plans.cached("batch_norm", key, lambda: _batch_norm_plan(x, params))
    return plans.execute(p, {"x": x, "running_mean": mean, "running_var": var, "weight": weight, "bias": bias,
                             "eps_bits": float_bits(eps)})["out"]


# ---- the ops ---------------------------------------------------------------------------------

def _trailing_norm(rms: bool, residual: bool = False):
    """layer_norm, rms_norm or add_rms_norm of a checked call (nbx.core.ops.norms' specs)."""
    def run(call):
        return launch_rows_norm(call.x, call.x.ndim - len(call.shape), call.weight, None if rms else call.bias,
                                call.epsilon, rms=rms, residual=call.residual if residual else None)

    def prepare(call):
        """A signature's repeats: its plan's launcher, eps's bits fixed by the signature."""
        x = call.x
        if x.size == 0:
            return None
        bias = None if rms else call.bias
        execute = plans.prepared(rows_norm_plan(x, x.ndim - len(call.shape), call.weight, bias, rms,
                                                call.residual if residual else None))
        if execute is None:
            return None
        bits = float_bits(call.epsilon)
        if residual:
            def added(c):
                values = execute({"x": c.x, "residual": c.residual, "out": None, "new_residual": None,
                                  "weight": c.weight, "bias": None, "eps_bits": bits})
                return values["out"], values["new_residual"]
            return added
        return Slots(execute, {"x": Arg("x"), "residual": None, "out": None, "weight": Arg("weight"),
                               "bias": None if rms else Arg("bias"), "eps_bits": bits}, "out")
    run.prepare = prepare
    return run


implements("layer_norm")(_trailing_norm(rms=False))
implements("rms_norm")(_trailing_norm(rms=True))
implements("add_rms_norm")(_trailing_norm(rms=True, residual=True))


@implements("group_norm")
def _group_norm(x, num_groups, weight, bias, eps, activation=None):
    return launch_rows_norm(x, 1, weight, bias, eps, groups=num_groups, activation=activation)


@implements("batch_norm")
def _batch_norm(x, running_mean, running_var, weight, bias, eps):
    return launch_batch_norm(x, running_mean, running_var, weight, bias, eps)



# ---- declared costs ----------------------------------------------------------------------------

def norm_cost(inputs: dict, params: dict, keep: int, groups: int | None = None, outputs: int = 1,
              batch_norm: bool = False) -> Cost:
    """Outputs of x's shape and dtype; the row inputs read once, or for rows longer than the tile
    twice (split rows with a residual: x and residual once, the new residual written and read
    back); parameters read once; the partials of split rows; every dense copy."""
    x = next(iter(inputs.values()))
    out_bytes = x.size * x.dtype.itemsize
    buffers = [Buffer("out" if k == 0 else "new_residual", out_bytes) for k in range(outputs)]
    if x.size == 0:
        return Cost(tuple(buffers), 0, 0)
    p = plan(inputs, params, keep, groups, batch_norm)
    tensors = {**inputs, **{k: v for k, v in params.items() if v is not None}}
    moved = 0
    for name in p.copies:
        nbytes = tensors[name].size * tensors[name].dtype.itemsize
        buffers.append(Buffer(f"{name}_contiguous", nbytes, LAUNCH))
        moved += 2 * nbytes
    read = sum(t.size * t.dtype.itemsize for t in inputs.values())
    launches = 1 + len(p.copies)
    if p.tile.chunks == 1 or batch_norm:
        moved += read
    elif p.path == LOOPED:
        moved += 2 * read
    else:
        moved += read + (out_bytes if "residual" in inputs else read)  # the second read
        part_bytes = 2 * p.layout.rows * p.tile.chunks * p.part_dtype.itemsize
        buffers.append(Buffer("partials", part_bytes, LAUNCH))
        moved += part_bytes + part_bytes * p.tile.chunks  # written once, read by each piece of its row
        launches += 1
    moved += sum(t.size * t.dtype.itemsize for t in params.values() if t is not None)
    moved += outputs * out_bytes
    return Cost(tuple(buffers), moved, FLOPS_PER_ELEMENT * x.size, launches)


declares("layer_norm")(lambda call: norm_cost(
    {"x": call.x}, {"weight": call.weight, "bias": call.bias}, call.x.ndim - len(call.shape)))
declares("rms_norm")(lambda call: norm_cost({"x": call.x}, {"weight": call.weight}, call.x.ndim - len(call.shape)))
declares("group_norm")(lambda x, num_groups, weight=None, bias=None, eps=1e-5, activation=None: norm_cost(
    {"x": x}, {"weight": weight, "bias": bias}, 1, int(num_groups)))
# instance norm is a group norm of one channel a group with its batch's statistics, else a batch norm
declares("instance_norm")(lambda x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                           momentum=0.1, eps=1e-5: price("group_norm", x, x.shape[1], weight, bias, eps)
                           if use_input_stats else price("batch_norm", x, running_mean, running_var, weight, bias, eps))
declares("batch_norm")(lambda x, running_mean, running_var, weight=None, bias=None, eps=1e-5: norm_cost(
    {"x": x}, {"running_mean": running_mean, "running_var": running_var, "weight": weight, "bias": bias}, 2,
    batch_norm=True))
declares("add_rms_norm")(lambda call: norm_cost(
    {"x": call.x, "residual": call.residual}, {"weight": call.weight}, call.x.ndim - 1, outputs=2))

__all__ = ["launch_rows_norm", "launch_batch_norm", "norm_cost", "plan"]
