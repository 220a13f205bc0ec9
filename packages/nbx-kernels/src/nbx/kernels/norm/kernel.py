"""The normalization kernels: layer and RMS norm rows (group norm is layer norm over a group's row
with per-channel weights; instance norm is group norm of one channel a group; the fused residual add
first stores x + residual), and batch norm's per-channel affine map.

A row's elements are one dim through one stride, or (TWO_D: a channels-last group, its channels
contiguous) two: element j at (j // INNER) * outer stride + (j % INNER) * inner stride, so a group
of channels-last channels is read in place. INNER (a constexpr: the divisions become multiplies) is
the channels of such a row, or 0 for a channels-first row (its channel is j // positions). ACTIVATION (None or silu, ...) follows the affine map
in the store (GroupNorm -> SiLU in one pass of writes).

A program holds a [BLOCK_ROWS, BLOCK_N] tile. A row that fits is read once and normalized in
registers (mean, then the variance of the centred values: no cancellation). A longer row is walked
in BLOCK_N pieces twice by its program when the rows fill the device: the first walk merges each
piece's mean and squared deviations into the row's (Chan's rule, in the pieces' fixed order), the
second writes. When they are too few, each piece is a program of its own: one kernel stores the
pieces' statistics (and the new residual), a second merges them in order and writes. Statistics of
the half types are fp32.
"""
import triton
import triton.language as tl

from ..dependent_launch import wait_for_predecessor
from ..elementwise.casts import narrow
from ..matmul.fused import _activate
from ..rows import columns, float_argument, row_offsets


