"""Sorting 64-bit keys (int64, uint64, float64) with the 32-bit sort kernels.

The one-program and radix sort kernels order keys of at most 32 bits (their order key and packed
words hold 32). A 64-bit key is mapped to an order-preserving uint64 (int64: the sign bit flipped;
float64: -0.0 made 0.0, every NaN the positive quiet NaN, then the sign bit set on positives and
all bits flipped on negatives, so NaN sorts after +inf as numpy places it; complemented for
descending, so ties keep their input order both ways), split in its high and low 32-bit words, and
sorted as an LSD sort of two digits: a stable sort of the low words, the high words gathered in
that order, a stable sort of those; the composed permutation is the stable order of the 64-bit
keys. Every step is an existing kernel (elementwise, take_along_axis, the 32-bit sort).
"""
from __future__ import annotations

from nbx.core import dtypes
from nbx.core.tensor import Tensor

from ..cost import LAUNCH, Buffer, Cost

SIGN = 1 << 63
WIDE_KINDS = ("int", "uint", "float")


def is_wide(dtype) -> bool:
    """A real dtype of 64 bits: the keys this module sorts."""
    return dtype.itemsize == 8 and dtype.kind in WIDE_KINDS


def order_words(rows: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
    """The high and low uint32 words of rows' order-preserving uint64 keys."""
    from nbx.core.ops import elementwise as ew
    from ..gather import as_bits
    if rows.dtype.kind == "float":
        canonical = ew.where(ew.isnan(rows), float("nan"), ew.where(rows == 0, 0.0, rows))
        bits = as_bits(canonical)[0]
        key = ew.where((bits >> 63) != 0, ew.bitwise_invert(bits), bits | SIGN)
    elif rows.dtype.kind == "int":
        key = as_bits(rows.contiguous())[0] ^ SIGN
    else:
        key = rows
    if descending:
        key = ew.bitwise_invert(key)
    return (key >> 32).to(dtype=dtypes.uint32), (key & 0xFFFFFFFF).to(dtype=dtypes.uint32)


def sort_wide(rows: Tensor, descending: bool, sort_narrow) -> tuple[Tensor, Tensor]:
    """(values, int64 indices) of rows [..., n] sorted stably along the last dim; sort_narrow is
    the family's sort of 32-bit keys, (rows, axis, descending) -> (values, indices)."""
    from nbx.core.ops.gather import take_along_axis
    last = rows.ndim - 1
    high, low = order_words(rows, descending)
    by_low = sort_narrow(low, last, False)[1]
    by_high = sort_narrow(take_along_axis(high, by_low, axis=last), last, False)[1]
    order = take_along_axis(by_low, by_high, axis=last)
    return take_along_axis(rows, order, axis=last), order


def wide_cost(x: Tensor, word_sort: Cost) -> Cost:
    """sort_wide's traffic: the key words made (x read, two uint32 words written, about four
    elementwise passes for float64), two sorts of uint32 words (word_sort, the cost of one), three
    gathers (high words, the composed order, the values), each reading its index and source."""
    n = x.size
    words = 2 * n * 4
    keys = (4 if x.dtype.kind == "float" else 2) * (x.nbytes + n * 8) + x.nbytes + words
    gathers = (n * 8 + 2 * n * 4) + 3 * n * 8 + (n * 8 + 2 * x.nbytes)
    buffers = (Buffer("values", x.nbytes), Buffer("indices", n * 8), Buffer("key_words", words, LAUNCH)) + tuple(
        Buffer(f"word_{b.name}", b.nbytes, LAUNCH) for b in word_sort.buffers)
    return Cost(buffers=buffers, bytes_moved=keys + 2 * word_sort.bytes_moved + gathers,
                launches=2 * word_sort.launches + (8 if x.dtype.kind == "float" else 4) + 3,
                notes=("64-bit keys: two stable sorts of their 32-bit words (low, then high), composed",)
                + word_sort.notes)
