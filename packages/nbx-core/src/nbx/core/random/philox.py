"""Philox4x32-10 in numpy, bit for bit the generator behind Triton's tl.randint4x/rand4x/randn4x.

The mapping (Triton 3.6-3.9, python/triton/language/random.py), which nbx's kernels must keep:

    key     = (seed & 0xFFFFFFFF, seed >> 32)                 seed taken as uint64
    counter = (c & 0xFFFFFFFF, c >> 32, 0, 0)                 c = a 64-bit counter
    lanes   = philox4x32(counter, key, rounds=10)             four uint32: tl.randint4x(seed, c)

One Philox round (Random123's, as Triton writes it), with M0 = 0xD2511F53, M1 = 0xCD9E8D57:

    (c0, c1, c2, c3) <- (hi(M1*c2) ^ c1 ^ k0,  lo(M1*c2),  hi(M0*c0) ^ c3 ^ k1,  lo(M0*c0))
    (k0, k1)         <- (k0 + 0x9E3779B9, k1 + 0xBB67AE85)          (mod 2**32)

The stream: a sequence of 32-bit words, all four lanes of each counter in turn. Word j of the
stream at counter `offset` is lane j % 4 of counter offset + j // 4 (so one Philox call serves
four words: the whole block, as torch's generator spends it). Counters wrap mod 2**64.

uint32 -> float32 in [0, 1) (Triton's uint_to_uniform_float): read the word as int32 x, take
~x where x < 0, convert that int32 to float32 (round to nearest even) and multiply in float32
by float32(4.6566127342e-10). The largest result is 0.99999994, never 1.0.

Normal (Triton's pair_uniform_to_normal): words 2m and 2m + 1 give u1, u2 and two normals, all in
float32: r = sqrt(-2 * log(max(1e-7, u1))), theta = 6.283185307179586 * u2, normal 2m = r * cos(theta),
normal 2m + 1 = r * sin(theta). Per counter that is tl.randn4x(seed, c) in lane order.
"""
from __future__ import annotations

import numpy as np

from ..host import compute_cores, parallel_map

MULTIPLIER_0 = 0xD2511F53
MULTIPLIER_1 = 0xCD9E8D57
KEY_BUMP_0 = 0x9E3779B9
KEY_BUMP_1 = 0xBB67AE85
ROUNDS = 10
MASK32 = 0xFFFFFFFF

UNIFORM_SCALE = np.float32(4.6566127342e-10)  # largest scale with (2**31 - 1) * scale < 1 in fp32
NORMAL_FLOOR = np.float32(1.0e-7)             # keeps log(u1) finite
TWO_PI = np.float32(6.283185307179586)
CHUNK_COUNTERS = 1 << 16                      # counters per task: temporaries stay in cache
WORDS_PER_COUNTER = 4                         # one Philox call gives four 32-bit words


def philox4x32(c0, c1, c2, c3, k0: int, k1: int, rounds: int = ROUNDS):
    """Four uint32 lanes for counters (c0..c3, uint32 arrays) and key (k0, k1): Random123's Philox."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in (c0, c1, c2, c3))
    m0, m1 = np.uint64(MULTIPLIER_0), np.uint64(MULTIPLIER_1)
    shift = np.uint64(32)
    for _ in range(rounds):
        p0 = c0.astype(np.uint64) * m0  # a 32x32 product fits in 64 bits, so no wrap-around
        p1 = c2.astype(np.uint64) * m1
        c0, c1, c2, c3 = ((p1 >> shift).astype(np.uint32) ^ c1 ^ np.uint32(k0),
                          p1.astype(np.uint32),  # astype keeps the low 32 bits
                          (p0 >> shift).astype(np.uint32) ^ c3 ^ np.uint32(k1),
                          p0.astype(np.uint32))
        k0, k1 = (k0 + KEY_BUMP_0) & MASK32, (k1 + KEY_BUMP_1) & MASK32
    return c0, c1, c2, c3


def key_of(seed: int) -> tuple[int, int]:
    return seed & MASK32, (seed >> 32) & MASK32


def counters_for(words: int) -> int:
    """How many counters hold `words` words of the stream (a started counter counts whole)."""
    return -(-words // WORDS_PER_COUNTER)


def _fill(seed: int, offset: int, count: int, sink) -> None:
    """Run Philox over counters offset .. offset+count-1 in chunks (in parallel where cores allow),
    handing sink(part, (lane0, lane1, lane2, lane3)) each chunk's slice and lanes."""
    k0, k1 = key_of(seed)

    def fill(part: slice) -> None:
        counter = np.arange(part.start, part.stop, dtype=np.uint64) + np.uint64(offset)  # wraps mod 2**64
        zero = np.zeros(counter.shape, np.uint32)
        sink(part, philox4x32(counter.astype(np.uint32), (counter >> np.uint64(32)).astype(np.uint32),
                              zero, zero, k0, k1))

    parts = [slice(a, min(a + CHUNK_COUNTERS, count)) for a in range(0, count, CHUNK_COUNTERS)]
    if len(parts) > 1 and compute_cores() > 1:
        parallel_map(fill, parts)
    else:
        for part in parts:
            fill(part)


