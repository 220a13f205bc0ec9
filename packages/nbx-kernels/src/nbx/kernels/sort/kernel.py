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
def sort_rows_kernel(x_ptr, vals_ptr, idx_ptr, n, n_out, DESCENDING: tl.constexpr, BLOCK: tl.constexpr):
    """Row r of x [rows, n] (n <= BLOCK) sorted; its first n_out values and their indices written."""
    r = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n
    x = tl.load(x_ptr + r * n + cols, mask=inside)
    key = order_key(x)
    if DESCENDING:
        key = ~key
    key = tl.where(inside, key, 0xFFFFFFFF)
    packed = tl.sort((key.to(tl.uint64) << 32) | cols.to(tl.uint64))
    pos = (packed & 0xFFFFFFFF).to(tl.int64)
    written = cols < n_out
    tl.store(vals_ptr + r * n_out + cols, tl.load(x_ptr + r * n + pos, mask=written), mask=written)
    tl.store(idx_ptr + r * n_out + cols, pos, mask=written)
