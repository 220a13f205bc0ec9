"""One decoding step: penalties, temperature, top-k, top-p, min-p, and the draw from a Philox stream.

    tokens = nbx.sample(logits, temperature=0.7, top_p=0.9, generator=nbx.Generator(seed=1))

logits are [rows, vocab] (or [vocab]); the result is int64 [rows] (or 0-d). The order is Hugging
Face's: penalties, temperature, top-k, top-p, min-p; then the draw. In float32, per row:

    l = logits * (1 / temperature)
    top-k  keep l >= the k-th largest l (ties at the threshold are all kept)
    p      = exp(l - max l) where kept, else 0; its weight w = int64(p * 2**40) (truncated)
    top-p  keep p >= t, t the largest value whose {p >= t} holds weight >= top_p * (kept weight),
           compared in float64
    min-p  keep p >= min_p (p of the most likely token is 1)
    draw   u = the row's uniform (word `row` of the stream at the generator's counter, the
           uniform of nbx.rand); the token is the first index whose running sum of kept w
           exceeds int64(u * (sum of kept w)) (float64 product), else the last kept index.

Masses are integer sums, exact in any order, so the chunking of a kernel does not change them:
the same seed and offset give the same tokens on every device (the draw takes ceil(rows / 4)
counters of the generator, as nbx.rand(rows) would). Only exp's last bit on a device could move
a weight by one unit; a token of probability below 2**-40 has weight 0 and is never drawn. temperature=0 is greedy: exactly
argmax (the first maximal index), and draws nothing. Penalties need the previous tokens of each
row ([rows, n] int64; -1 entries are padding): repetition_penalty divides a positive logit of a
seen token and multiplies a negative one (CTRL's rule); frequency_penalty subtracts the token's
count times itself; presence_penalty subtracts itself once from every seen token.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes, reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, ShapeError
from ..random import philox
from ..random.generator import resolve
from ..tensor import Tensor
from ._common import check_category, wrap
from .movement import check_index_dtype, host


def _checked(name: str, value, lo: float, hi: float, default):
    if value is None:
        return default
    value = float(value)
    if not lo <= value <= hi:
        raise ArgumentError(f"sample: {name}={value} is outside [{lo}, {hi}]")
    return value


def sample(logits: Tensor, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
           min_p: float | None = None, generator=None, previous: Tensor | None = None,
           repetition_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> Tensor:
    """The next token of each row of logits (see the module's docstring for the exact rule)."""
    check_category("sample", logits.dtype, "real_floating")
    if logits.ndim not in (1, 2) or logits.shape[-1] == 0:
        raise ShapeError(f"sample takes [rows, vocab] or [vocab] logits with a vocab, got {logits.shape}")
    one_row = logits.ndim == 1
    rows = logits.reshape(1, -1) if one_row else logits
    vocab = rows.shape[1]
    temperature = _checked("temperature", temperature, 0.0, float("inf"), 1.0)
    k = vocab if top_k is None or int(top_k) >= vocab else int(top_k)
    if k < 1:
        raise ArgumentError(f"sample: top_k={top_k} keeps no token")
    p = _checked("top_p", top_p, 0.0, 1.0, 1.0)
    floor = _checked("min_p", min_p, 0.0, 1.0, 0.0)
    if repetition_penalty <= 0:
        raise ArgumentError(f"sample: repetition_penalty={repetition_penalty} must be positive")
    if previous is not None:
        rows = apply_penalties(rows, previous, repetition_penalty, frequency_penalty, presence_penalty)
    if temperature == 0.0:
        from .reductions import argmax
        out = argmax(rows, dim=-1)
    else:
        seed, offset = resolve(generator).reserve(philox.counters_for(rows.shape[0]))
        out = implementation("sample", rows.device)(rows, temperature, k, p, floor, seed, offset)
    return out.reshape(()) if one_row else out


def apply_penalties(logits: Tensor, previous: Tensor, repetition: float, frequency: float, presence: float) -> Tensor:
    """logits with the penalties of the tokens in previous ([rows, n], -1 = padding), through
    scatter and elementwise ops, so every device that has them applies them the same way."""
    from .creation import zeros
    from .elementwise import where
    from .gather import scatter
    check_index_dtype("sample", previous)
    if previous.ndim != 2 or previous.shape[0] != logits.shape[0]:
        raise ShapeError(f"sample: previous tokens {previous.shape} for {logits.shape[0]} rows")
    if repetition == 1.0 and frequency == 0.0 and presence == 0.0:
        return logits
    vocab = logits.shape[1]
    ids = previous.to(dtype=dtypes.int64)
    valid = ids >= 0
    slot = where(valid, ids, vocab)  # padding lands in an extra column, dropped below
    counts = scatter(zeros((logits.shape[0], vocab + 1), dtype=dtypes.float32, device=logits.device), 1, slot,
                     valid.to(dtype=dtypes.float32), reduce="sum")[:, :vocab]
    x = logits.to(dtype=dtypes.float32)
    seen = counts > 0
    if repetition != 1.0:
        x = where(seen, where(x > 0, x / repetition, x * repetition), x)
    if frequency != 0.0:
        x = x - counts * frequency
    if presence != 0.0:
        x = x - seen.to(dtype=dtypes.float32) * presence
    return x


WEIGHT_SCALE = np.float32(2.0 ** 40)


def sample_reference(logits, temperature, k, p, floor, seed, offset, precision=reference.NATIVE):
    """The rule of the module's docstring in numpy (float32 values, int64 weights): the tokens are
    exact, so the oracle is the same computation."""
    l = host(logits).astype(np.float32) * np.float32(1.0 / temperature)  # as the kernels: times the reciprocal
    rows, vocab = l.shape
    u = philox.uniform_stream(seed, offset, rows).astype(np.float64)
    out = np.empty(rows, np.int64)
    for r in range(rows):
        row = l[r]
        keep = row >= np.sort(row)[vocab - k] if k < vocab else np.ones(vocab, bool)
        with np.errstate(all="ignore"):
            prob = np.where(keep, np.exp(row - row.max()), np.float32(0)).astype(np.float32)
        if p < 1.0:
            ordered = np.sort(prob)[::-1]
            mass = np.cumsum((ordered * WEIGHT_SCALE).astype(np.int64)).astype(np.float64)
            goal = np.float64(np.float32(p)) * mass[-1]
            cut = min(int(np.searchsorted(mass, goal, side="left")), vocab - 1)
            prob = np.where(prob >= ordered[cut], prob, np.float32(0))
        if floor > 0.0:
            prob = np.where(prob >= np.float32(floor), prob, np.float32(0))
        running = np.cumsum((prob * WEIGHT_SCALE).astype(np.int64))
        token = int(np.searchsorted(running, np.int64(u[r] * np.float64(running[-1])), side="right"))
        out[r] = token if token < vocab else int(np.flatnonzero(prob)[-1])
    return out


reference.register("sample", sample_reference)
register("sample", "cpu")(lambda logits, *args: wrap(sample_reference(logits, *args), dtypes.INDEX))

__all__ = ["sample", "apply_penalties"]
