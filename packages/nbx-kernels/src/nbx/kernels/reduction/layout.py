"""Where a reduction or scan reads its input: rows (the kept dims) by columns (the reduced dims).

The reduced dims are moved last (a permuted view). The kernels index the view in place when the
kept dims collapse to at most two strided dims and the reduced dims to one; otherwise they read a
contiguous copy of the permuted view, which the launch's cost declares as workspace. A reduction
whose result does not depend on the order of its dims (a sum, not an argmax) may walk the reduced
dims in stride order, so a transposed tensor still collapses.

The tile and the split of long rows are pure functions of the shapes and the device file's
settings: the same input gives the same launches, hence the same accumulation order and bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from nbx.core.layout import collapse_dims


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1); plain Python: triton's helper is a slow call."""
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class Rows:
    """rows x cols strided view: row r starts at (r // inner) * stride0 + (r % inner) * stride1."""
    rows: int
    cols: int
    inner: int
    stride0: int
    stride1: int
    col_stride: int
    copy: tuple[int, ...] | None = None  # the permutation to copy contiguously, when the view does not collapse

    @property
    def row_args(self) -> tuple[int, int, int]:
        return self.inner, self.stride0, self.stride1

    @property
    def rows_contiguous(self) -> bool:
        """Neighbouring rows are neighbouring elements (a column reduction of a row-major tensor)."""
        return (self.stride1 if self.inner > 1 else self.stride0) == 1

    @property
    def across(self) -> bool:
        """The reduced dim is strided while the rows are adjacent: a tile then runs along the rows."""
        return self.rows_contiguous and self.col_stride != 1 and self.rows > 1


def collapse(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(size, stride) dims, collapsed (nbx.core.layout.collapse_dims)."""
    sizes, (strides,) = collapse_dims([size for size, _ in pairs], [[stride for _, stride in pairs]])
    return list(zip(sizes, strides))


def kept_rows(pairs: list[tuple[int, int]]) -> tuple[int, int, int] | None:
    """(inner, stride0, stride1) of up to two collapsed kept dims, or None when more remain."""
    kept = collapse(pairs)
    if len(kept) > 2:
        return None
    if len(kept) == 2:
        return kept[1][0], kept[0][1], kept[1][1]
    return 1, (kept[0][1] if kept else 0), 0


def plan(shape: tuple[int, ...], strides: tuple[int, ...], dims, ordered: bool) -> Rows:
    """The rows x cols view of a reduction over dims (None: every dim, in order)."""
    dims = tuple(range(len(shape))) if dims is None else tuple(dims)
    kept = [d for d in range(len(shape)) if d not in dims]
    reduced = [(shape[d], strides[d]) for d in dims]
    if not ordered:  # stride order: a transposed or sliced tensor still collapses
        reduced.sort(key=lambda p: -abs(p[1]))
    rows, cols = prod(shape[d] for d in kept), prod(shape[d] for d in dims)
    red = collapse(reduced)
    row = kept_rows([(shape[d], strides[d]) for d in kept])
    if len(red) <= 1 and row is not None:
        return Rows(rows, cols, *row, col_stride=red[0][1] if red else 0)
    return Rows(rows, cols, 1, cols, 0, 1, copy=tuple(kept) + dims)


def scan_plan(shape, x_strides, out_strides, dim: int) -> tuple[Rows, Rows]:
    """The rows x cols views of a scan along dim (of a tensor of one dim or more), for its input and
    its output (one row index for both), or (None, None) when the kept dims do not collapse to two."""
    kept = [d for d in range(len(shape)) if d != dim]
    cols = shape[dim]
    rows = prod(shape[d] for d in kept)
    pairs = [(shape[d], (x_strides[d], out_strides[d])) for d in kept if shape[d] != 1]
    merged: list[tuple[int, tuple[int, int]]] = []
    for size, st in pairs:  # collapse the input and the output together: one row index for both
        if merged and all(p == s * size for p, s in zip(merged[-1][1], st, strict=True)):
            merged[-1] = (merged[-1][0] * size, st)
        else:
            merged.append((size, st))
    x_col, out_col = x_strides[dim], out_strides[dim]
    if len(merged) > 2:
        return None, None
    if len(merged) == 2:
        inner = merged[1][0]
        return (Rows(rows, cols, inner, merged[0][1][0], merged[1][1][0], x_col),
                Rows(rows, cols, inner, merged[0][1][1], merged[1][1][1], out_col))
    s = merged[0][1] if merged else (0, 0)
    return Rows(rows, cols, 1, s[0], 0, x_col), Rows(rows, cols, 1, s[1], 0, out_col)


@dataclass(frozen=True)
class Tile:
    block_r: int
    block_c: int
    splits: int      # column ranges per row; more than 1: partials, then a second launch
    split_len: int   # columns per range, a multiple of block_c

    def grid(self, rows: int) -> tuple[int, int]:
        return cdiv(rows, self.block_r), self.splits


def tile(view: Rows, settings: dict, split: bool = True) -> Tile:
    """The tile over (rows, cols), and the split of long rows when the rows alone are too few programs.

    settings: tiles.reduction of the device file: block (elements a program holds per step) and
    programs (how many programs a launch aims for before it splits rows into column ranges).
    """
    block, cols = settings["block"], max(view.cols, 1)
    if view.across:
        block_r = min(next_power_of_2(view.rows), 128, block)  # coalesced along the rows
        block_c = min(max(1, block // block_r), next_power_of_2(cols))
    else:
        block_c = min(next_power_of_2(cols), block)
        block_r = min(next_power_of_2(max(view.rows, 1)), max(1, block // block_c))
    row_programs = cdiv(view.rows, block_r)
    splits = 1
    if split and row_programs < settings["programs"] and cols > block_c:
        splits = min(cdiv(settings["programs"], row_programs), cdiv(cols, block_c))
    split_len = cdiv(cdiv(cols, splits), block_c) * block_c
    return Tile(block_r, block_c, cdiv(cols, split_len), split_len)
