"""The row machinery softmax, the norms and the reductions' row tunings share.

A tensor read as rows: the reduced dim is the row (read in place through its stride, so any dim
can be reduced without moving it), every other dim indexes rows.

The row dims of all tensors of a launch (input, output, mask) collapse together to at most
MAX_BATCH_DIMS dims, which the kernels index through their own strides; a layout that keeps more
is read through a contiguous copy, which the launch's cost declares.

The row tunable's parameters and key (`ROW_PARAMS`, `ROW_KEY`, `row_setting`): what is tuned is
the tile of a full-width row (`max_block_n`, whose power of two also decides when a row is walked
in pieces) and its warps (`num_warps`; narrower tiles take proportionally fewer, `blocks`). The
launch key: the row's width rounded up to a power of two (the tile a row takes), the element
count's class (a few rows are launch-bound, many are bandwidth-bound), the dtype, and whether the
rows are read across their stride (a reduced dim that is not the innermost). The representative
launch of a key is width-long rows, as many as the class's top count of elements holds.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from math import isqrt, prod

import numpy as np
import triton
import triton.language as tl

from nbx import autotune
from nbx.autotune.keys import pow2_at_least
from nbx.core.layout import collapse_dims, contiguous_strides

MAX_BATCH_DIMS = 3


@dataclass(frozen=True)
class Rows:
    rows: int
    n: int                                   # elements a row
    batch: tuple[int, int, int]              # row dims, padded with 1 in front; prod == rows
    strides: tuple[tuple[int, int, int, int], ...]  # per tensor: three row-dim strides, the element stride


def merged_stride(sizes, strides) -> int | None:
    """The one stride that walks dims sizes (with strides) as a single dim, or None."""
    merged_sizes, merged = collapse_dims(sizes, [strides])
    if not merged_sizes:
        return 1
    return merged[0][0] if len(merged_sizes) == 1 else None


def as_rows(shape, strides_list, dim: int) -> Rows | None:
    """shape read as rows along dim by every tensor of strides_list; None when the row dims do not
    collapse to MAX_BATCH_DIMS."""
    shape = tuple(shape)
    n = shape[dim] if shape else 1
    keep = [i for i in range(len(shape)) if i != dim]
    sizes, strides = collapse_dims([shape[i] for i in keep], [[st[i] for i in keep] for st in strides_list])
    if len(sizes) > MAX_BATCH_DIMS:
        return None
    lead = MAX_BATCH_DIMS - len(sizes)
    batch = (1,) * lead + tuple(sizes)
    columns = [st[dim] if shape and n > 1 else 1 for st in strides_list]
    per_tensor = tuple((0,) * lead + st + (col,) for st, col in zip(strides, columns))
    return Rows(prod(batch), n, batch, per_tensor)


def wide_columns(layout: Rows) -> bool:
    """Whether an element's offset within its row may not fit int32 (see columns)."""
    return (layout.n - 1) * max((abs(s[3]) for s in layout.strides), default=1) >= 2**31 - 1




def pow2_at_most(v: int) -> int:
    return 1 << (max(int(v), 1).bit_length() - 1)


@dataclass(frozen=True)
class Blocks:
    block_rows: int   # rows a program holds (a power of two)
    block_n: int      # elements of a row a program holds at once (a power of two)
    chunks: int       # block_n-wide pieces of a row: 1 is a one-pass row
    num_warps: int
    row_tiles: int    # programs of block_rows rows


