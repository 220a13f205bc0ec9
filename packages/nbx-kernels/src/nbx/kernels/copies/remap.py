"""The remap copy's launch (kernel.py): a call reduced to at most four dims, its tile, its plan.

A call names, per dim of the output, the source size, the map's parameter `a` and both strides.
Dims of size 1 that the map leaves alone vanish; adjacent unmapped dims that both layouts walk as
one merge. What is left is padded to four dims in front; a call keeping more (a pad of five dims
at once) launches per index of its first dim, the map of that dim worked out on the host. So a
pad of any mode, a flip or a roll is one launch, whatever the tensor's size.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
import triton

from nbx.core.dtypes import DType
from nbx.core.layout import reach
from nbx.core.tensor import Tensor

from .. import plans
from ..gather import as_bits
from ..plans import Launch, LaunchPlan, Slot
from ..rows import pow2_at_least
from . import tuning
from .kernel import CIRCULAR, CONSTANT, COPY, FLIP, REFLECT, REPLICATE, ROLL, remap_kernel

RANK = 4
_INT32 = 2 ** 31
MODES = {"constant": CONSTANT, "reflect": REFLECT, "replicate": REPLICATE, "circular": CIRCULAR}


@dataclass(frozen=True)
class Dim:
    """One dim of a call: output size, source size, the map's parameter, source and output strides."""
    out: int
    n: int
    a: int
    src_stride: int
    out_stride: int


@dataclass(frozen=True)
class Remapped:
    """A plan's decisions: the four dims it launches over and its tile."""
    dims: tuple[Dim, ...]
    block_r: int
    block_c: int


def unmapped(mode: int, d: Dim) -> bool:
    """Whether mode's map is the identity along d (j = i)."""
    if mode == COPY:
        return True
    if mode in (FLIP, ROLL):
        return d.a == 0
    return d.a == 0 and d.out == d.n


def reduced(mode: int, dims) -> list[Dim]:
    """dims without unmapped size-1 dims, adjacent unmapped dims merged where both layouts allow."""
    kept: list[Dim] = []
    for d in dims:
        if d.out == 1 and unmapped(mode, d):
            continue
        last = kept[-1] if kept else None
        if (last is not None and unmapped(mode, last) and unmapped(mode, d)
                and last.src_stride == d.src_stride * d.n and last.out_stride == d.out_stride * d.out):
            kept[-1] = Dim(last.out * d.out, last.n * d.n, 0, d.src_stride, d.out_stride)
        else:
            kept.append(d)
    return kept or [Dim(1, 1, 0, 0, 0)]


