"""The softmax kernels: a row kernel (one pass for rows that fit a tile, two walks for longer rows
when there are rows enough to fill the device) and a split pair for few long rows.

A program holds a [BLOCK_ROWS, BLOCK_N] tile. A row that fits is read once: max, exp, sum and the
write happen in registers. A longer row is walked twice by its program when the rows fill the
device (the second read mostly hits the L2), else it is cut into `chunks` pieces of BLOCK_N, one
program each:
`chunk_stats_kernel` stores each piece's max and its sum of exp(x - max) (fp32 for the half types),
then `chunk_write_kernel` combines the pieces' partials in their fixed order (the online softmax
rule: sums rescaled to the row's max) and writes its piece. Splitting a row over programs keeps
the whole GPU busy when there are few rows (32 rows of a 152k vocabulary), and the order of every
sum is fixed, so the same input gives the same bits.

Logits are x * scale, then either dropped where a bool mask is False (as -inf) or shifted by an
additive mask. A row's shift is its max, or 0 when the max is not finite (a row of -inf gives NaN,
as the reference says).
"""
import triton
import triton.language as tl

from ..elementwise.casts import narrow
from ..rows import columns, float_argument, row_offsets

NO_MASK, KEEP_MASK, ADDITIVE_MASK = 0, 1, 2


@triton.jit
def _logits(x_ptr, mask_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn, ms0, ms1, ms2, msn, scale,
            SCALED: tl.constexpr, MASK_KIND: tl.constexpr, COMPUTE: tl.constexpr):
    x_offs = row_offsets(row, b1, b2, xs0, xs1, xs2)[:, None] + col[None, :] * xsn
    x = tl.load(x_ptr + x_offs, mask=valid, other=0).to(COMPUTE)
    if SCALED:
        x = x * scale
    if MASK_KIND != 0:
        m_offs = row_offsets(row, b1, b2, ms0, ms1, ms2)[:, None] + col[None, :] * msn
        if MASK_KIND == 1:
            keep = tl.load(mask_ptr + m_offs, mask=valid, other=0)
            x = tl.where(keep != 0, x, float("-inf"))
        else:
            x = x + tl.load(mask_ptr + m_offs, mask=valid, other=0).to(COMPUTE)
    return tl.where(valid, x, float("-inf"))


@triton.jit
def _shift(row_max):
    """The row's max, or 0 where it is not finite."""
    return tl.where(row_max - row_max == 0, row_max, 0)


@triton.jit
def _store(out_ptr, row, col, valid, b1, b2, os0, os1, os2, osn, shifted, exps, total, LOG: tl.constexpr):
    """exps = exp(shifted), computed once by the caller (the exp unit is a quarter-rate pipe)."""
    if LOG:
        result = shifted - tl.log(total)[:, None]
    else:
        result = exps * (1 / total)[:, None]  # one division a row, not one an element
    offs = row_offsets(row, b1, b2, os0, os1, os2)[:, None] + col[None, :] * osn
    tl.store(out_ptr + offs, narrow(result, out_ptr.dtype.element_ty), mask=valid)


@triton.jit(do_not_specialize=["scale_bits"])
def softmax_rows_kernel(
    x_ptr, out_ptr, mask_ptr, rows, n, b1, b2,
    xs0, xs1, xs2, xsn, os0, os1, os2, osn, ms0, ms1, ms2, msn, scale_bits,
    LOG: tl.constexpr, SCALED: tl.constexpr, MASK_KIND: tl.constexpr, COMPUTE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, WIDE: tl.constexpr, ONE_PASS: tl.constexpr,
):
    """A row tile per program: read once when the row fits BLOCK_N (ONE_PASS), else walked twice,
    the first walk keeping the running max and the sum rescaled to it (online softmax)."""
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    scale = float_argument(scale_bits).to(COMPUTE)
    if ONE_PASS:
        col = tl.arange(0, BLOCK_N)
        valid = (row < rows)[:, None] & (col < n)[None, :]
        logits = _logits(x_ptr, mask_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn, ms0, ms1, ms2, msn, scale,
                         SCALED, MASK_KIND, COMPUTE)
        shifted = logits - _shift(tl.max(logits, 1))[:, None]
        exps = tl.exp(shifted)
        _store(out_ptr, row, col, valid, b1, b2, os0, os1, os2, osn, shifted, exps, tl.sum(exps, 1), LOG)
    else:
        row_max = tl.full([BLOCK_ROWS], float("-inf"), COMPUTE)
        total = tl.zeros([BLOCK_ROWS], COMPUTE)
        for piece in range(0, tl.cdiv(n, BLOCK_N)):
            col = columns(piece, BLOCK_N, WIDE)
            valid = (row < rows)[:, None] & (col < n)[None, :]
            logits = _logits(x_ptr, mask_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn, ms0, ms1, ms2, msn,
                             scale, SCALED, MASK_KIND, COMPUTE)
            new_max = tl.maximum(row_max, tl.max(logits, 1))
            shift = _shift(new_max)
            # the sum so far, rescaled to the new shift (a sum of 0 stays 0: its shift may be far off)
            total = tl.where(total == 0, 0, total * tl.exp(_shift(row_max) - shift))
            total += tl.sum(tl.exp(logits - shift[:, None]), 1)
            row_max = new_max
        shift = _shift(row_max)
        for piece in range(0, tl.cdiv(n, BLOCK_N)):
            col = columns(piece, BLOCK_N, WIDE)
            valid = (row < rows)[:, None] & (col < n)[None, :]
            logits = _logits(x_ptr, mask_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn, ms0, ms1, ms2, msn,
                             scale, SCALED, MASK_KIND, COMPUTE)
            shifted = logits - shift[:, None]
            if LOG:
                exps = shifted  # not needed
            else:
                exps = tl.exp(shifted)
            _store(out_ptr, row, col, valid, b1, b2, os0, os1, os2, osn, shifted, exps, total, LOG)


