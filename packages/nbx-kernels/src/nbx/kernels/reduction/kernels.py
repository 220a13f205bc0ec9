"""The reduction kernels. Each program reduces BLOCK_R rows over one range of their columns.

A program walks its columns in steps of BLOCK_C, combining each step into a [BLOCK_R, BLOCK_C]
accumulator (one lane per column position), then combines the lanes with a fixed tree. When a
launch splits rows into several column ranges (grid axis 1), each program writes its range's
state to a partials buffer and a second launch merges the states in range order: no atomics,
so the result is the same bits on every run.

Row r of the input starts at (r // inner) * stride0 + (r % inner) * stride1; column c is c *
col_stride further. Partials are contiguous [rows, splits].
"""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from .combine import (
    MAX,
    PARTIAL,
    RESULT,
    STD,
    combine,
    contribution,
    finish,
    first_extreme_of_max,
    first_extreme_of_min,
    max_lanes,
    merge_moment_lanes,
    merge_moments,
    min_lanes,
    narrow,
    reduce_lanes,
    scale,
    widen,
)



@triton.jit
def _rows(BLOCK_R: tl.constexpr, n_rows, inner, stride0, stride1):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    return rows, rows < n_rows, (rows // inner) * stride0 + (rows % inner) * stride1


@triton.jit
def _range(n_cols, split_len):
    start = tl.program_id(1).to(tl.int64) * split_len
    return start, tl.minimum(start + split_len, n_cols)


@triton.jit(do_not_specialize=["n_total"])
def accumulate_kernel(x_ptr, out_ptr, n_rows, n_cols, inner, stride0, stride1, col_stride,
                      split_len, n_splits, n_total, p,
                      OP: tl.constexpr, MAP: tl.constexpr, FINAL: tl.constexpr, IDENTITY: tl.constexpr,
                      ACC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """sum, prod, max, min, any, all, count_nonzero, mean and vector norms: one accumulator."""
    rows, row_ok, base = _rows(BLOCK_R, n_rows, inner, stride0, stride1)
    start, end = _range(n_cols, split_len)
    identity = tl.full([BLOCK_R, BLOCK_C], IDENTITY, ACC)
    acc = identity
    for c0 in range(start, end, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C).to(tl.int64)
        ok = row_ok[:, None] & (cols < end)[None, :]
        x = tl.load(x_ptr + base[:, None] + cols[None, :] * col_stride, mask=ok)
        acc = combine(acc, tl.where(ok, contribution(x, p, MAP, ACC), identity), OP)
    result = finish(reduce_lanes(acc, OP), n_total, p, FINAL)
    tl.store(out_ptr + rows * n_splits + tl.program_id(1), narrow(result, out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def extreme_index_kernel(x_ptr, index_in_ptr, values_ptr, index_ptr, n_rows, n_cols, inner, stride0, stride1,
                         col_stride, split_len, n_splits,
                         OP: tl.constexpr, IDENTITY: tl.constexpr, ACC: tl.constexpr, FROM_PARTIALS: tl.constexpr,
                         WRITE_VALUES: tl.constexpr, INDEX: tl.constexpr, LAST: tl.constexpr,
                         BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, PDL: tl.constexpr = False):
    """max / min with the first index of the extreme (argmax, argmin, max_with_indices, ...).

    Lanes keep their indices as INDEX (int32 when every index of the reduced dim fits: half the
    registers and instructions of int64); LAST, the type's largest value, is no element's index
    and loses every tie."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    rows, row_ok, base = _rows(BLOCK_R, n_rows, inner, stride0, stride1)
    start, end = _range(n_cols, split_len)
    best = tl.full([BLOCK_R, BLOCK_C], IDENTITY, ACC)
    index = tl.full([BLOCK_R, BLOCK_C], LAST, INDEX)
    for c0 in range(start, end, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C).to(tl.int64)
        ok = row_ok[:, None] & (cols < end)[None, :]
        v = tl.where(ok, widen(tl.load(x_ptr + base[:, None] + cols[None, :] * col_stride, mask=ok), ACC), IDENTITY)
        if FROM_PARTIALS:
            i = tl.load(index_in_ptr + rows[:, None] * n_cols + cols[None, :], mask=ok, other=LAST).to(INDEX)
        else:
            i = tl.where(ok, cols.to(INDEX)[None, :], LAST)
        if OP == MAX:
            best, index = first_extreme_of_max(best, index, v, i)
        else:
            best, index = first_extreme_of_min(best, index, v, i)
    # the row's extreme, then the smallest index among the lanes that hold it
    lane_best = best
    if OP == MAX:
        best = max_lanes(lane_best)
    else:
        best = min_lanes(lane_best)
    holds = (lane_best == best[:, None]) | ((lane_best != lane_best) & (best != best)[:, None])
    index = tl.min(tl.where(holds, index, LAST), 1)
    out = rows * n_splits + tl.program_id(1)
    if WRITE_VALUES:
        tl.store(values_ptr + out, narrow(best, values_ptr.dtype.element_ty), mask=row_ok)
    tl.store(index_ptr + out, index, mask=row_ok)


@triton.jit(do_not_specialize=["n_total"])
def moments_kernel(x_ptr, count_ptr, mean_ptr, m2_ptr, n_rows, n_cols, inner, stride0, stride1, col_stride,
                   split_len, n_splits, n_total, correction,
                   FROM_PARTIALS: tl.constexpr, FINAL: tl.constexpr, ACC: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """var and std (Welford per lane, merged pairwise). FROM_PARTIALS reads (count, mean, m2)
    states at count_ptr, mean_ptr, m2_ptr; FINAL writes var or std to count_ptr, or PARTIAL the
    states to count_ptr, mean_ptr, m2_ptr."""
    rows, row_ok, base = _rows(BLOCK_R, n_rows, inner, stride0, stride1)
    start, end = _range(n_cols, split_len)
    count = tl.zeros([BLOCK_R, BLOCK_C], ACC)
    mean = tl.zeros([BLOCK_R, BLOCK_C], ACC)
    m2 = tl.zeros([BLOCK_R, BLOCK_C], ACC)
    for c0 in range(start, end, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C).to(tl.int64)
        ok = row_ok[:, None] & (cols < end)[None, :]
        if FROM_PARTIALS:
            at = rows[:, None] * n_cols + cols[None, :]
            count, mean, m2 = merge_moments(count, mean, m2, tl.load(x_ptr + at, mask=ok, other=0).to(ACC),
                                            tl.load(mean_ptr + at, mask=ok, other=0).to(ACC),
                                            tl.load(m2_ptr + at, mask=ok, other=0).to(ACC))
        else:
            x = widen(tl.load(x_ptr + base[:, None] + cols[None, :] * col_stride, mask=ok), ACC)
            count = count + ok.to(ACC)
            delta = tl.where(ok, x - mean, 0)
            mean = mean + delta / tl.maximum(count, 1)
            m2 = m2 + delta * tl.where(ok, x - mean, 0)
    count, mean, m2 = merge_moment_lanes(count, mean, m2)
    out = rows * n_splits + tl.program_id(1)
    if FINAL == PARTIAL:
        tl.store(count_ptr + out, count, mask=row_ok)
        tl.store(mean_ptr + out, mean, mask=row_ok)
        tl.store(m2_ptr + out, m2, mask=row_ok)
    else:
        var = m2 / tl.maximum((tl.zeros_like(m2) + n_total) - correction, 0)  # n exact in ACC
        if FINAL == STD:
            var = tl.sqrt(var)
        tl.store(count_ptr + out, narrow(var, count_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def logsumexp_kernel(x_ptr, sum_in_ptr, max_out_ptr, sum_out_ptr, n_rows, n_cols, inner, stride0, stride1,
                     col_stride, split_len, n_splits,
                     FROM_PARTIALS: tl.constexpr, FINAL: tl.constexpr, ACC: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """log(sum(exp(x))) online: a running max per row and the sum rescaled to it. FROM_PARTIALS
    reads (max, sum) states at x_ptr, sum_in_ptr; FINAL writes the result to max_out_ptr, or
    PARTIAL the states to max_out_ptr, sum_out_ptr."""
    rows, row_ok, base = _rows(BLOCK_R, n_rows, inner, stride0, stride1)
    start, end = _range(n_cols, split_len)
    running_max = tl.full([BLOCK_R], float("-inf"), ACC)
    total = tl.zeros([BLOCK_R], ACC)
    for c0 in range(start, end, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C).to(tl.int64)
        ok = row_ok[:, None] & (cols < end)[None, :]
        if FROM_PARTIALS:
            at = rows[:, None] * n_cols + cols[None, :]
            x = tl.load(x_ptr + at, mask=ok, other=float("-inf")).to(ACC)
            weight = tl.load(sum_in_ptr + at, mask=ok, other=0).to(ACC)
        else:
            x = widen(tl.load(x_ptr + base[:, None] + cols[None, :] * col_stride, mask=ok), ACC)
            x = tl.where(ok, x, float("-inf"))
        # a NaN need not win the max: exp(NaN - m) makes the sum NaN, and log(NaN) + m is NaN
        new_max = tl.maximum(running_max, tl.max(x, 1))
        terms = scale(x, new_max[:, None])
        if FROM_PARTIALS:
            terms = tl.where(weight == 0, 0, weight * terms)
        total = total * scale(running_max, new_max) + tl.sum(terms, 1)
        running_max = new_max
    out = rows * n_splits + tl.program_id(1)
    if FINAL == RESULT:
        tl.store(max_out_ptr + out, narrow(tl.log(total) + running_max, max_out_ptr.dtype.element_ty), mask=row_ok)
    else:
        tl.store(max_out_ptr + out, running_max, mask=row_ok)
        tl.store(sum_out_ptr + out, total, mask=row_ok)
