"""Row sorts in one program: each key becomes an order-preserving uint32 (NaN largest, -0.0 equal
to 0.0), packed above its position into a uint64, and the row of packed words goes through
tl.sort's bitonic network. The low half of a sorted word says where its element came from, so
ties keep input order (a stable sort, descending too: the key is complemented, not the position)
and the values are re-read from their own bits rather than rebuilt from keys."""
import triton
import triton.language as tl


@triton.jit
def order_key(x):
    """uint32 whose unsigned order is x's order: floats by their sign-flipped bits, NaN last;
    signed integers offset by 2**31; unsigned ones as they are."""
    if x.dtype.is_floating():
        v = x.to(tl.float32)
        v = tl.where(v == 0, 0.0, v)  # -0.0 sorts with 0.0
        bits = v.to(tl.uint32, bitcast=True)
        negative = (bits >> 31) == 1
        key = tl.where(negative, ~bits, bits | 0x80000000)
        key = tl.where(v != v, 0xFFFFFFFF, key)
    elif x.dtype.is_int_signed():
        key = (x.to(tl.int32).to(tl.uint32, bitcast=True)) ^ 0x80000000
    else:
        key = x.to(tl.uint32)
    return key


@triton.jit
def sort_rows_kernel(x_ptr, idx_in_ptr, vals_ptr, idx_ptr, n, n_out, DESCENDING: tl.constexpr, BLOCK: tl.constexpr):
    """Row r of x [rows, n] (n <= BLOCK) sorted; its first n_out values and their indices written.
    idx_in_ptr (not None when merging candidates) holds each element's index in the original row,
    -1 for an empty candidate, which sorts after every real one."""
    r = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n
    x = tl.load(x_ptr + r * n + cols, mask=inside)
    if idx_in_ptr is not None:
        inside = inside & (tl.load(idx_in_ptr + r * n + cols, mask=inside, other=-1) >= 0)
    key = order_key(x)
    if DESCENDING:
        key = ~key
    key = tl.where(inside, key, 0xFFFFFFFF)
    packed = tl.sort((key.to(tl.uint64) << 32) | cols.to(tl.uint64))
    pos = (packed & 0xFFFFFFFF).to(tl.int64)
    written = cols < n_out
    real = written & (pos < n)
    values = tl.load(x_ptr + r * n + pos, mask=real)
    if idx_in_ptr is not None:
        index = tl.load(idx_in_ptr + r * n + pos, mask=real, other=-1)
    else:
        index = tl.where(real, pos, -1)
    tl.store(vals_ptr + r * n_out + cols, values, mask=written)
    tl.store(idx_ptr + r * n_out + cols, index, mask=written)


# ---- rows longer than one program: a bitonic merge over global memory ------------------------------
# The row, padded to a power of two N2 with words that sort last, is cut into blocks of BLOCK words,
# each sorted by tl.sort. A merge stage of size s (2 * BLOCK .. N2) compares each word of a group of s
# with its mirror (the two sorted halves become two bitonic halves, the lower below the upper), then
# with the word j further for j = s / 4 .. BLOCK (half-cleaners): each block then holds a bitonic
# run of exactly the words it must end with, and sorting it again finishes the stage. Rows sit at
# multiples of N2, so no group crosses a row.

@triton.jit
def pack_blocks_kernel(x_ptr, packed_ptr, n, N2, DESCENDING: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n
    key = order_key(tl.load(x_ptr + r * n + cols, mask=inside))
    if DESCENDING:
        key = ~key
    key = tl.where(inside, key, 0xFFFFFFFF)
    tl.store(packed_ptr + r * N2 + cols, tl.sort((key.to(tl.uint64) << 32) | cols.to(tl.uint64)))


@triton.jit
def flip_step_kernel(packed_ptr, half, BLOCK: tl.constexpr):
    q = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    group, r = q // half, q % half
    i = group * 2 * half + r
    j = group * 2 * half + 2 * half - 1 - r
    a, b = tl.load(packed_ptr + i), tl.load(packed_ptr + j)
    tl.store(packed_ptr + i, tl.minimum(a, b))
    tl.store(packed_ptr + j, tl.maximum(a, b))


@triton.jit
def half_step_kernel(packed_ptr, distance, BLOCK: tl.constexpr):
    q = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    i = (q // distance) * 2 * distance + q % distance
    a, b = tl.load(packed_ptr + i), tl.load(packed_ptr + i + distance)
    tl.store(packed_ptr + i, tl.minimum(a, b))
    tl.store(packed_ptr + i + distance, tl.maximum(a, b))


@triton.jit
def sort_blocks_kernel(packed_ptr, BLOCK: tl.constexpr):
    cols = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(packed_ptr + cols, tl.sort(tl.load(packed_ptr + cols)))


@triton.jit
def unpack_kernel(x_ptr, packed_ptr, vals_ptr, idx_ptr, n, N2, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n
    pos = (tl.load(packed_ptr + r * N2 + cols, mask=inside) & 0xFFFFFFFF).to(tl.int64)
    tl.store(vals_ptr + r * n + cols, tl.load(x_ptr + r * n + pos, mask=inside), mask=inside)
    tl.store(idx_ptr + r * n + cols, pos, mask=inside)