def tile(rows: int, inner: int, setting) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_C): block_c elements of the last dim (fewer for a shorter one) by as many rows
    as fill `block`; a call of few rows widens its columns back to `block`."""
    block = setting["block"]
    cols = min(setting["block_c"], pow2_at_least(inner))
    rows_ = min(max(1, block // cols), pow2_at_least(rows))
    cols = min(max(cols, block // rows_), pow2_at_least(inner))
    return rows_, cols


def transposed(dims) -> bool:
    """Whether the source runs along the output's rows (one row dim of unit source stride) and not
    along its last dim: a transpose, whose tile wants as many rows as columns."""
    return dims[0].out == dims[1].out == 1 and dims[2].src_stride == 1 and dims[3].src_stride != 1


def key_inputs(mode: int, dims, word: DType) -> dict:
    """The launch key's fields of a reduced call of RANK dims (the keys file writer's too)."""
    inner = dims[-1]
    return dict(n=prod(d.out for d in dims), inner=inner.out, dtype=word, mapped=not unmapped(mode, inner),
                transposed=transposed(dims))


def flip_vector(mode: int, inner: Dim, word: DType, block_c: int) -> int:
    """Words a 16-byte group of a flip of a unit-stride last dim (kernel.flip_tile: its loads are
    16-byte vectors too), or 1: the per-element map (another map, a strided dim, a narrow tile)."""
    vec = 16 // word.itemsize
    if mode != FLIP or unmapped(mode, inner) or inner.src_stride != 1 or inner.out_stride != 1 or block_c < vec:
        return 1
    return vec


def flat_output(dims, word: DType, block: int) -> bool:
    """Whether the kernel walks the output's flat positions (FLAT_OUT): a dense output whose rows are
    no multiple of 16 bytes (a pad's n + 2), so a row tile's stores would be single words, and at
    least a block wide (a block then spans at most two rows)."""
    size = 1
    for d in reversed(dims):
        if d.out > 1 and d.out_stride != size:
            return False
        size *= d.out
    inner = dims[-1].out
    return inner >= block and (inner * word.itemsize) % 16 != 0


def shift_vector(mode: int, dims, word: DType, block_r: int, block_c: int, flat: bool) -> int:
    """Elements a 16-byte group of the shifted path (SHIFT_VEC: kernel.shifted_words), or 1. It
    takes a last dim of unit stride on both sides whose map reads ascending runs of the source (a
    pad, a roll, a copy) where 16-byte groups of the output (its flat positions, or rows starting on
    16 bytes) would read the source off its 16-byte boundaries: a shift the plain tile loads word by
    word. The kernel takes it where both pointers start on 16 bytes (kernel.on_16_bytes), else the
    element path."""
    vec, inner = 16 // word.itemsize, dims[-1]
    if (vec < 2 or mode == FLIP or transposed(dims) or inner.src_stride != 1
            or inner.out_stride != 1 or any(d.out_stride < 0 for d in dims)):
        return 1
    if flat:
        return vec if block_r * block_c >= vec else 1
    rows_aligned = all(d.out_stride % vec == 0 for d in dims[:-1] if d.out > 1)
    if not rows_aligned or block_c < vec or inner.out < vec:
        return 1
    if unmapped(mode, inner) and all(d.src_stride % vec == 0 for d in dims[:-1] if d.out > 1):
        return 1   # a copy whose source rows start on 16 bytes too: the plain tile's loads are vectors already
    return vec


def row_dims(dims) -> int:
    """How many of the three row dims the kernel decomposes a row index into (ROW_DIMS)."""
    return 1 if dims[0].out == dims[1].out == 1 else (2 if dims[0].out == 1 else 3)


def plan_dims(mode: int, dims: tuple[Dim, ...], word: DType, words: int, device, setting) -> LaunchPlan:
    """The launch of a call reduced to RANK dims (pure in its layouts and tile: the sm_90 lowering
    tests compile the benchmark's launches from it)."""
    if setting is None:  # certified for the launch key (the device file's tile on interp)
        setting = tuning.setting(device, **key_inputs(mode, dims, word))
    rows, inner = prod(d.out for d in dims[:-1]), dims[-1].out
    block_r, block_c = tile(rows, inner, setting)
    col_blocks = triton.cdiv(inner, block_c)
    flip_vec = flip_vector(mode, dims[-1], word, block_c)
    flat = flip_vec == 1 and not transposed(dims) and flat_output(dims, word, block_r * block_c)  # (a transpose's tile stays)
    shift_vec = shift_vector(mode, dims, word, block_r, block_c, flat)
    scale = max(1, word.itemsize // 4) if shift_vec > 1 else 1   # the shifted path indexes 4-byte words
    wide = (max(reach([d.out for d in dims], [d.out_stride for d in dims]),
                reach([d.n for d in dims], [d.src_stride for d in dims]),
                rows * inner) + block_r * block_c) * scale >= _INT32
    args = (Slot("out"), Slot("src"), Slot("fill") if mode == CONSTANT else None, rows, col_blocks,
            *(d.out for d in dims[1:]), *(d.n for d in dims), *(d.a for d in dims),
            *(d.src_stride for d in dims), *(d.out_stride for d in dims))
    meta = dict(MODE=mode, MAP_INNER=not unmapped(mode, dims[-1]), FLAT_ROWS=dims[0].out == dims[1].out == 1,
                FILL_WORDS=words, INDEX64=wide, BLOCK_R=block_r, BLOCK_C=block_c, num_warps=setting["num_warps"],
                FLIP_VEC=flip_vec, FLAT_OUT=flat, SHIFT_VEC=shift_vec, ROW_DIMS=row_dims(dims))
    grid = (triton.cdiv(rows * inner, block_r * block_c) if flat else triton.cdiv(rows, block_r) * col_blocks,)
    return LaunchPlan(device, (Launch(remap_kernel, grid, args, meta),), detail=Remapped(dims, block_r, block_c))


def call_dims(mode: int, out_shape, out_strides, src_shape, src_strides, params) -> tuple[Dim, ...] | None:
    """The RANK dims a call over words launches on (padded in front), or None when more remain.
    Pure in the layouts: the keys file writer lists a benchmark's keys with it, without a GPU."""
    dims = reduced(mode, [Dim(*f) for f in zip(out_shape, src_shape, params, src_strides, out_strides)])
    if len(dims) > RANK:
        return None
    return tuple([Dim(1, 1, 0, 0, 0)] * (RANK - len(dims)) + dims)


def plan_for(out: Tensor, src: Tensor, mode: int, params, setting=None) -> LaunchPlan | None:
    """The call's launch plan, or None when it keeps more than RANK dims (remap_copy then splits it)."""
    out_bits, words = as_bits(out)
    return _plan_of_words(out_bits, as_bits(src)[0], words, mode, params, out.device, setting)


def _plan_of_words(out_bits: Tensor, src_bits: Tensor, words: int, mode: int, params, device, setting):
    """Cached by the raw layouts (the reduction runs once a layout); a plan of no launch: split the call."""
    params = tuple(params) + (0,) * (words - 1)
    signature = (mode, out_bits.shape, out_bits.strides, src_bits.shape, src_bits.strides, params, out_bits.dtype,
                 words, device, plans.setting_key(setting))

    def build() -> LaunchPlan:
        dims = call_dims(mode, out_bits.shape, out_bits.strides, src_bits.shape, src_bits.strides, params)
        return LaunchPlan(device, ()) if dims is None else plan_dims(mode, dims, out_bits.dtype, words, device, setting)
    plan = plans.cached("remap", signature, build)
    return plan if plan.launches else None


def rows_copy(dst: Tensor, src: Tensor) -> bool:
    """Whether a same-dtype copy_ is the remap's: reduced to at most RANK dims, written along a last
    dim of unit stride, read along it too (a head transpose, a slice of rows, a part of a concat) or
    down the rows (a transpose). Others stay with the elementwise copy."""
    plan = plan_for(dst, src, COPY, (0,) * dst.ndim) if dst.size else None
    if plan is None:
        return False
    dims = plan.detail.dims
    return dims[-1].out_stride == 1 and (dims[-1].src_stride == 1 or transposed(dims))


def _fill(value, dtype: DType, device, count: int = 1) -> Tensor:
    """A kept device tensor of count elements of value (no upload a call: CONSTANT reads it through a pointer)."""
    return plans.constant(np.asarray([value] * count).astype(dtype.host), dtype, device)


def fill_pattern(value, dtype: DType, device) -> Tensor:
    """The fill slot's tensor: 16 bytes of value (the shifted path loads them as 4-byte words; the
    element path reads the first element)."""
    return _fill(value, dtype, device, max(1, 16 // dtype.itemsize))


def remap_copy(out: Tensor, src: Tensor, mode: int, params, value=0, setting=None) -> Tensor:
    """Write out (any layout) from src (any layout, any device of out's type) through mode's map,
    params[d] its parameter along dim d; value is CONSTANT's fill."""
    if out.size == 0:
        return out
    out_bits, words = as_bits(out)
    src_bits = as_bits(src)[0]
    plan = _plan_of_words(out_bits, src_bits, words, mode, params, out.device, setting)
    if plan is None:  # more than RANK dims even reduced: one call per index of the first dim
        for i in range(out.shape[0]):
            j, inside = host_index(i, params[0], src.shape[0], mode)
            if inside:
                remap_copy(out[i], src[j], mode, params[1:], value, setting)
            else:
                remap_copy(out[i], _fill(value, out.dtype, out.device).reshape(()).broadcast_to(out.shape[1:]), COPY,
                      (0,) * (out.ndim - 1), setting=setting)
        return out
    values = {"out": out_bits, "src": src_bits}
    if mode == CONSTANT:
        values["fill"] = as_bits(fill_pattern(value, out.dtype, out.device))[0]
    plans.execute(plan, values)
    return out


def host_index(i: int, a: int, n: int, mode: int) -> tuple[int, bool]:
    """kernel.source_index on the host, for one index."""
    if mode == COPY:
        return i, True
    if mode == FLIP:
        return (n - 1 - i if a else i), True
    if mode == ROLL:
        return (i - a) % n, True
    j = i - a
    if mode == CONSTANT:
        return (j, True) if 0 <= j < n else (0, False)
    if mode == REFLECT:
        j = -j if j < 0 else j
        return (2 * n - 2 - j if j >= n else j), True
    if mode == REPLICATE:
        return min(max(j, 0), n - 1), True
    return j % n, True


__all__ = ["remap_copy", "rows_copy", "plan_for", "plan_dims", "call_dims", "transposed", "reduced", "tile", "key_inputs", "flip_vector", "flat_output", "shift_vector", "row_dims", "host_index", "Dim", "MODES", "RANK"]
