"""The scan kernels: each program scans BLOCK_R rows from left to right in steps of BLOCK_C.

A step scans its [BLOCK_R, BLOCK_C] tile with tl.associative_scan (a fixed tree), combines it
with the carry of the steps before, stores it, and carries its last column on: no atomics, one
order of operations for a given launch, the same bits on every run.

The input and the output each have their own row strides (rows are indexed as in kernels.py).
"""
import triton
import triton.language as tl

from .combine import ADD, MAX, combine, narrow, running_max, running_min, widen


@triton.jit
def _row_starts(rows, inner, stride0, stride1):
    return (rows // inner) * stride0 + (rows % inner) * stride1


@triton.jit
def _last_column(tile, BLOCK_C: tl.constexpr):
    """tile[:, BLOCK_C - 1] exactly (a sum of it and zeros)."""
    last = (tl.arange(0, BLOCK_C) == BLOCK_C - 1)[None, :]
    return tl.sum(tl.where(last, tile, 0), 1).to(tile.dtype)


@triton.jit
def scan_kernel(x_ptr, out_ptr, n_rows, n_cols, inner, x0, x1, x_col, o0, o1, o_col,
                OP: tl.constexpr, IDENTITY: tl.constexpr, ACC: tl.constexpr,
                BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """cumsum (OP ADD) and cumprod (OP MUL), accumulated in ACC."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    x_base = _row_starts(rows, inner, x0, x1)
    o_base = _row_starts(rows, inner, o0, o1)
    carry = tl.full([BLOCK_R], IDENTITY, ACC)
    for c0 in range(0, n_cols, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C).to(tl.int64)
        ok = row_ok[:, None] & (cols < n_cols)[None, :]
        x = widen(tl.load(x_ptr + x_base[:, None] + cols[None, :] * x_col, mask=ok), ACC)  # a masked tail is
        # scanned after every stored column, so it never reaches one
        if OP == ADD:
            y = tl.cumsum(x, 1)
        else:
            y = tl.cumprod(x, 1)
        y = combine(carry[:, None], y, OP)
        tl.store(out_ptr + o_base[:, None] + cols[None, :] * o_col, narrow(y, out_ptr.dtype.element_ty), mask=ok)
        carry = _last_column(y, BLOCK_C)


@triton.jit
def running_extreme_kernel(x_ptr, values_ptr, index_ptr, n_rows, n_cols, inner, x0, x1, x_col, o0, o1, o_col,
                           OP: tl.constexpr, IDENTITY: tl.constexpr, ACC: tl.constexpr,
                           BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """cummax (OP MAX) and cummin with the index of each running extreme (values and indices
    share the output's strides)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    x_base = _row_starts(rows, inner, x0, x1)
    o_base = _row_starts(rows, inner, o0, o1)
    carry = tl.full([BLOCK_R], IDENTITY, ACC)
    carry_index = tl.full([BLOCK_R], -1, tl.int64)
    for c0 in range(0, n_cols, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C).to(tl.int64)
        ok = row_ok[:, None] & (cols < n_cols)[None, :]
        v = widen(tl.load(x_ptr + x_base[:, None] + cols[None, :] * x_col, mask=ok), ACC)
        i = tl.broadcast_to(cols[None, :], [BLOCK_R, BLOCK_C])
        if OP == MAX:
            v, i = tl.associative_scan((v, i), 1, running_max)
            v, i = running_max(carry[:, None], carry_index[:, None], v, i)
        else:
            v, i = tl.associative_scan((v, i), 1, running_min)
            v, i = running_min(carry[:, None], carry_index[:, None], v, i)
        at = o_base[:, None] + cols[None, :] * o_col
        tl.store(values_ptr + at, narrow(v, values_ptr.dtype.element_ty), mask=ok)
        tl.store(index_ptr + at, i, mask=ok)
        carry = _last_column(v, BLOCK_C)
        carry_index = _last_column(i, BLOCK_C)
