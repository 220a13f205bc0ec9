"""concat: up to four parts a launch (kernel.concat_kernel), each part a run of rows.

A part fits when, reduced as the remap reduces a copy (remap.call_dims), it is rows x w words of
unit stride along its rows on both sides, with the same rows, row stride of the output and word as
the others: every dense part of a dense output does (a KV-cache append, torch.cat of weights). A
group of up to four such parts is one launch; a concat of parts that do not fit copies each part
with the remap (one launch a part). The tile is the datamove tunable's for the whole output.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import triton

from nbx.core.tensor import Tensor

from .. import plans
from ..gather import as_bits
from ..plans import Launch, LaunchPlan, Slot
from . import remap, tuning
from .kernel import COPY, concat_kernel

PARTS = 4
_INT32 = 2 ** 31


@dataclass(frozen=True)
class Rows:
    """A part as the kernel reads it: rows x width words, source rows src_row apart, written from
    column col of the output's rows out_row apart."""
    rows: int
    width: int
    src_row: int
    out_row: int
    col: int


def part_rows(out_shape, out_strides, out_offset: int, src_shape, src_strides) -> Rows | None:
    """A part's rows (words, both layouts' raw shapes and strides), or None: not a run of rows."""
    dims = remap.call_dims(COPY, out_shape, out_strides, src_shape, src_strides, (0,) * len(out_shape))
    if dims is None or dims[0].out != 1 or dims[1].out != 1:
        return None
    row, inner = dims[2], dims[3]
    if inner.src_stride != 1 or inner.out_stride != 1:
        return None
    return Rows(row.out, inner.out, row.src_stride if row.out > 1 else 0, row.out_stride if row.out > 1 else 0,
                out_offset)


def parts_of(out_shape, out_strides, layouts, axis: int) -> list[Rows | None]:
    """The non-empty parts of a concat along axis of parts of these layouts ((shape, strides) each)
    into an output of out's (all in elements, or all in words): each its Rows, or None. The one
    decomposition of the kernel's plan, its declared cost and the keys' writer."""
    parts, start = [], 0
    for shape, strides in layouts:
        if prod(shape):
            part_shape = list(out_shape)
            part_shape[axis] = shape[axis]
            parts.append(part_rows(tuple(part_shape), out_strides, start * out_strides[axis], shape, strides))
        start += shape[axis]
    return parts


def grouped(parts: list[Rows]) -> bool:
    """Whether parts (the non-empty ones of a concat) launch together: the same rows, output row stride."""
    return (all(p is not None for p in parts) and len({p.rows for p in parts}) == 1
            and len({p.out_row for p in parts if p.rows > 1}) <= 1)


def launches(parts: list[Rows | None]) -> int:
    """The launches a concat of these parts (non-empty ones) takes: its cost's count too."""
    return -(-len(parts) // PARTS) if grouped(parts) else len(parts)


def group_launch(parts: tuple[Rows, ...], first: int, word, total: int, device, setting) -> tuple[Launch, tuple]:
    """The launch of parts first.. (slots src<first>..) and its (BLOCK_R, BLOCK_C)."""
    rows, widest = parts[0].rows, max(p.width for p in parts)
    if setting is None:
        setting = tuning.setting(device, n=total, inner=widest, dtype=word, mapped=False, transposed=False)
    block_r, block_c = remap.tile(rows, widest, setting)
    ends, end = [], 0
    for p in parts:
        end += triton.cdiv(rows, block_r) * triton.cdiv(p.width, block_c)
        ends.append(end)
    out_row = max(p.out_row for p in parts)
    wide = max(rows * max(out_row, p.src_row) + p.col + p.width for p in parts) + block_r * block_c >= _INT32
    pad = PARTS - len(parts)   # unused slots repeat the last part, past the last program
    last = first + len(parts) - 1
    slots = [Slot(f"src{first + k}") for k in range(len(parts))] + [Slot(f"src{last}")] * pad
    every = list(parts) + [parts[-1]] * pad
    args = (Slot("out"), rows, out_row, *slots, *(p.width for p in every), *(p.src_row for p in every),
            *(p.col for p in every), *(ends + [end] * pad)[:PARTS - 1])
    meta = dict(INDEX64=wide, BLOCK_R=block_r, BLOCK_C=block_c, num_warps=setting["num_warps"])
    return Launch(concat_kernel, (end,), args, meta), (block_r, block_c)


def plan_for(out: Tensor, arrays: list[Tensor], axis: int, setting=None) -> LaunchPlan:
    """The plan writing concat(arrays, axis) into out (of their dtype), a launch a group of PARTS
    parts, slots "out" and src<k> (the k-th non-empty part, in words); its detail each launch's
    (BLOCK_R, BLOCK_C) (none: no part is non-empty), or None: the parts are not runs of rows alike
    (the caller copies each)."""
    signature = (out.shape, out.strides, out.dtype, out.device, axis, plans.setting_key(setting),
                 tuple((a.shape, a.strides) for a in arrays))

    def build() -> LaunchPlan:
        out_bits, _ = as_bits(out)
        words = [as_bits(a)[0] for a in arrays]
        parts = parts_of(out_bits.shape, out_bits.strides, [(w.shape, w.strides) for w in words], axis)
        if parts and not grouped(parts):
            return LaunchPlan(out.device, (), detail=None)
        groups = [group_launch(tuple(parts[k:k + PARTS]), k, out_bits.dtype, out_bits.size, out.device, setting)
                  for k in range(0, len(parts), PARTS)]
        return LaunchPlan(out.device, tuple(g[0] for g in groups), detail=tuple(g[1] for g in groups))
    return plans.cached("concat", signature, build)


def concat_rows(out: Tensor, arrays: list[Tensor], axis: int, setting=None) -> bool:
    """Write concat(arrays, axis) into out in groups of PARTS parts a launch (one plan, one execute);
    False (nothing written) when its parts are not runs of rows alike (the caller copies each part then)."""
    plan = plan_for(out, arrays, axis, setting)
    if plan.detail is None:
        return False
    if plan.launches:
        sources = [as_bits(a)[0] for a in arrays if a.size]
        plans.execute(plan, {"out": as_bits(out)[0], **{f"src{k}": s for k, s in enumerate(sources)}})
    return True


__all__ = ["concat_rows", "plan_for", "parts_of", "part_rows", "grouped", "launches", "group_launch", "Rows", "PARTS"]