def blocks(rows: int, n: int, strided: bool, settings: dict) -> Blocks:
    """The tile of a row launch from the family's device-file settings (rows_per_program,
    max_block_n, num_warps).

    A row whose elements are contiguous fills the tile's width up to max_block_n; short rows are
    packed so that a program holds at least a quarter of max_block_n elements. When the reduced dim
    is strided and neighbouring rows are contiguous instead (softmax over dim 0, say), the tile is
    square, so that its loads run along the rows' contiguous dim. num_warps is the setting for a
    max_block_n tile; smaller tiles take proportionally fewer.
    """
    max_n = pow2_at_most(settings["max_block_n"])
    per_program = pow2_at_least(settings["rows_per_program"])
    if strided:
        block_rows = min(pow2_at_least(rows), pow2_at_most(isqrt(max_n)))
        block_n = min(pow2_at_least(n), max(max_n // block_rows, 1))
    else:
        block_n = min(pow2_at_least(n), max_n)
        block_rows = max(per_program, min(pow2_at_least(rows), max_n // 4 // block_n))
    # warps shrink with the tile: a thread holds as many elements as in a max_block_n tile
    num_warps = max(1, settings["num_warps"] * block_rows * block_n // max_n)
    return Blocks(block_rows, block_n, -(-max(n, 1) // block_n), min(num_warps, settings["num_warps"]),
                  -(-rows // block_rows))


ONE_PASS, LOOPED, SPLIT = "one pass", "looped", "split"


def row_path(tile: Blocks, device) -> str:
    """How a launch walks its rows: in one pass when a row fits the tile; else by one program per
    row tile walking its row twice when the row tiles fill the device; else split over programs.

    "Fill" reads the reduction family's `programs` (the device file's count of programs, of its
    num_warps each, that fill the device): row tiles holding as many warps fill it too.
    """
    if tile.chunks == 1:
        return ONE_PASS
    from . import launch
    reduction = launch.tiles("reduction", device)
    filling = reduction["programs"] * reduction["num_warps"]
    return LOOPED if tile.row_tiles * tile.num_warps >= filling else SPLIT


def is_strided(layout: Rows) -> bool:
    """The input's elements of a row are not adjacent but its neighbouring rows are."""
    x_strides = layout.strides[0]
    return layout.n > 1 and abs(x_strides[3]) != 1 and x_strides[2] == 1 and layout.batch[2] > 1


@triton.jit
def row_offsets(row, b1, b2, s0, s1, s2):
    """The offset of each row (int64) through its three row-dim strides."""
    i2 = row % b2
    rest = row // b2
    return (rest // b1) * s0 + (rest % b1) * s1 + i2 * s2


@triton.jit
def columns(piece, BLOCK_N: tl.constexpr, WIDE: tl.constexpr):
    """The element indices of a row's piece-th BLOCK_N tile: int32 unless an element's offset may
    pass 2**31 (WIDE), since 64-bit offsets per element cost registers a memory-bound kernel needs."""
    if WIDE:
        col = piece.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    else:
        col = piece * BLOCK_N + tl.arange(0, BLOCK_N)
    return col


@triton.jit
def float_argument(bits):
    """A float64 passed as its int64 bits: Triton passes Python floats as fp32, which would round a
    float64 kernel's scale or eps."""
    return bits.to(tl.int64).to(tl.float64, bitcast=True)


def float_bits(value: float) -> int:
    """A Python float as the int64 of its float64 bits (see float_argument)."""
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


# 16 warps at 8192 is the device file's tile; fewer than 8 warps over a full tile spill registers
ROW_PARAMS = {"num_warps": (8, 16, 32), "max_block_n": (8192, 16384)}
# the width keyed as its power of two (the tile follows it), observed as the row's own (the launch a screen runs)
ROW_KEY = {"width": "pow2", "elements": "elements", "dtype": "dtype", "strided": "flag"}
# What a row kernel's setting depends on, for serving a key its nearest certified neighbour's
# setting (nbx.autotune.space.distance): the tile (max_block_n, num_warps) follows the row's width;
# the element count only moves a launch between launch-bound and bandwidth-bound. A width octave
# weighs 4 element-count octaves, about one rung of the elements ladder (its classes lie 1-4 octaves
# apart): on the H200 (first_run.py --compare, 2026-12-01) a 16384-wide float32 softmax of 1 Mi
# elements served the tile of 4096-wide rows (2 width octaves, 0 element octaves away) lost 44 %,
# where the 16384-wide classes 3-4 element octaves away hold the 16384 tile it needs.
ROW_WEIGHTS = {"width": 4, "elements": 1}


def row_setting(tunable, device, rows: int, n: int, dtype, strided: bool):
    """The served setting for rows x n of dtype (strided: rows read across the reduced dim's stride); the
    key holds the width's power of two and observes n, so that a neighbour's screen runs these very rows
    (screen_at_launch)."""
    return autotune.setting(tunable, device, width=n, elements=rows * n, dtype=dtype, strided=strided)


def representative_rows(rep, device, positive: bool = False):
    """(x, rows, n): the key's rows x n input of its dtype, laid out as the key says. positive:
    values in [0.5, 2.5], so that a sum's result is not a cancellation (its relative error is then
    the order of summation's, which the screen's tolerance is derived for)."""
    from nbx.core.ops.creation import asarray
    n = rep["width"]
    rows = max(1, rep["elements"] // n)
    dtype = rep["dtype"]
    wave = np.sin(0.37 * np.arange(rows * n)).reshape(rows, n)
    values = 1.5 + wave if positive else 4.0 * wave
    if rep["strided"]:  # rows adjacent, a row's elements a stride apart: the transpose of (n, rows)
        x = asarray(np.ascontiguousarray(values.T).astype(dtype.host), device=device).permute(1, 0)
    else:
        x = asarray(values.astype(dtype.host), device=device)
    return x, rows, n


__all__ = ["ONE_PASS", "LOOPED", "SPLIT", "row_path", "Rows", "Blocks", "as_rows", "merged_stride", "blocks",
           "is_strided", "contiguous_strides", "row_offsets", "columns", "wide_columns", "float_argument",
           "pow2_at_least", "pow2_at_most", "float_bits", "ROW_PARAMS", "ROW_KEY", "ROW_WEIGHTS", "row_setting",
           "representative_rows"]
