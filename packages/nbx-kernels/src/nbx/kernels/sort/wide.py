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
    """The high and low uint32 words of rows' order-preserving uint64 keys (each temporary dropped
    once used: the peak is what wide_cost declares)."""
    from nbx.core.ops import elementwise as ew
    from ..gather import as_bits
    if rows.dtype.kind == "float":
        nan = ew.isnan(rows)
        zeroed = ew.where(rows == 0, 0.0, rows)
        canonical = ew.where(nan, float("nan"), zeroed)
        del nan, zeroed
        bits = as_bits(canonical)[0]
        negative = (bits >> 63) != 0
        flipped = ew.bitwise_invert(bits)
        positive = bits | SIGN
        del bits, canonical
        key = ew.where(negative, flipped, positive)
        del negative, flipped, positive
    elif rows.dtype.kind == "int":
        key = as_bits(rows)[0] ^ SIGN   # rows: axis_last's, contiguous
    else:
        key = rows
    if descending:
        key = ew.bitwise_invert(key)
    high = (key >> 32).to(dtype=dtypes.uint32)
    return high, (key & 0xFFFFFFFF).to(dtype=dtypes.uint32)


def sort_wide(rows: Tensor, descending: bool, sort_narrow) -> tuple[Tensor, Tensor]:
    """(values, int64 indices) of rows [..., n] sorted stably along the last dim; sort_narrow is
    the family's sort of 32-bit keys, (rows, axis, descending) -> (values, indices)."""
    from nbx.core.ops.gather import take_along_axis
    last = rows.ndim - 1
    high, low = order_words(rows, descending)
    by_low = sort_narrow(low, last, False)[1]
    del low
    high = take_along_axis(high, by_low, axis=last)
    by_high = sort_narrow(high, last, False)[1]
    del high
    order = take_along_axis(by_low, by_high, axis=last)
    del by_low, by_high
    return take_along_axis(rows, order, axis=last), order


def wide_cost(x: Tensor, word_sort: Cost, moved: bool = False) -> Cost:
    """sort_wide's cost from its steps, word_sort the declared cost of one sort of uint32 words of
    x's shape (values 4 bytes and indices 8 a key, plus its workspace W). Per key, the live bytes
    peak at the key words (int: the uint64 key, a shifted copy and both words, 24; float64: the
    canonical value, its sign mask, both flipped forms and the key, 25) or during the second word
    sort (the gathered high words, the first order, and that sort's outputs: 24 + W), the outputs
    (values and int64 indices) being made after both. moved: the sorted dim is not x's last in
    memory, so x is copied with it last (live throughout) and both outputs copied back at the end."""
    n = x.size
    float_keys = x.dtype.kind == "float"
    peak_keys = 25 * n if float_keys else 24 * n
    workspace = word_sort.allocated - 12 * n
    outputs = x.nbytes + n * 8
    peak = max(peak_keys, 24 * n + workspace, 2 * outputs if moved else 0) + (x.nbytes if moved else 0)
    # elementwise passes making the keys (reads + writes per key): float64 5 passes (isnan, == 0,
    # two wheres, >> 63 and != 0, ~, |, where), ints 1 (xor); then >> 32, & and two casts to words
    key_passes = (9 + 8 + 16 + 9 + 9 + 16 + 16 + 24) * n if float_keys else (16 if x.dtype.kind == "int" else 0) * n
    words = 2 * (8 + 8 + 8 + 4) * n
    gathers = (4 + 8 + 4) * n + (8 + 8 + 8) * n + (8 + 8 + 8) * n
    launches = (9 if float_keys else 1 if x.dtype.kind == "int" else 0) + 4 + 2 * word_sort.launches + 3 + 3 * moved
    gathers += 3 * 2 * x.nbytes * moved + 2 * n * 8 * moved  # the copy with the dim last, the two back
    return Cost(buffers=(Buffer("values", x.nbytes), Buffer("indices", n * 8),
                         Buffer("temporaries", peak - outputs, LAUNCH)),
                bytes_moved=key_passes + words + 2 * word_sort.bytes_moved + gathers, launches=launches,
                notes=("64-bit keys: two stable sorts of their 32-bit words (low, then high), composed",)
                + word_sort.notes)
