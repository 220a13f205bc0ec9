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
multiple of 16 bytes and an index is `c * 1`: three paths keep them where the per-element map would
not (measured in the PTX Triton emits for sm_90): FLAT_OUT walks a dense output whose rows are no
multiple of 16 bytes (a pad) by its flat positions; FLIP_VEC moves a flip of a unit-stride last dim
as 16-byte groups reversed in registers (flip_tile); SHIFT_VEC moves a map that reads runs of the
source shifted by any number of elements (a pad, a roll, a copy from misaligned rows) as output
groups of 16 bytes, each loaded as the two aligned 16-byte chunks of the source it straddles and
shifted into place in registers (shifted_words). A program whose columns are one run of the source
works out the shift once a row; one holding a seam (a pad's edge, a roll's wrap, a row's end)
moves the groups that are runs so and the others element by element.
concat_kernel writes up to four parts of a concat in one launch.
Elements are moved as unsigned words of their size: one compiled kernel per itemsize (complex128
as two uint64 words, the last dim; CONSTANT's fill then has FILL_WORDS words). The fill slot holds
16 bytes of the fill (the value repeated): SHIFT_VEC's masked chunk loads take it as 4-byte words.
"""
import triton
import triton.language as tl

COPY, CONSTANT, REFLECT, REPLICATE, CIRCULAR, FLIP, ROLL = 0, 1, 2, 3, 4, 5, 6   # MODE, as the host names it
# the same, as the kernels read them: Triton's compiler takes a global only as a tl.constexpr
_COPY, _CONSTANT, _REFLECT, _REPLICATE, _CIRCULAR, _FLIP, _ROLL = (tl.constexpr(m) for m in range(7))
# positions a seam's element path takes at a time: its per-element addresses and masks bound the registers of
# the whole kernel (a pad's 8192-position block held 255 and spilled in one piece)
SEAM_PART = tl.constexpr(1024)


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
               FLAT_ROWS: tl.constexpr, ROW_DIMS: tl.constexpr = 3):
    """(source offset, output offset, inside) of output row r (its three outer dims; ROW_DIMS of
    them more than one long: a division a row dim past the first, ~20 instructions each on sm_90)."""
    if FLAT_ROWS:  # one row dim: r itself, so a source contiguous along the rows (a transpose) is seen to be
        i2 = r
        i1 = r * 0
        i0 = i1
    elif ROW_DIMS == 2:   # the first row dim of size 1 (a head transpose's [seq, heads] rows)
        i2 = r % o2
        i1 = r // o2
        i0 = r * 0
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
def element_values(src, mask, inside, c, fill_ptr, MODE: tl.constexpr, FILL_WORDS: tl.constexpr):
    """The words at src where mask (CONSTANT: the fill where not inside)."""
    if MODE == _CONSTANT:
        if FILL_WORDS == 1:
            fill = tl.load(fill_ptr)
        else:  # a complex128 fill: its two words alternate along the last dim (the words' own dim)
            fill = tl.load(fill_ptr + (c % FILL_WORDS))
        # the fill as the masked load's `other`: no per-element `inside` kept live across the load
        # (a where after it held ~4 registers an element: 255 at 64 elements a thread)
        return tl.load(src, mask=mask & inside, other=fill)
    return tl.load(src, mask=mask)


@triton.jit
def _split_words(x, R: tl.constexpr, G: tl.constexpr):
    """[R, G, 4] words as four [R, G] tensors (each thread's own registers: nothing moves)."""
    even, odd = tl.split(tl.reshape(x, [R, G, 2, 2]))
    w0, w2 = tl.split(even)
    w1, w3 = tl.split(odd)
    return w0, w1, w2, w3


@triton.jit
def _funnel(lo, hi, bits):
    """32 bits of hi:lo from bit `bits` (0..24) up: one funnel shift (SHF) on sm_90."""
    return (((hi.to(tl.uint64) << 32) | lo.to(tl.uint64)) >> bits.to(tl.uint64)).to(tl.uint32)


@triton.jit
def shifted_words(src_words, chunk, m, live, fill, VEC: tl.constexpr, R: tl.constexpr, G: tl.constexpr,
                  HAS_FILL: tl.constexpr):
    """[R, G, 4] words: the R x G groups of VEC elements (16 bytes) whose first element is element m
    of the source's aligned 16-byte chunk `chunk` (words src_words[4 * chunk:]). That chunk and the
    next are loaded as 16-byte vectors (the next only where m != 0; `fill` where not live) and the
    group is shifted out of their 32 bytes in registers: by 8 and 4 bytes through selects, by the
    last 0-3 bytes through funnel shifts (11 selects and 4 shifts a group)."""
    word = tl.arange(0, 4)[None, None, :]
    first = src_words + chunk[:, :, None] * 4 + word
    # (as int1 arrays: the interpreter keeps some int1 results of scalars as int32 arrays, refused as masks)
    live = live.to(tl.int32) != 0
    live_b = (live & (m != 0)).to(tl.int32) != 0
    if HAS_FILL:
        a = tl.load(first, mask=live[:, :, None], other=fill)
        b = tl.load(first + 4, mask=live_b[:, :, None], other=fill)
    else:
        a = tl.load(first, mask=live[:, :, None])
        b = tl.load(first + 4, mask=live_b[:, :, None])
    a0, a1, a2, a3 = _split_words(a, R, G)
    b0, b1, b2, b3 = _split_words(b, R, G)
    shift = m * (16 // VEC)   # bytes
    by8 = (shift & 8) != 0
    x0 = tl.where(by8, a2, a0)
    x1 = tl.where(by8, a3, a1)
    x2 = tl.where(by8, b0, a2)
    x3 = tl.where(by8, b1, a3)
    x4 = tl.where(by8, b2, b0)
    if VEC > 2:   # (8-byte elements shift by 0 or 8 bytes alone)
        x5 = tl.where(by8, b3, b1)
        by4 = (shift & 4) != 0
        x0 = tl.where(by4, x1, x0)
        x1 = tl.where(by4, x2, x1)
        x2 = tl.where(by4, x3, x2)
        x3 = tl.where(by4, x4, x3)
        x4 = tl.where(by4, x5, x4)
    if VEC > 4:   # words of 1 or 2 bytes shift by parts of a 4-byte word too
        bits = (shift & 3) * 8
        x0 = _funnel(x0, x1, bits)
        x1 = _funnel(x1, x2, bits)
        x2 = _funnel(x2, x3, bits)
        x3 = _funnel(x3, x4, bits)
    return tl.reshape(tl.join(tl.join(x0, x2), tl.join(x1, x3)), [R, G, 4])


@triton.jit
def run_of(c_first, c_last, a, n, MODE: tl.constexpr):
    """(j, run): where column c_first reads, and whether columns c_first..c_last read one ascending
    run of the source, all inside. Every map the shifted path takes (not FLIP's) steps by at most +1
    a column (a mirror -1, an edge 0, a wrap back), so ends whose sources lie c_last - c_first apart
    bound a run."""
    j_first, in_first = source_index(c_first, a, n, MODE)
    j_last, in_last = source_index(c_last, a, n, MODE)
    return j_first, in_first & in_last & (j_last - j_first == c_last - c_first)


@triton.jit
def _fill_words(fill_ptr, MODE: tl.constexpr):
    """The 16-byte fill as 4-byte words (CONSTANT), else a placeholder."""
    if MODE == _CONSTANT:
        return tl.load(fill_ptr.to(tl.pointer_type(tl.uint32), bitcast=True) + tl.arange(0, 4))[None, None, :]
    return tl.zeros([1, 1, 4], tl.uint32)


@triton.jit
def shifted_rows(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, live_r, c0, o3, n3, a3, MODE: tl.constexpr,
                 FILL_WORDS: tl.constexpr, VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """SHIFT_VEC of the row tile: rows of a unit-stride last dim whose output rows start on 16 bytes."""
    src_words = src_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
    out_words = out_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
    fill = _fill_words(fill_ptr, MODE)
    g = tl.arange(0, BLOCK_C // VEC)
    j0, run = run_of(c0, c0 + BLOCK_C - 1, a3, n3, MODE)
    if run & (c0 + BLOCK_C <= o3):   # every group a run, each row's shift worked out once
        q = src_r + j0
        m = q & (VEC - 1)
        chunk = ((q - m) // VEC)[:, None] + g[None, :]
        words = shifted_words(src_words, chunk, m[:, None], (live_r & in_r)[:, None] & (g >= 0)[None, :], fill, VEC,
                              BLOCK_R, BLOCK_C // VEC, MODE == _CONSTANT)
        out_chunk = ((out_r + c0) // VEC)[:, None] + g[None, :]
        tl.store(out_words + out_chunk[:, :, None] * 4 + tl.arange(0, 4)[None, None, :], words,
                 mask=live_r[:, None, None])
    else:   # a seam: the groups that are runs, each its own shift; then the others element by element
        cg = c0 + g * VEC
        jg, fast = run_of(cg, cg + VEC - 1, a3, n3, MODE)
        fast = fast & (cg + VEC <= o3)
        qg = src_r[:, None] + jg[None, :]   # (names of their own: a branch's values must match the other's types)
        mg = qg & (VEC - 1)
        words = shifted_words(src_words, (qg - mg) // VEC, mg, (live_r & in_r)[:, None] & fast[None, :], fill, VEC,
                              BLOCK_R, BLOCK_C // VEC, MODE == _CONSTANT)
        out_g = ((out_r + c0) // VEC)[:, None] + g[None, :]
        tl.store(out_words + out_g[:, :, None] * 4 + tl.arange(0, 4)[None, None, :], words,
                 mask=(live_r[:, None] & fast[None, :])[:, :, None])
        if BLOCK_R * BLOCK_C > SEAM_PART and SEAM_PART // BLOCK_R >= VEC:   # in parts of columns (registers)
            for k in range(0, BLOCK_C // (SEAM_PART // BLOCK_R)):
                rows_seam_elements(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, live_r,
                                   c0 + k * (SEAM_PART // BLOCK_R), o3, n3, a3, MODE, FILL_WORDS, VEC,
                                   SEAM_PART // BLOCK_R)
        else:
            rows_seam_elements(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, live_r, c0, o3, n3, a3, MODE,
                               FILL_WORDS, VEC, BLOCK_C)


@triton.jit
def rows_seam_elements(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, live_r, c0, o3, n3, a3, MODE: tl.constexpr,
                       FILL_WORDS: tl.constexpr, VEC: tl.constexpr, PART_C: tl.constexpr):
    """The elements of PART_C columns from c0 whose groups are no runs, one by one."""
    c = c0 + tl.arange(0, PART_C)
    cs = c - (c & (VEC - 1))
    _, fast = run_of(cs, cs + VEC - 1, a3, n3, MODE)
    slow = ((fast & (cs + VEC <= o3)) == 0) & (c < o3)
    j3, in3 = source_index(c, a3, n3, MODE)
    mask = live_r[:, None] & slow[None, :]
    values = element_values(src_ptr + src_r[:, None] + j3[None, :], mask, in_r[:, None] & in3[None, :], c[None, :],
                            fill_ptr, MODE, FILL_WORDS)
    tl.store(out_ptr + out_r[:, None] + c[None, :], values, mask=mask)


@triton.jit
def flat_groups(p, r_first, total, o3, n3, a3, src_a, in_a, src_b, in_b, MODE: tl.constexpr, VEC: tl.constexpr):
    """(source offset, row inside, run) of the groups of VEC flat output positions from p: run when
    the group lies in one row and reads a run of it (or the row is CONSTANT's fill)."""
    c = p - r_first * o3
    over = c >= o3
    c = tl.where(over, c - o3, c)
    src_row = tl.where(over, src_b, src_a)
    in_row = tl.where(over, in_b.to(tl.int32), in_a.to(tl.int32)) != 0   # (the interpreter's bool where is int)
    j, run = run_of(c, c + VEC - 1, a3, n3, MODE)
    whole = (p + VEC <= total) & (c + VEC <= o3)
    return src_row + j, in_row, whole & (run | (in_row == 0))


@triton.jit
def shifted_flat(out_ptr, src_ptr, fill_ptr, start, total, r_first, o3, n3, a3, src_a, in_a, src_b, in_b,
                 MODE: tl.constexpr, FILL_WORDS: tl.constexpr, VEC: tl.constexpr, BLOCK: tl.constexpr):
    """SHIFT_VEC of the flat output walk (a dense output of rows no multiple of 16 bytes: a pad)."""
    src_words = src_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
    out_words = out_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
    fill = _fill_words(fill_ptr, MODE)
    g = tl.arange(0, BLOCK // VEC)
    c0 = start - r_first * o3
    j0, run = run_of(c0, c0 + BLOCK - 1, a3, n3, MODE)
    if (c0 + BLOCK <= o3) & (run | (in_a == 0)):   # inside one row, one run (or a fill row): one shift
        q = src_a + j0
        m = q & (VEC - 1)
        chunk = (q - m) // VEC + g
        words = shifted_words(src_words, chunk[None, :], m, in_a & (g >= 0)[None, :], fill, VEC, 1, BLOCK // VEC,
                              MODE == _CONSTANT)
        tl.store(out_words + ((start // VEC + g) * 4)[None, :, None] + tl.arange(0, 4)[None, None, :], words)
    else:   # a row's end or a pad's edge in the block: the groups that are runs, then the others' elements
        qg, in_row, fast = flat_groups(start + g * VEC, r_first, total, o3, n3, a3, src_a, in_a, src_b, in_b, MODE,
                                       VEC)   # (names of their own: a branch's values must match the other's types)
        mg = qg & (VEC - 1)
        words = shifted_words(src_words, ((qg - mg) // VEC)[None, :], mg[None, :], (fast & in_row)[None, :], fill, VEC,
                              1, BLOCK // VEC, MODE == _CONSTANT)
        tl.store(out_words + ((start // VEC + g) * 4)[None, :, None] + tl.arange(0, 4)[None, None, :], words,
                 mask=fast[None, :, None])
        if BLOCK > SEAM_PART:   # in parts: a part's per-element addresses and masks alone take registers
            for k in range(0, BLOCK // SEAM_PART):
                flat_seam_elements(out_ptr, src_ptr, fill_ptr, start + k * SEAM_PART, total, r_first, o3, n3, a3,
                                   src_a, in_a, src_b, in_b, MODE, FILL_WORDS, VEC, SEAM_PART)
        else:
            flat_seam_elements(out_ptr, src_ptr, fill_ptr, start, total, r_first, o3, n3, a3, src_a, in_a, src_b, in_b,
                               MODE, FILL_WORDS, VEC, BLOCK)


@triton.jit
def flat_seam_elements(out_ptr, src_ptr, fill_ptr, start, total, r_first, o3, n3, a3, src_a, in_a, src_b, in_b,
                       MODE: tl.constexpr, FILL_WORDS: tl.constexpr, VEC: tl.constexpr, PART: tl.constexpr):
    """The elements of PART flat positions from start whose groups are no runs, one by one."""
    lin = start + tl.arange(0, PART)
    _, _, fast = flat_groups(lin - (lin & (VEC - 1)), r_first, total, o3, n3, a3, src_a, in_a, src_b, in_b, MODE, VEC)
    c = lin - r_first * o3
    over = c >= o3
    c = tl.where(over, c - o3, c)
    src_row = tl.where(over, src_b, src_a)
    in_row = tl.where(over, in_b.to(tl.int32), in_a.to(tl.int32)) != 0
    j3, in3 = source_index(c, a3, n3, MODE)
    mask = (lin < total) & (fast == 0)
    values = element_values(src_ptr + src_row + j3, mask, in_row & in3, c, fill_ptr, MODE, FILL_WORDS)
    tl.store(out_ptr + lin, values, mask=mask)


@triton.jit
def on_16_bytes(out_ptr, src_ptr):
    """Whether both pointers start on 16 bytes: the shifted path's condition (a group's two chunk
    loads then stay inside 16-byte blocks that hold source elements; its 4-byte words are aligned).
    Checked here, not in the plan: a plan is of layouts, and a call's host path stays as short."""
    return ((out_ptr.to(tl.int64) | src_ptr.to(tl.int64)) & 15) == 0


@triton.jit
def flat_elements(out_ptr, src_ptr, fill_ptr, start, total, r_first, o3, n3, a3, s3, src_a, in_a, src_b, in_b,
                  MODE: tl.constexpr, MAP_INNER: tl.constexpr, FILL_WORDS: tl.constexpr, BLOCK: tl.constexpr):
    """BLOCK flat positions from start element by element: a program's block spans at most two rows
    (o3 >= its size), whose source offsets were worked out once (scalars) and are selected per element."""
    lin = start + tl.arange(0, BLOCK)
    c = lin - r_first * o3
    over = c >= o3
    c = tl.where(over, c - o3, c)
    src_row = tl.where(over, src_b, src_a)
    in_row = tl.where(over, in_b.to(tl.int32), in_a.to(tl.int32)) != 0   # (the interpreter's bool where is int)
    mask = lin < total
    if MAP_INNER:
        j3, in3 = source_index(c, a3, n3, MODE)
    else:
        j3, in3 = c, c >= 0
    values = element_values(src_ptr + src_row + j3 * s3, mask, in_row & in3, c, fill_ptr, MODE, FILL_WORDS)
    # a block wholly inside stores unmasked: a mask is no proof of 16-byte runs past an odd total
    if start + BLOCK <= total:
        tl.store(out_ptr + lin, values)
    else:
        tl.store(out_ptr + lin, values, mask=mask)


@triton.jit
def row_elements(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, live_r, c0, o3, n3, a3, s3, t3,
                 MODE: tl.constexpr, MAP_INNER: tl.constexpr, FILL_WORDS: tl.constexpr, BLOCK_C: tl.constexpr):
    """BLOCK_C columns from c0 of the row tile element by element."""
    c = (c0 + tl.arange(0, BLOCK_C))[None, :]
    mask = live_r[:, None] & (c < o3)
    if MAP_INNER:
        j3, in3 = source_index(c, a3, n3, MODE)
    else:
        j3, in3 = c, c >= 0
    values = element_values(src_ptr + src_r[:, None] + j3 * s3, mask, in_r[:, None] & in3, c, fill_ptr, MODE,
                            FILL_WORDS)
    tl.store(out_ptr + out_r[:, None] + c * t3, values, mask=mask)


@triton.jit
def remap_kernel(out_ptr, src_ptr, fill_ptr, rows, col_blocks, o1, o2, o3,
                 n0, n1, n2, n3, a0, a1, a2, a3, s0, s1, s2, s3, t0, t1, t2, t3,
                 MODE: tl.constexpr, MAP_INNER: tl.constexpr, FLAT_ROWS: tl.constexpr, FILL_WORDS: tl.constexpr,
                 INDEX64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, FLIP_VEC: tl.constexpr = 1,
                 FLAT_OUT: tl.constexpr = False, SHIFT_VEC: tl.constexpr = 1, ROW_DIMS: tl.constexpr = 3):
    pid = tl.program_id(0)
    if INDEX64:
        pid = pid.to(tl.int64)
    if FLAT_OUT:
        # a dense output of rows o3 >= BLOCK_R * BLOCK_C wide whose row stride is no multiple of 16 bytes
        # (a pad's o3 = n3 + 2): its flat positions, so the stores stay 16-byte vectors
        start = pid * (BLOCK_R * BLOCK_C)
        total = (pid * 0 + rows) * o3   # in pid's width: rows * o3 of two int32 arguments overflows past 2**31
        r_first = start // o3
        src_a, _, in_a = row_source(r_first, o1, o2, n0, n1, n2, a0, a1, a2, s0, s1, s2, t0, t1, t2, MODE, FLAT_ROWS,
                                    ROW_DIMS)
        src_b, _, in_b = row_source(r_first + 1, o1, o2, n0, n1, n2, a0, a1, a2, s0, s1, s2, t0, t1, t2, MODE,
                                    FLAT_ROWS, ROW_DIMS)
        if SHIFT_VEC > 1:
            if on_16_bytes(out_ptr, src_ptr):
                shifted_flat(out_ptr, src_ptr, fill_ptr, start, total, r_first, o3, n3, a3, src_a, in_a, src_b, in_b,
                             MODE, FILL_WORDS, SHIFT_VEC, BLOCK_R * BLOCK_C)
            elif BLOCK_R * BLOCK_C > SEAM_PART:   # (in parts, as a seam: the kernel's registers are its widest path's)
                for k in range(0, BLOCK_R * BLOCK_C // SEAM_PART):
                    flat_elements(out_ptr, src_ptr, fill_ptr, start + k * SEAM_PART, total, r_first, o3, n3, a3, s3,
                                  src_a, in_a, src_b, in_b, MODE, MAP_INNER, FILL_WORDS, SEAM_PART)
            else:
                flat_elements(out_ptr, src_ptr, fill_ptr, start, total, r_first, o3, n3, a3, s3, src_a, in_a, src_b,
                              in_b, MODE, MAP_INNER, FILL_WORDS, BLOCK_R * BLOCK_C)
        else:
            flat_elements(out_ptr, src_ptr, fill_ptr, start, total, r_first, o3, n3, a3, s3, src_a, in_a, src_b, in_b,
                          MODE, MAP_INNER, FILL_WORDS, BLOCK_R * BLOCK_C)
    else:
        r = (pid // col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
        src_r, out_r, in_r = row_source(r, o1, o2, n0, n1, n2, a0, a1, a2, s0, s1, s2, t0, t1, t2, MODE, FLAT_ROWS,
                                        ROW_DIMS)
        c0 = (pid % col_blocks) * BLOCK_C
        if SHIFT_VEC > 1:
            if on_16_bytes(out_ptr, src_ptr):
                shifted_rows(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, r < rows, c0, o3, n3, a3, MODE,
                             FILL_WORDS, SHIFT_VEC, BLOCK_R, BLOCK_C)
            elif BLOCK_R * BLOCK_C > SEAM_PART and SEAM_PART // BLOCK_R >= 1:   # (in parts of columns, as a seam)
                for k in range(0, BLOCK_C // (SEAM_PART // BLOCK_R)):
                    row_elements(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, r < rows,
                                 c0 + k * (SEAM_PART // BLOCK_R), o3, n3, a3, s3, t3, MODE, MAP_INNER, FILL_WORDS,
                                 SEAM_PART // BLOCK_R)
            else:
                row_elements(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, r < rows, c0, o3, n3, a3, s3, t3, MODE,
                             MAP_INNER, FILL_WORDS, BLOCK_C)
        elif FLIP_VEC > 1:  # a flip of a unit-stride last dim, VEC words (16 bytes) a group: see flip_tile
            flip_tile(out_ptr, src_ptr, src_r, out_r, r < rows, pid % col_blocks, n3, FLIP_VEC, BLOCK_R, BLOCK_C)
        else:
            row_elements(out_ptr, src_ptr, fill_ptr, src_r, out_r, in_r, r < rows, c0, o3, n3, a3, s3, t3, MODE,
                         MAP_INNER, FILL_WORDS, BLOCK_C)


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