@triton.jit
def column_offsets(col, s_inner, s_outer, INNER: tl.constexpr, TWO_D: tl.constexpr):
    """The offsets of a row's elements col (see the module's text)."""
    if TWO_D:
        offsets = (col // INNER) * s_outer + (col % INNER) * s_inner
    else:
        offsets = col * s_inner
    return offsets


@triton.jit
def _load_row_piece(x_ptr, res_ptr, new_res_ptr, row, col, valid, b1, b2,
                    xs0, xs1, xs2, xsn, rs0, rs1, rs2, rsn, out_offs, xso,
                    ADD: tl.constexpr, STORE_SUM: tl.constexpr, COMPUTE: tl.constexpr, INNER: tl.constexpr,
                    TWO_D: tl.constexpr):
    x = tl.load(x_ptr + row_offsets(row, b1, b2, xs0, xs1, xs2)[:, None]
                + column_offsets(col, xsn, xso, INNER, TWO_D)[None, :], mask=valid, other=0).to(COMPUTE)
    if ADD:
        r = tl.load(res_ptr + row_offsets(row, b1, b2, rs0, rs1, rs2)[:, None] + col[None, :] * rsn,
                    mask=valid, other=0).to(COMPUTE)
        total = narrow(x + r, new_res_ptr.dtype.element_ty)  # the new residual, normalized as stored
        if STORE_SUM:
            tl.store(new_res_ptr + out_offs, total, mask=valid)
        x = total.to(COMPUTE)
    return x


@triton.jit
def _affine_operands(w_ptr, b_ptr, row, col, valid, n, groups, group_channels, positions,
                     HAS_W: tl.constexpr, HAS_B: tl.constexpr, GROUPED: tl.constexpr, INNER: tl.constexpr):
    """The weight and bias of a piece as stored (0 where absent, unused): loaded before the row's
    reductions, so that their latency overlaps them instead of following them."""
    w = 0
    b = 0
    if GROUPED:  # the channel of each element of a group's row
        if INNER == 0:  # channels-first: a channel's positions lie together
            index = (row % groups)[:, None] * group_channels + col[None, :] // positions
        else:  # channels the row's inner dim
            index = (row % groups)[:, None] * group_channels + col[None, :] % INNER
        if HAS_W:
            w = tl.load(w_ptr + index, mask=valid, other=0)
        if HAS_B:
            b = tl.load(b_ptr + index, mask=valid, other=0)
    else:  # one weight row, shared by the tile's rows
        if HAS_W:
            w = tl.load(w_ptr + col, mask=col < n, other=0)[None, :]
        if HAS_B:
            b = tl.load(b_ptr + col, mask=col < n, other=0)[None, :]
    return w, b


@triton.jit
def _affine(y, w, b, HAS_W: tl.constexpr, HAS_B: tl.constexpr, COMPUTE: tl.constexpr, ACTIVATION: tl.constexpr):
    if HAS_W:
        y = y * w.to(COMPUTE)
    if HAS_B:
        y = y + b.to(COMPUTE)
    return _activate(y, ACTIVATION)


@triton.jit(do_not_specialize=["eps_bits"])
def norm_rows_kernel(
    x_ptr, res_ptr, out_ptr, new_res_ptr, w_ptr, b_ptr, rows, n, b1, b2,
    xs0, xs1, xs2, xsn, rs0, rs1, rs2, rsn, os0, os1, os2, osn,
    groups, group_channels, positions, xso, oso, eps_bits,
    RMS: tl.constexpr, ADD: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, GROUPED: tl.constexpr,
    COMPUTE: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr,
    WIDE: tl.constexpr, INNER: tl.constexpr, TWO_D: tl.constexpr, ACTIVATION: tl.constexpr,
    PDL: tl.constexpr = False,
):
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = row < rows
    eps = float_argument(eps_bits).to(COMPUTE)
    out_rows = row_offsets(row, b1, b2, os0, os1, os2)
    if ONE_PASS:
        col = tl.arange(0, BLOCK_N)
        valid = row_ok[:, None] & (col < n)[None, :]
        out_offs = out_rows[:, None] + column_offsets(col, osn, oso, INNER, TWO_D)[None, :]
        x = _load_row_piece(x_ptr, res_ptr, new_res_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn,
                            rs0, rs1, rs2, rsn, out_offs, xso, ADD, True, COMPUTE, INNER, TWO_D)
        w, b = _affine_operands(w_ptr, b_ptr, row, col, valid, n, groups, group_channels, positions, HAS_W, HAS_B,
                                GROUPED, INNER)
        if RMS:
            rstd = 1 / tl.sqrt(tl.sum(x * x, 1) / n + eps)
            y = x * rstd[:, None]
        else:
            mean = tl.sum(x, 1) / n
            centred = tl.where(valid, x - mean[:, None], 0)
            rstd = 1 / tl.sqrt(tl.sum(centred * centred, 1) / n + eps)
            y = centred * rstd[:, None]
        y = _affine(y, w, b, HAS_W, HAS_B, COMPUTE, ACTIVATION)
        tl.store(out_ptr + out_offs, narrow(y, out_ptr.dtype.element_ty), mask=valid)
    else:
        mean = tl.zeros([BLOCK_ROWS], COMPUTE)
        squares = tl.zeros([BLOCK_ROWS], COMPUTE)  # sum of x*x (RMS) or of squared deviations
        for piece in range(0, tl.cdiv(n, BLOCK_N)):
            col = columns(piece, BLOCK_N, WIDE)
            valid = row_ok[:, None] & (col < n)[None, :]
            x = _load_row_piece(x_ptr, res_ptr, new_res_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn,
                                rs0, rs1, rs2, rsn, out_rows[:, None] + column_offsets(col, osn, oso, INNER, TWO_D)[None, :],
                                xso, ADD, True, COMPUTE, INNER, TWO_D)
            if RMS:
                squares += tl.sum(x * x, 1)
            else:
                seen = tl.cast(piece, COMPUTE) * BLOCK_N
                count = tl.minimum(n - seen, BLOCK_N)
                piece_mean = tl.sum(x, 1) / count
                dev = tl.where(valid, x - piece_mean[:, None], 0)
                delta = piece_mean - mean
                mean += delta * (count / (seen + count))
                squares += tl.sum(dev * dev, 1) + delta * delta * (seen * count / (seen + count))
        rstd = 1 / tl.sqrt(squares / n + eps)
        for piece in range(0, tl.cdiv(n, BLOCK_N)):
            col = columns(piece, BLOCK_N, WIDE)
            valid = row_ok[:, None] & (col < n)[None, :]
            out_offs = out_rows[:, None] + column_offsets(col, osn, oso, INNER, TWO_D)[None, :]
            x = _load_row_piece(x_ptr, res_ptr, new_res_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn,
                                rs0, rs1, rs2, rsn, out_offs, xso, ADD, False, COMPUTE, INNER, TWO_D)
            w, b = _affine_operands(w_ptr, b_ptr, row, col, valid, n, groups, group_channels, positions, HAS_W,
                                    HAS_B, GROUPED, INNER)
            if RMS:
                y = x * rstd[:, None]
            else:
                y = (x - mean[:, None]) * rstd[:, None]
            y = _affine(y, w, b, HAS_W, HAS_B, COMPUTE, ACTIVATION)
            tl.store(out_ptr + out_offs, narrow(y, out_ptr.dtype.element_ty), mask=valid)


@triton.jit(do_not_specialize=["eps_bits"])
def channel_affine_kernel(
    x_ptr, out_ptr, mean_ptr, var_ptr, w_ptr, b_ptr, rows, n, channels, b1, b2,
    xs0, xs1, xs2, xsn, os0, os1, os2, osn, eps_bits,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, COMPUTE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, WIDE: tl.constexpr,
):
    """Batch norm in inference: rows are (sample, channel) pairs, a row's elements its positions."""
    row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = row < rows
    channel = row % channels
    eps = float_argument(eps_bits).to(COMPUTE)
    mean = tl.load(mean_ptr + channel, mask=row_ok, other=0).to(COMPUTE)
    scale = 1 / tl.sqrt(tl.load(var_ptr + channel, mask=row_ok, other=1).to(COMPUTE) + eps)
    if HAS_W:
        scale = scale * tl.load(w_ptr + channel, mask=row_ok, other=0).to(COMPUTE)
    shift = tl.zeros([BLOCK_ROWS], COMPUTE)
    if HAS_B:
        shift = tl.load(b_ptr + channel, mask=row_ok, other=0).to(COMPUTE)
    x_rows = row_offsets(row, b1, b2, xs0, xs1, xs2)
    out_rows = row_offsets(row, b1, b2, os0, os1, os2)
    for piece in range(0, tl.cdiv(n, BLOCK_N)):
        col = columns(piece, BLOCK_N, WIDE)
        valid = row_ok[:, None] & (col < n)[None, :]
        x = tl.load(x_ptr + x_rows[:, None] + col[None, :] * xsn, mask=valid, other=0).to(COMPUTE)
        y = (x - mean[:, None]) * scale[:, None] + shift[:, None]
        tl.store(out_ptr + out_rows[:, None] + col[None, :] * osn, narrow(y, out_ptr.dtype.element_ty), mask=valid)


# ---- rows too few to fill the device: each row split over programs ------------------------------

@triton.jit
def norm_chunk_stats_kernel(
    x_ptr, res_ptr, new_res_ptr, part_ptr, rows, n, chunks, b1, b2,
    xs0, xs1, xs2, xsn, rs0, rs1, rs2, rsn, os0, os1, os2, osn, xso, oso,
    RMS: tl.constexpr, ADD: tl.constexpr, COMPUTE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, WIDE: tl.constexpr, INNER: tl.constexpr, TWO_D: tl.constexpr,
):
    """part[0, row, piece] = the piece's sum of squares (RMS) or mean; part[1, ...] = its squared
    deviations (layer norm). With ADD the piece's new residual is stored here."""
    pid = tl.program_id(0)
    piece = pid % chunks
    row = (pid // chunks).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = columns(piece, BLOCK_N, WIDE)
    valid = (row < rows)[:, None] & (col < n)[None, :]
    out_offs = row_offsets(row, b1, b2, os0, os1, os2)[:, None] + column_offsets(col, osn, oso, INNER, TWO_D)[None, :]
    x = _load_row_piece(x_ptr, res_ptr, new_res_ptr, row, col, valid, b1, b2, xs0, xs1, xs2, xsn,
                        rs0, rs1, rs2, rsn, out_offs, xso, ADD, True, COMPUTE, INNER, TWO_D)
    slot = row * chunks + piece
    if RMS:
        tl.store(part_ptr + slot, tl.sum(x * x, 1), mask=row < rows)
    else:
        count = tl.sum((col < n).to(COMPUTE), 0)
        mean = tl.sum(x, 1) / count
        dev = tl.where(valid, x - mean[:, None], 0)
        tl.store(part_ptr + slot, mean, mask=row < rows)
        tl.store(part_ptr + rows * chunks + slot, tl.sum(dev * dev, 1), mask=row < rows)


@triton.jit
def _merged_stats(part_ptr, row, rows, n, chunks, RMS: tl.constexpr, COMPUTE: tl.constexpr,
                  BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, PART_BLOCK: tl.constexpr):
    """(mean, sum of squares or of squared deviations) of each row from its pieces, in their order:
    each block of pieces merged at once, the blocks by Chan's rule."""
    mean = tl.zeros([BLOCK_ROWS], COMPUTE)
    squares = tl.zeros([BLOCK_ROWS], COMPUTE)
    for start in range(0, chunks, PART_BLOCK):
        piece = start + tl.arange(0, PART_BLOCK)
        ok = (row < rows)[:, None] & (piece < chunks)[None, :]
        slot = row[:, None] * chunks + piece[None, :]
        first = tl.load(part_ptr + slot, mask=ok, other=0)
        if RMS:
            squares += tl.sum(first, 1)
        else:
            second = tl.load(part_ptr + rows * chunks + slot, mask=ok, other=0)
            # every piece but a row's last holds BLOCK_N elements
            counts = tl.where(piece < chunks, tl.minimum(n - tl.cast(piece, COMPUTE) * BLOCK_N, BLOCK_N), 0)
            seen = tl.cast(start, COMPUTE) * BLOCK_N
            count = tl.sum(counts, 0)
            block_mean = tl.sum(first * counts[None, :], 1) / count
            centred = tl.where(ok, first - block_mean[:, None], 0)
            block_squares = tl.sum(second + centred * centred * counts[None, :], 1)
            delta = block_mean - mean
            mean += delta * (count / (seen + count))
            squares += block_squares + delta * delta * (seen * count / (seen + count))
    return mean, squares


@triton.jit(do_not_specialize=["eps_bits"])
def norm_chunk_write_kernel(
    x_ptr, new_res_ptr, out_ptr, w_ptr, b_ptr, part_ptr, rows, n, chunks, b1, b2,
    xs0, xs1, xs2, xsn, os0, os1, os2, osn, groups, group_channels, positions, xso, oso, eps_bits,
    RMS: tl.constexpr, ADD: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, GROUPED: tl.constexpr,
    COMPUTE: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, PART_BLOCK: tl.constexpr,
    WIDE: tl.constexpr, INNER: tl.constexpr, TWO_D: tl.constexpr, ACTIVATION: tl.constexpr,
):
    """Normalizes a piece with its row's merged statistics (with ADD, the stored new residual)."""
    pid = tl.program_id(0)
    piece = pid % chunks
    row = (pid // chunks).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = columns(piece, BLOCK_N, WIDE)
    valid = (row < rows)[:, None] & (col < n)[None, :]
    eps = float_argument(eps_bits).to(COMPUTE)
    w, b = _affine_operands(w_ptr, b_ptr, row, col, valid, n, groups, group_channels, positions, HAS_W, HAS_B,
                            GROUPED, INNER)
    mean, squares = _merged_stats(part_ptr, row, rows, n, chunks, RMS, COMPUTE, BLOCK_ROWS, BLOCK_N, PART_BLOCK)
    rstd = 1 / tl.sqrt(squares / n + eps)
    out_offs = row_offsets(row, b1, b2, os0, os1, os2)[:, None] + column_offsets(col, osn, oso, INNER, TWO_D)[None, :]
    if ADD:
        x = tl.load(new_res_ptr + out_offs, mask=valid, other=0).to(COMPUTE)
    else:
        x = tl.load(x_ptr + row_offsets(row, b1, b2, xs0, xs1, xs2)[:, None]
                    + column_offsets(col, xsn, xso, INNER, TWO_D)[None, :], mask=valid, other=0).to(COMPUTE)
    if RMS:
        y = x * rstd[:, None]
    else:
        y = (x - mean[:, None]) * rstd[:, None]
    y = _affine(y, w, b, HAS_W, HAS_B, COMPUTE, ACTIVATION)
    tl.store(out_ptr + out_offs, narrow(y, out_ptr.dtype.element_ty), mask=valid)
