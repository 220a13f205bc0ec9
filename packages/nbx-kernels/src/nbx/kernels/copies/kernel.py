"""The output-driven remap copy: every data-movement op that writes each output element from one
source element (or a fill value) through a per-dim index map.

out[i0, i1, i2, i3] = src[map(i0), map(i1), map(i2), map(i3)], the map picked by MODE:

- COPY: j = i (a strided copy: concat's parts, copy_ between views);
- CONSTANT / REFLECT / REPLICATE / CIRCULAR: pad by `a` in front (j = i - a, then outside [0, n)
  the fill, the mirror without the edge, the edge, or the wrap);
- FLIP: j = n - 1 - i where a != 0;
- ROLL: j = i - a, wrapped (0 <= a < n).

A program writes a BLOCK_R x BLOCK_C tile: BLOCK_R rows of the output (its three outer dims) by
BLOCK_C consecutive elements of its last dim. Row offsets are worked out once a row; along the last
dim the offsets stay `c * stride`, so when the last dim is unmapped (MAP_INNER=0) and of stride 1
(Triton specialises a stride of 1) the loads and stores are contiguous and vectorise to 16 bytes.
A transpose (the source of unit stride along the output's only row dim, FLAT_ROWS) reads its tile
contiguous down the rows and writes it along the columns: Triton moves the tile between the two
layouts through shared memory. The vectoriser sees 16-byte runs only where every row offset is a
multiple of 16 bytes and an index is `c * 1`: two paths keep them where the per-element map would
not (measured in the PTX Triton emits for sm_90, 2026-12-01): FLAT_OUT walks a dense output whose
rows are no multiple of 16 bytes (a pad) by its flat positions, and FLIP_VEC moves a flip of a
unit-stride last dim as 16-byte groups reversed in registers (flip_tile). A ROLL or a pad still
loads single words (its source is shifted by `a` words, no 16-byte boundary); its stores are vectors.
concat_kernel writes up to four parts of a concat in one launch.
Elements are moved as unsigned words of their size: one compiled kernel per itemsize (complex128
as two uint64 words, the last dim; CONSTANT's fill then has FILL_WORDS words).
"""
import triton
import triton.language as tl

COPY, CONSTANT, REFLECT, REPLICATE, CIRCULAR, FLIP, ROLL = 0, 1, 2, 3, 4, 5, 6   # MODE, as the host names it
# the same, as the kernels read them: Triton's compiler takes a global only as a tl.constexpr
_COPY, _CONSTANT, _REFLECT, _REPLICATE, _CIRCULAR, _FLIP, _ROLL = (tl.constexpr(m) for m in range(7))


@triton.jit
def source_index(i, a, n, MODE: tl.constexpr):
    """(j, inside): where output index i reads along one dim of source size n; inside is False only
    for CONSTANT's pad."""
    inside = i >= 0
    if MODE == _COPY:
        j = i
    elif MODE == _FLIP:
        j = tl.where(a != 0, n - 1 - i, i)
    elif MODE == _ROLL:
        j = i - a
        j = tl.where(j < 0, j + n, j)
    else:
        j = i - a
        if MODE == _CONSTANT:
            inside = (j >= 0) & (j < n)
            j = tl.where(inside, j, 0)
        elif MODE == _REFLECT:
            j = tl.where(j < 0, -j, j)
            j = tl.where(j >= n, 2 * n - 2 - j, j)
        elif MODE == _REPLICATE:
            j = tl.minimum(tl.maximum(j, 0), n - 1)
        else:  # CIRCULAR: a pad is at most the size, so one wrap suffices
            j = tl.where(j < 0, j + n, j)
            j = tl.where(j >= n, j - n, j)
    return j, inside