def lanes(seed: int, offset: int, count: int, n_lanes: int = 1) -> tuple[np.ndarray, ...]:
    """The first n_lanes uint32 lanes of counters offset .. offset+count-1 (as tl.randint4x)."""
    outs = tuple(np.empty(count, np.uint32) for _ in range(n_lanes))

    def sink(part: slice, result) -> None:
        for out, lane in zip(outs, result):
            out[part] = lane

    _fill(seed, offset, count, sink)
    return outs


def words(seed: int, offset: int, count: int) -> np.ndarray:
    """The first `count` words of the stream at counter `offset`: word j is lane j % 4 of counter
    offset + j // 4."""
    n_counters = counters_for(count)
    block = np.empty((n_counters, WORDS_PER_COUNTER), np.uint32)

    def sink(part: slice, result) -> None:
        for lane, values in enumerate(result):
            block[part, lane] = values

    _fill(seed, offset, n_counters, sink)
    return block.reshape(-1)[:count]


def uint32_to_unit_float(x: np.ndarray) -> np.ndarray:
    """float32 in [0, 1) from uint32 words, exactly as Triton's uint_to_uniform_float."""
    signed = x.view(np.int32)
    folded = np.where(signed < 0, ~signed, signed)
    return folded.astype(np.float32) * UNIFORM_SCALE


def box_muller(u1: np.ndarray, u2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both branches of Box-Muller in float32 (cosine, sine), as Triton's pair_uniform_to_normal."""
    radius = np.sqrt(np.float32(-2.0) * np.log(np.maximum(NORMAL_FLOOR, u1)))
    theta = TWO_PI * u2
    return radius * np.cos(theta), radius * np.sin(theta)


def uniform_stream(seed: int, offset: int, count: int) -> np.ndarray:
    """Element i is word i of the stream as a float32 in [0, 1) (tl.rand4x's lane i % 4)."""
    return uint32_to_unit_float(words(seed, offset, count))


def normal_stream(seed: int, offset: int, count: int) -> np.ndarray:
    """float32 standard normals: elements 2m and 2m + 1 are the cosine and sine normals of words
    2m and 2m + 1 (tl.randn4x's lanes, four per counter)."""
    pairs = words(seed, offset, 2 * -(-count // 2)).reshape(-1, 2)
    # contiguous operands: numpy's float32 log/sin/cos then take the same loops as the interpreter's
    u1 = uint32_to_unit_float(np.ascontiguousarray(pairs[:, 0]))
    u2 = uint32_to_unit_float(np.ascontiguousarray(pairs[:, 1]))
    cosine, sine = box_muller(u1, u2)
    return np.stack([cosine, sine], axis=1).reshape(-1)[:count]


def uint64_stream(seed: int, offset: int, count: int) -> np.ndarray:
    """Element i is word 2i | word 2i + 1 << 32 of the stream: the 64 random bits behind randint
    (two elements per counter)."""
    pairs = words(seed, offset, 2 * count).reshape(-1, 2).astype(np.uint64)
    return pairs[:, 0] | (pairs[:, 1] << np.uint64(32))
