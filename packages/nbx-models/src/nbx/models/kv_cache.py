"""The KV cache a decoder's forward appends to and attends over, for a batch of sequences.

`PagedCache`: nbx.memory's paged cache (blocks per layer, a block table per sequence): one
rotary_kv_cache_write (q and k roped in the write's launch) and one paged_attention per layer for the
whole batch, prefill and decode alike (queries packed with cu_seqlens_q).

`ContiguousCache`: [kv_heads, capacity, head_dim] per sequence and layer, written through views,
attention per sequence. It serves where nbx.memory's paged cache is not installed or not built yet
(nbx-models depends on nbx-core alone); `new_cache` picks the paged one whenever it can.
"""
from __future__ import annotations

import nbx.core as nbx

CPU_BLOCK_TOKENS = 16  # the cpu has no device file; its blocks are only bookkeeping, any size gives the same results


def _paged_cache_class():
    try:
        from nbx.memory.kv_cache import PagedKVCache
    except ImportError:
        return None
    return PagedKVCache if hasattr(nbx, "paged_attention") and hasattr(nbx, "rotary_kv_cache_write") else None


def new_cache(layers: int, kv_heads: int, head_dim: int, capacities: list[int], dtype, device,
              v_head_dim: int | None = None):
    """v_head_dim: the values' head dim where it is not the keys' (DeepSeek's MLA: k 192, v 128)."""
    paged = _paged_cache_class()
    if paged is None:
        return ContiguousCache(layers, kv_heads, head_dim, capacities, dtype, device, v_head_dim)
    return PagedCache(paged, layers, kv_heads, head_dim, capacities, dtype, device, v_head_dim)


def _block_tokens(device) -> int:
    from nbx.memory.kv_cache import block_tokens_of
    return CPU_BLOCK_TOKENS if nbx.as_device(device).type == "cpu" else block_tokens_of(device)


