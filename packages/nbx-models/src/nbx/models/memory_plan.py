"""What a generation holds on its device, priced from the model's sizes before it runs.

    plan = model.memory_plan([512], max_new_tokens=256)     # GenerationMemory
    plan.total, plan.line()

The price is the sum of what lives through the whole generation and the largest live set of one
forward:
- weights: the storages the loaded model holds (each once: a tied lm_head is the embedding's);
- the KV cache as kv_cache.new_cache lays it out for these capacities (paged blocks, or contiguous);
- the rope tables, built to the capacity before the prefill (decoder._ensure_rope's rule);
- activations: the largest set of temporaries alive at once in the prefill or in a decode step.
  decoder.py keeps each temporary to the function that makes it (the attention's and the MLP's
  own methods), so the largest set is one layer's: the residual, its norm, q/k/v (a view of one
  product), the roped q (and Qwen3's normed k), the attention's output and the next residual; or
  the MLP's residual, norm, the gated product (gate, up and their product where the pair runs as
  two products: biases, int4) and the next residual. Plus the step's index tensors; or the lm_head's
  rows and logits (a step's logits are dropped once its tokens are picked).
Bytes are the bytes asked (nbx.memory's pool reports its peak of requested bytes, unrounded).

Not priced: kernels' launch workspaces (split-K partials of decode rows, the paged attention's
split partials: kilobytes to a few MiB at batch 1), sampling's workspaces (greedy is priced), the
captured decode steps' private pools (nbx.graph: outside the allocator's figures, reported apart)
and their state (ids, positions, cu_seqlens, the block and slot tables: batch x capacity int32),
the autotune screens a first run makes, and mixture-of-experts layers (refused by name).
"""
from __future__ import annotations

from dataclasses import dataclass

import nbx.core as nbx

from .kv_cache import planned_nbytes

INDEX_BYTES = 8   # token ids and positions are int64; slots, tables and lengths int32


@dataclass(frozen=True)
class GenerationMemory:
    weights: int
    kv_cache: int
    rope_tables: int
    prefill: int       # the prefill forward's largest live set of temporaries
    decode_step: int   # a decode step's (eager; a captured step's lives in its graph's private pool)

    @property
    def activations(self) -> int:
        return max(self.prefill, self.decode_step)

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.rope_tables + self.activations

    def line(self) -> str:
        mib = 2 ** 20
        return (f"priced {self.total / mib:,.1f} MiB: weights {self.weights / mib:,.1f}, KV cache "
                f"{self.kv_cache / mib:,.1f}, rope tables {self.rope_tables / mib:,.2f}, activations "
                f"{self.activations / mib:,.2f} (prefill {self.prefill / mib:,.2f}, decode step "
                f"{self.decode_step / mib:,.2f})")


def weight_bytes(decoder) -> int:
    """The bytes of every storage the model's weights hold, each storage once."""
    seen: dict[int, int] = {}

    def add(value) -> None:
        if isinstance(value, nbx.QuantizedTensor):
            for part in (value.qweight, value.scales, value.zeros):
                add(part)
        elif isinstance(value, nbx.Tensor):
            seen[id(value.storage)] = value.storage.nbytes
        elif isinstance(value, (tuple, list)):
            for item in value:
                add(item)
        elif hasattr(value, "__dataclass_fields__"):
            for name in value.__dataclass_fields__:
                add(getattr(value, name))

    add([decoder.embed, decoder.norm, decoder.lm_head, decoder.layers])
    return sum(seen.values())


def _layer_live(decoder, layer, tokens: int, contiguous: bool) -> int:
    """Elements' bytes alive at once at the worst point of one layer over `tokens` rows."""
    s = decoder.shapes
    item = decoder.dtype.itemsize
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    attention = 3 * s.hidden + (q + 2 * kv) + 2 * q   # x, h, x_new; qkv; roped q, attention out
    if layer.q_norm is not None:
        attention += kv                                 # k normed per head (q's normed copy is gone by then)
    if contiguous:
        attention += kv                                 # k roped apart (the paged cache ropes it in its write)
    if layer.sparse is not None:
        raise nbx.NotSupportedError("memory_plan prices dense MLPs; a mixture-of-experts layer's temporaries "
                                    "(routing, the experts' rows) are not priced yet")
    if decoder.mlp_fused(layer):
        mlp = 3 * s.hidden + s.intermediate              # x, h, x_new; the gated product
    else:
        mlp = max(2 * s.hidden + 3 * s.intermediate, 3 * s.hidden + s.intermediate)  # gate, up, product
    return tokens * max(attention, mlp) * item


def _forward_live(decoder, tokens: int, batch: int, table: int, contiguous: bool) -> int:
    """One forward of `tokens` rows of `batch` sequences: its index tensors (table: the block
    table's entries), its worst layer, and the lm_head of the last rows."""
    s = decoder.shapes
    item = decoder.dtype.itemsize
    indices = 2 * tokens * INDEX_BYTES                       # token ids, positions
    if not contiguous:
        indices += 4 * (tokens + table + batch + (batch + 1 if tokens > batch else 0))  # slots, table, lens, cu
    layers = max(_layer_live(decoder, layer, tokens, contiguous) for layer in decoder.layers)
    # the lm_head: x, whose last rows it reads (views; joined by a concat for several sequences), their
    # norm and the logits
    joined = batch * s.hidden if batch > 1 else 0
    head = item * (tokens * s.hidden + joined + batch * s.hidden + batch * decoder.vocab)
    return indices + max(layers, head)


def price(decoder, prompt_lengths: list[int], max_new_tokens: int) -> GenerationMemory:
    capacities = [n + max_new_tokens for n in prompt_lengths]
    s = decoder.shapes
    kv, block = planned_nbytes(s.layers, s.kv_heads, s.head_dim, capacities, decoder.dtype, decoder.device)
    contiguous = block is None
    table = 0 if contiguous else len(capacities) * max(-(-c // block) for c in capacities)
    inv_freq, _ = nbx.rope_frequencies(decoder.config)
    rope = 2 * decoder.rope_rows(max(capacities)) * 2 * len(inv_freq) * 4   # cos and sin, float32
    batch = len(prompt_lengths)
    prefill = _forward_live(decoder, sum(prompt_lengths), batch, table, contiguous)
    decode = _forward_live(decoder, batch, batch, table, contiguous) if max_new_tokens > 1 else 0
    return GenerationMemory(weight_bytes(decoder), kv, rope, prefill, decode)
