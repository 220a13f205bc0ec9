"""sort / argsort and top-k on Triton kernels (tiles.sort of the device file).

A row of up to max_block_n keys is sorted by one program (sort/kernel.py). top-k of a longer
row reduces it: the row is cut into chunks of max_block_n, each chunk's best k survive as
candidates (in chunk order, so ties still go to the lower index), and the candidates are reduced
the same way until one program holds them all. A full sort of a longer row (up to 2**32 keys)
is a bitonic merge over global memory (sort/kernel.py): log2(N2 / max_block_n) stages of one
pass per merge distance above the block, each ending in a block re-sort. 64-bit keys are refused
by name (the packed word has no room for them and their position).
"""
from __future__ import annotations

from math import prod

import triton

from nbx.core import dtypes
from nbx.core.errors import DTypeError, NotSupportedError
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from .kernel import (flip_step_kernel, half_step_kernel, pack_blocks_kernel, sort_blocks_kernel, sort_rows_kernel,
                     unpack_kernel)


def _rows(x: Tensor, axis: int) -> Tensor:
    if x.dtype.itemsize > 4 or x.dtype.is_complex:
        raise DTypeError(f"the sort kernels take keys of at most 32 bits, not {x.dtype.name}")
    order = [d for d in range(x.ndim) if d != axis] + [axis]
    return x.permute(order).contiguous()


def _back(t: Tensor, axis: int) -> Tensor:
    order = list(range(t.ndim - 1))
    order.insert(axis, t.ndim - 1)
    return t.permute(order).contiguous()


def _sort_rows(rows: Tensor, idx_in: Tensor | None, n_out: int, descending: bool) -> tuple[Tensor, Tensor]:
    """rows [..., n] (n <= max_block_n) sorted, their first n_out values and original indices."""
    n = rows.shape[-1]
    signature = (rows.shape, rows.dtype, idx_in is not None, n_out, descending, rows.device)
    plan = plans.cached("sort", signature, lambda: _sort_plan(*signature))
    done = plans.execute(plan, {"rows": rows, "idx_in": idx_in})
    return done["values"], done["indices"]


def _sort_plan(shape, dtype, merging: bool, n_out: int, descending: bool, device) -> LaunchPlan:
    n = shape[-1]
    count = prod(shape) // n if n else 0
    tiles = launch.tiles("sort", device)
    launches = () if not (count and n_out) else (Launch(
        sort_rows_kernel, (count,), (Slot("rows"), Slot("idx_in"), Slot("values"), Slot("indices"), n, n_out),
        dict(DESCENDING=descending, BLOCK=triton.next_power_of_2(n), num_warps=tiles["num_warps"])),)
    out_shape = tuple(shape[:-1]) + (n_out,)
    return LaunchPlan(device, launches, outputs=(plans.output("values", out_shape, dtype),
                                                 plans.output("indices", out_shape, dtypes.INDEX)))


@implements("sort")
def sort(x: Tensor, axis: int, descending: bool) -> tuple[Tensor, Tensor]:
    limit = launch.tiles("sort", x.device)["max_block_n"]
    rows = _rows(x, axis)
    if x.shape[axis] > limit:
        if x.shape[axis] >= 2 ** 32:
            raise NotSupportedError(f"sorting rows of 2**32 keys or more (this one has {x.shape[axis]})")
        signature = (rows.shape, rows.dtype, descending, rows.device)
        plan = plans.cached("sort.merge", signature, lambda: _merge_plan(*signature))
        done = plans.execute(plan, {"x": rows})
        values, indices = done["values"], done["indices"]
    else:
        values, indices = _sort_rows(rows, None, x.shape[axis], descending)
    return _back(values, axis), _back(indices, axis)


def _merge_plan(shape, dtype, descending: bool, device) -> LaunchPlan:
    tiles = launch.tiles("sort", device)
    block, warps = tiles["max_block_n"], tiles["num_warps"]
    n = shape[-1]
    count = prod(shape) // n
    n2 = triton.next_power_of_2(n)
    words = count * n2
    pairs = (triton.cdiv(words // 2, block),)
    launches = [Launch(pack_blocks_kernel, (count, n2 // block), (Slot("x"), Slot("packed"), n, n2),
                       dict(DESCENDING=descending, BLOCK=block, num_warps=warps))]
    size = 2 * block
    while size <= n2:
        launches.append(Launch(flip_step_kernel, pairs, (Slot("packed"), size // 2), dict(BLOCK=block, num_warps=warps)))
        distance = size // 4
        while distance >= block:
            launches.append(Launch(half_step_kernel, pairs, (Slot("packed"), distance),
                                   dict(BLOCK=block, num_warps=warps)))
            distance //= 2
        launches.append(Launch(sort_blocks_kernel, (words // block,), (Slot("packed"),),
                               dict(BLOCK=block, num_warps=warps)))
        size *= 2
    launches.append(Launch(unpack_kernel, (count, triton.cdiv(n, block)),
                           (Slot("x"), Slot("packed"), Slot("values"), Slot("indices"), n, n2),
                           dict(BLOCK=block, num_warps=warps)))
    return LaunchPlan(device, tuple(launches), outputs=(plans.output("values", shape, dtype),
                                                        plans.output("indices", shape, dtypes.INDEX)),
                      workspace=(plans.workspace("packed", (words,), dtypes.uint64),))


@implements("topk")
def topk(x: Tensor, k: int, dim: int, largest: bool) -> tuple[Tensor, Tensor]:
    limit = launch.tiles("sort", x.device)["max_block_n"]
    if k > limit // 2 and x.shape[dim] > limit:
        raise NotSupportedError(f"top-k with k={k} > {limit // 2} of rows longer than {limit} is not implemented yet")
    from nbx.core.ops.creation import arange
    from nbx.core.ops.datamove import pad
    values, indices = _rows(x, dim), None
    while values.shape[-1] > limit:  # each chunk's best k become the candidates, in chunk order
        n, lead = values.shape[-1], values.shape[:-1]
        if indices is None:
            indices = arange(n, dtype=dtypes.INDEX, device=x.device).broadcast_to(values.shape).contiguous()
        chunks = triton.cdiv(n, limit)
        if chunks * limit > n:  # the last chunk's padding is marked empty (-1)
            values, indices = pad(values, (0, chunks * limit - n)), pad(indices, (0, chunks * limit - n), value=-1)
        values, indices = _sort_rows(values.reshape(*lead, chunks, limit), indices.reshape(*lead, chunks, limit),
                                     k, largest)
        values, indices = values.reshape(*lead, chunks * k), indices.reshape(*lead, chunks * k)
    values, indices = _sort_rows(values, indices, k, largest)
    return _back(values, dim), _back(indices, dim)


@declares("sort")
def _sort_cost(x: Tensor, axis: int = -1, descending: bool = False) -> Cost:
    return Cost(buffers=(Buffer("values", x.nbytes), Buffer("indices", x.size * 8)),
                bytes_moved=3 * x.nbytes + x.size * 8)


@declares("topk")
def _topk_cost(x: Tensor, k: int, dim: int = -1, largest: bool = True) -> Cost:
    out = x.size // max(x.shape[dim], 1) * k
    return Cost(buffers=(Buffer("values", out * x.dtype.itemsize), Buffer("indices", out * 8),
                         Buffer("candidates", x.nbytes, LAUNCH)), bytes_moved=2 * x.nbytes + out * (8 + x.dtype.itemsize))


__all__ = ["sort", "topk"]