def planned_nbytes(layers: int, kv_heads: int, head_dim: int, capacities: list[int], dtype, device):
    """(bytes, block_tokens) of the cache new_cache would build for these capacities, before it is
    built; block_tokens None: the contiguous cache (no block table)."""
    item = nbx.as_dtype(dtype).itemsize
    if _paged_cache_class() is None:
        return 2 * layers * kv_heads * head_dim * sum(capacities) * item, None
    from nbx.memory.kv_cache import bytes_for
    block = _block_tokens(device)
    return bytes_for(layers, kv_heads, head_dim, sum(-(-c // block) for c in capacities), block, dtype), block


class PagedCache:
    def __init__(self, paged, layers, kv_heads, head_dim, capacities, dtype, device, v_head_dim=None):
        block = _block_tokens(device)
        blocks = sum(-(-c // block) for c in capacities)
        self.cache = paged(layers, kv_heads, head_dim, blocks, dtype=dtype, device=device, block_tokens=block,
                           v_head_dim=v_head_dim)
        self.capacities = list(capacities)
        for seq in range(len(capacities)):
            self.cache.add(seq)
        self.device = nbx.as_device(device)

    @property
    def nbytes(self) -> int:
        return self.cache.nbytes

    def lengths(self, seqs) -> list[int]:
        return [self.cache.length(s) for s in seqs]

    def reset(self) -> None:
        """Every sequence empty again (its blocks back to the free list, lowest ids first out)."""
        for seq in range(len(self.capacities)):
            self.cache.free(seq)
            self.cache.add(seq)

    def begin(self, seqs, counts) -> "PagedStep":
        """Room for counts[i] more tokens of each sequence seqs[i]: the step's slots and batch."""
        import numpy as np
        table, slots, lens, cu = self.step_arrays(seqs, counts)
        d = self.device
        return PagedStep(self.cache, nbx.asarray(slots, device=d), nbx.asarray(table, device=d),
                         nbx.asarray(lens, device=d), nbx.asarray(cu, device=d), int(np.max(lens)), max(counts))

    def step_arrays(self, seqs, counts):
        """(block_table, slots, seq_lens, cu_seqlens_q) on the host for a step of counts[i] tokens of
        seqs[i], the room taken. The table is as wide as the largest capacity needs, whatever the
        lengths so far, so a captured decode step keeps its shapes while sequences grow."""
        import numpy as np
        for s, n in zip(seqs, counts):
            if self.cache.length(s) + n > self.capacities[s]:
                raise nbx.ArgumentError(f"sequence {s} holds {self.capacities[s]} tokens; "
                                        f"{self.cache.length(s)} + {n} do not fit")
        slots = np.concatenate([self.cache.append(s, n) for s, n in zip(seqs, counts)])
        width = max(-(-c // self.cache.block_tokens) for c in self.capacities)
        held = self.cache.block_table(seqs)
        table = np.zeros((len(seqs), width), dtype=np.int32)
        table[:, :held.shape[1]] = held
        lens = np.asarray(self.lengths(seqs), dtype=np.int32)
        cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        return table, slots, lens, cu

    def end(self) -> None:
        pass


class PagedStep:
    """What one step's attention reads of a paged cache: device tensors (static inputs when the
    step is a captured graph) and the bound on the lengths. Queries are packed, [tokens, heads,
    dim] with cu_seqlens_q, in prefill and decode alike (paged_attention sizes its launch from
    max_seq_len and the shapes, reading nothing back, so a captured step holds it)."""

    def __init__(self, cache, slots, table, lens, cu, max_seq_len: int, max_q_len: int):
        self.cache, self.slots, self.table, self.lens, self.cu = cache, slots, table, lens, cu
        self.max_q_len = max_q_len   # the most queries of one sequence: sizes the launch, never read back
        self.max_seq_len = max_seq_len

    def attend(self, layer, q, k, v, cos, sin, positions, window, scale=None):
        """Rope q and k and write k and v (one launch), then q's attention over each sequence's
        cache: [tokens, Hq, Dv]. scale None: 1/sqrt(head_dim)."""
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        q = nbx.rotary_kv_cache_write(k, v, cos, sin, positions, kc, vc, self.slots, q=q)
        return nbx.paged_attention(q, kc, vc, self.table, self.lens, self.cu, is_causal=True, window=window,
                                   scale=scale, max_seq_len=self.max_seq_len, max_q_len=self.max_q_len)


class ContiguousCache:
    def __init__(self, layers, kv_heads, head_dim, capacities, dtype, device, v_head_dim=None):
        v_dim = head_dim if v_head_dim is None else v_head_dim
        self.keys = [[nbx.empty((kv_heads, c, head_dim), dtype=dtype, device=device) for _ in range(layers)]
                     for c in capacities]
        self.values = [[nbx.empty((kv_heads, c, v_dim), dtype=dtype, device=device) for _ in range(layers)]
                       for c in capacities]
        self.capacities = list(capacities)
        self.held = [0] * len(capacities)
        self.device = nbx.as_device(device)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for seq in self.keys + self.values for t in seq)

    def lengths(self, seqs) -> list[int]:
        return [self.held[s] for s in seqs]

    def reset(self) -> None:
        self.held = [0] * len(self.capacities)

    def begin(self, seqs, counts) -> "ContiguousCache":
        for s, n in zip(seqs, counts):
            if self.held[s] + n > self.capacities[s]:
                raise nbx.ArgumentError(f"sequence {s} holds {self.capacities[s]} tokens; {self.held[s]} + {n} "
                                        "do not fit")
        self.step = list(zip(seqs, counts))
        self.starts = [sum(counts[:i]) for i in range(len(counts))]
        return self

    def attend(self, layer, q, k, v, cos, sin, positions, window, scale=None):
        """Rope q and k, write k and v to each sequence's cache, then q's attention over it."""
        q = nbx.rotary_embedding(q, cos, sin, positions)
        k = nbx.rotary_embedding(k, cos, sin, positions)
        heads, kv_heads = q.shape[1], k.shape[1]
        out = nbx.empty((*q.shape[:2], v.shape[2]), dtype=q.dtype, device=self.device)
        for (s, n), a in zip(self.step, self.starts):
            end = self.held[s] + n
            self.keys[s][layer][:, self.held[s]:end] = k[a:a + n].permute(1, 0, 2)
            self.values[s][layer][:, self.held[s]:end] = v[a:a + n].permute(1, 0, 2)
            o = nbx.scaled_dot_product_attention(q[a:a + n].permute(1, 0, 2), self.keys[s][layer][:, :end],
                                                 self.values[s][layer][:, :end], is_causal=True,
                                                 scale=scale, enable_gqa=heads != kv_heads,
                                                 causal_alignment="bottom_right", window=window)
            out[a:a + n] = o.permute(1, 0, 2)
        return out

    def end(self) -> None:
        """Every layer has taken the step's tokens: they count from now on."""
        for s, n in self.step:
            self.held[s] += n
