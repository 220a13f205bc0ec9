"""The next token of each row of logits: greedy (argmax) at temperature 0, else a draw.

The draw is nbx.core's sampling op (issue 17: temperature, top-k, top-p and the draw from a Philox
stream, batched over rows). It is named here as `nbx.sample(logits, temperature=, top_k=, top_p=,
generator=)`; a build without it refuses sampled decoding by name, and greedy decoding needs none.
"""
from __future__ import annotations

import nbx.core as nbx


def pick(logits: nbx.Tensor, temperature: float, top_k, top_p, generator) -> nbx.Tensor:
    """One token id per row of logits [rows, vocab], on the logits' device (int64 [rows]); nothing read back."""
    if temperature < 0:
        raise nbx.ArgumentError(f"temperature is >= 0 (0: greedy), got {temperature}")
    if temperature == 0:
        return nbx.argmax(logits, dim=-1)
    sample = getattr(nbx, "sample", None)
    if sample is None:
        raise nbx.NotSupportedError("sampled decoding needs nbx.sample (the sampling ops of issue 17), which this "
                                    "nbx-core does not have yet; temperature=0 decodes greedily")
    return sample(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)


def pick_tokens(logits: nbx.Tensor, temperature: float, top_k, top_p, generator) -> list[int]:
    """pick's tokens as Python ints (one read back to the host for all rows)."""
    return [int(t) for t in pick(logits, temperature, top_k, top_p, generator).tolist()]