@triton.jit
def flip_tile(out_ptr, src_ptr, src_row, out_row, live, col_block, n, VEC: tl.constexpr, BLOCK_R: tl.constexpr,
              BLOCK_C: tl.constexpr):
    """out[r, c] = src[r, n - 1 - c] for a last dim of unit stride on both sides: the tile is groups of
    VEC words (16 bytes). Output group g (columns c0 + g * VEC + v) reads the source group starting at
    n - c0 - (g + 1) * VEC backwards; so each group is loaded ascending (one 16-byte load where n is
    a multiple of VEC: Triton sees the alignment) and reversed in the thread's registers, and the
    loads vectorise as the stores do (j = n - 1 - c per element defeats the vectoriser)."""
    c0 = col_block * BLOCK_C
    g = tl.arange(0, BLOCK_C // VEC)
    v = tl.arange(0, VEC)
    cols = (c0 + g * VEC)[None, :, None] + v[None, None, :]
    src_cols = (n - c0 - (g + 1) * VEC)[None, :, None] + v[None, None, :]
    inside = live[:, None, None] & (cols < n)
    values = tl.load(src_ptr + src_row[:, None, None] + src_cols, mask=live[:, None, None] & (src_cols >= 0))
    tl.store(out_ptr + out_row[:, None, None] + cols, tl.flip(values, 2), mask=inside)


@triton.jit
def row_source(r, o1, o2, n0, n1, n2, a0, a1, a2, s0, s1, s2, t0, t1, t2, MODE: tl.constexpr,
               FLAT_ROWS: tl.constexpr):
    """(source offset, output offset, inside) of output row r (its three outer dims)."""
    if FLAT_ROWS:  # one row dim: r itself, so a source contiguous along the rows (a transpose) is seen to be
        i2 = r
        i1 = r * 0
        i0 = i1
    else:
        i2 = r % o2
        rest = r // o2
        i1 = rest % o1
        i0 = rest // o1
    j0, in0 = source_index(i0, a0, n0, MODE)
    j1, in1 = source_index(i1, a1, n1, MODE)
    j2, in2 = source_index(i2, a2, n2, MODE)
    return j0 * s0 + j1 * s1 + j2 * s2, i0 * t0 + i1 * t1 + i2 * t2, in0 & in1 & in2


@triton.jit
def remap_kernel(out_ptr, src_ptr, fill_ptr, rows, col_blocks, o1, o2, o3,
                 n0, n1, n2, n3, a0, a1, a2, a3, s0, s1, s2, s3, t0, t1, t2, t3,
                 MODE: tl.constexpr, MAP_INNER: tl.constexpr, FLAT_ROWS: tl.constexpr, FILL_WORDS: tl.constexpr,
                 INDEX64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, FLIP_VEC: tl.constexpr = 1,
                 FLAT_OUT: tl.constexpr = False):
    pid = tl.program_id(0)
    if INDEX64:
        pid = pid.to(tl.int64)
    if FLAT_OUT:
        # a dense output of rows o3 >= BLOCK_R * BLOCK_C wide whose row stride is no multiple of 16 bytes
        # (a pad's o3 = n3 + 2): its flat positions, so the stores stay 16-byte vectors; a block spans
        # at most two rows, whose source offsets are worked out once (scalars) and selected per element
        start = pid * (BLOCK_R * BLOCK_C)
        total = (pid * 0 + rows) * o3   # in pid's width: rows * o3 of two int32 arguments overflows past 2**31
        lin = start + tl.arange(0, BLOCK_R * BLOCK_C)
        r_first = start // o3
        c = lin - r_first * o3
        over = c >= o3
        c = tl.where(over, c - o3, c)
        src_a, _, in_a = row_source(r_first, o1, o2, n0, n1, n2, a0, a1, a2, s0, s1, s2, t0, t1, t2, MODE, FLAT_ROWS)
        src_b, _, in_b = row_source(r_first + 1, o1, o2, n0, n1, n2, a0, a1, a2, s0, s1, s2, t0, t1, t2, MODE,
                                    FLAT_ROWS)
        src_row = tl.where(over, src_b, src_a)
        in_row = tl.where(over, in_b.to(tl.int32), in_a.to(tl.int32)) != 0   # (the interpreter's bool where is int)
        mask = lin < total
        out = out_ptr + lin
    else:
        r = (pid // col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
        c2 = (pid % col_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
        src_r, out_r, in_r = row_source(r, o1, o2, n0, n1, n2, a0, a1, a2, s0, s1, s2, t0, t1, t2, MODE, FLAT_ROWS)
        src_row = src_r[:, None]
        in_row = in_r[:, None]
        c = c2[None, :]
        mask = (r < rows)[:, None] & (c < o3)
        out = out_ptr + out_r[:, None] + c * t3
    if FLIP_VEC > 1:  # a flip of a unit-stride last dim, VEC words (16 bytes) a group: see flip_tile
        flip_tile(out_ptr, src_ptr, src_r, out_r, r < rows, pid % col_blocks, n3, FLIP_VEC, BLOCK_R, BLOCK_C)
    else:
        if MAP_INNER:
            j3, in3 = source_index(c, a3, n3, MODE)
        else:
            j3, in3 = c, c >= 0
        src = src_ptr + src_row + j3 * s3
        if MODE == _CONSTANT:
            if FILL_WORDS == 1:
                fill = tl.load(fill_ptr)
            else:  # a complex128 fill: its two words alternate along the last dim (the words' own dim)
                fill = tl.load(fill_ptr + (c % FILL_WORDS))
            # the fill as the masked load's `other`: no per-element `inside` kept live across the load
            # (a where after it held ~4 registers an element: 255 at 64 elements a thread)
            values = tl.load(src, mask=mask & in_row & in3, other=fill)
        else:
            values = tl.load(src, mask=mask)
        if FLAT_OUT:  # a block wholly inside stores unmasked: a mask is no proof of 16-byte runs past an odd total
            if start + BLOCK_R * BLOCK_C <= total:
                tl.store(out, values)
            else:
                tl.store(out, values, mask=mask)
        else:
            tl.store(out, values, mask=mask)


@triton.jit
def concat_kernel(out_ptr, rows, out_row, src0, src1, src2, src3, w0, w1, w2, w3, sr0, sr1, sr2, sr3,
                  col0, col1, col2, col3, end0, end1, end2, INDEX64: tl.constexpr, BLOCK_R: tl.constexpr,
                  BLOCK_C: tl.constexpr):
    """Up to four parts of a concat in one launch (a KV append's cache and its new row: one launch,
    not two, whose second's launch gap and ramp cost a fifth of a 64 MiB append). Part p is rows x w_p
    words (source rows sr_p apart, unit stride along them) written at column col_p of the output's
    rows (out_row apart); programs [end_{p-1}, end_p) are part p's, tiled BLOCK_R x BLOCK_C. The part's
    pointer, width and strides are selected per program (scalars), so one body serves every part and
    the loads and stores stay 16-byte vectors where every part's layout is 16-byte aligned."""
    pid = tl.program_id(0)
    if INDEX64:
        pid = pid.to(tl.int64)
    first = pid < end0
    second = pid < end1
    third = pid < end2
    src = tl.where(first, src0, tl.where(second, src1, tl.where(third, src2, src3)))
    width = tl.where(first, w0, tl.where(second, w1, tl.where(third, w2, w3)))
    src_row = tl.where(first, sr0, tl.where(second, sr1, tl.where(third, sr2, sr3)))
    col = tl.where(first, col0, tl.where(second, col1, tl.where(third, col2, col3)))
    q = pid - tl.where(first, 0, tl.where(second, end0, tl.where(third, end1, end2)))
    col_blocks = tl.cdiv(width, BLOCK_C)
    r = (q // col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = (q % col_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (r < rows)[:, None] & (c < width)[None, :]
    values = tl.load(src + (r * src_row)[:, None] + c[None, :], mask=mask)
    tl.store(out_ptr + col + (r * out_row)[:, None] + c[None, :], values, mask=mask)