@triton.jit(do_not_specialize=["scale_bits"])
def chunk_stats_kernel(
    x_ptr, mask_ptr, part_ptr, rows, n, chunks, b1, b2,
    xs0, xs1, xs2, xsn, ms0, ms1, ms2, msn, scale_bits,
    SCALED: tl.constexpr, MASK_KIND: tl.constexpr, COMPUTE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, WIDE: tl.constexpr,
):
    """part[0, row, chunk] = the piece's max; part[1, row, chunk] = sum exp(x - its shift)."""
    pid = tl.program_id(0)
    chunk = pid % chunks
    row = (pid // chunks).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = columns(chunk, BLOCK_N, WIDE)
    valid = (row < rows)[:, None] & (col < n)[None, :]
    scale = float_argument(scale_bits).to(COMPUTE)
    logits = _logits(x_ptr, mask_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn, ms0, ms1, ms2, msn, scale,
                     SCALED, MASK_KIND, COMPUTE)
    piece_max = tl.max(logits, 1)
    piece_sum = tl.sum(tl.exp(logits - _shift(piece_max)[:, None]), 1)
    slot = row * chunks + chunk
    tl.store(part_ptr + slot, piece_max, mask=row < rows)
    tl.store(part_ptr + rows * chunks + slot, piece_sum, mask=row < rows)


@triton.jit
def _combined(part_ptr, row, rows, chunks, BLOCK_ROWS: tl.constexpr, PART_BLOCK: tl.constexpr,
              COMPUTE: tl.constexpr):
    """The row's shift and its sum of exp(x - shift), from the pieces' partials in their order."""
    row_max = tl.full([BLOCK_ROWS], float("-inf"), COMPUTE)
    for start in range(0, chunks, PART_BLOCK):
        piece = start + tl.arange(0, PART_BLOCK)
        ok = (row < rows)[:, None] & (piece < chunks)[None, :]
        maxes = tl.load(part_ptr + row[:, None] * chunks + piece[None, :], mask=ok, other=float("-inf"))
        row_max = tl.maximum(row_max, tl.max(maxes, 1))
    # the loop's result taken once: Triton 3.6's OptimizeThreadLocality pass (sm_90) fails on a reduced loop
    # result with several uses, as _shift's three would be (a 64-row tile, its lengths multiples of 16)
    shift = _shift(tl.maximum(row_max, float("-inf")))
    total = tl.zeros([BLOCK_ROWS], COMPUTE)
    for start in range(0, chunks, PART_BLOCK):
        piece = start + tl.arange(0, PART_BLOCK)
        ok = (row < rows)[:, None] & (piece < chunks)[None, :]
        slot = row[:, None] * chunks + piece[None, :]
        maxes = tl.load(part_ptr + slot, mask=ok, other=float("-inf"))
        sums = tl.load(part_ptr + rows * chunks + slot, mask=ok, other=0)
        # a piece of -inf has sum 0 and shift 0: it adds nothing (0 * exp(0 - shift) may be 0 * inf)
        scaled = tl.where(sums == 0, 0, sums * tl.exp(_shift(maxes) - shift[:, None]))
        total += tl.sum(scaled, 1)
    return shift, total


@triton.jit(do_not_specialize=["scale_bits"])
def chunk_write_kernel(
    x_ptr, out_ptr, mask_ptr, part_ptr, rows, n, chunks, b1, b2,
    xs0, xs1, xs2, xsn, os0, os1, os2, osn, ms0, ms1, ms2, msn, scale_bits,
    LOG: tl.constexpr, SCALED: tl.constexpr, MASK_KIND: tl.constexpr, COMPUTE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, PART_BLOCK: tl.constexpr, WIDE: tl.constexpr,
):
    pid = tl.program_id(0)
    chunk = pid % chunks
    row = (pid // chunks).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = columns(chunk, BLOCK_N, WIDE)
    valid = (row < rows)[:, None] & (col < n)[None, :]
    shift, total = _combined(part_ptr, row, rows, chunks, BLOCK_ROWS, PART_BLOCK, COMPUTE)
    scale = float_argument(scale_bits).to(COMPUTE)
    logits = _logits(x_ptr, mask_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn, ms0, ms1, ms2, msn, scale,
                     SCALED, MASK_KIND, COMPUTE)
    shifted = logits - shift[:, None]
    if LOG:
        exps = shifted  # not needed
    else:
        exps = tl.exp(shifted)
    _store(out_ptr, row, col, valid, b1, b2, os0, os1, os2, osn, shifted, exps, total, LOG)
