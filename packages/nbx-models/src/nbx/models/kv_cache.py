"""The KV cache a decoder's forward appends to and attends over, for a batch of sequences.

`PagedCache`: nbx.memory's paged cache (blocks per layer, a block table per sequence): one
rotary_kv_cache_write (k's rope fused with the write) and one paged_attention per layer for the
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


def new_cache(layers: int, kv_heads: int, head_dim: int, capacities: list[int], dtype, device):
    paged = _paged_cache_class()
    if paged is None:
        return ContiguousCache(layers, kv_heads, head_dim, capacities, dtype, device)
    return PagedCache(paged, layers, kv_heads, head_dim, capacities, dtype, device)


class PagedCache:
    def __init__(self, paged, layers, kv_heads, head_dim, capacities, dtype, device):
        from nbx.memory.kv_cache import block_tokens_of
        block = CPU_BLOCK_TOKENS if nbx.as_device(device).type == "cpu" else block_tokens_of(device)
        blocks = sum(-(-c // block) for c in capacities)
        self.cache = paged(layers, kv_heads, head_dim, blocks, dtype=dtype, device=device, block_tokens=block)
        self.capacities = list(capacities)
        for seq in range(len(capacities)):
            self.cache.add(seq)
        self.device = nbx.as_device(device)

    @property
    def nbytes(self) -> int:
        return self.cache.nbytes

    def lengths(self, seqs) -> list[int]:
        return [self.cache.length(s) for s in seqs]

    def begin(self, seqs, counts) -> None:
        """Room for counts[i] more tokens of each sequence seqs[i] (the step's slots and batch)."""
        for s, n in zip(seqs, counts):
            if self.cache.length(s) + n > self.capacities[s]:
                raise nbx.ArgumentError(f"sequence {s} holds {self.capacities[s]} tokens; "
                                        f"{self.cache.length(s)} + {n} do not fit")
        import numpy as np
        slots = np.concatenate([self.cache.append(s, n) for s, n in zip(seqs, counts)])
        self.slots = nbx.asarray(slots, device=self.device)
        self.table, self.lens, self.longest = self.cache.batch(seqs)
        self.cu = nbx.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32), device=self.device)

    def attend(self, layer, q, k, v, cos, sin, positions, starts, counts, window):
        """Write k (roped here) and v, then q's attention over each sequence's cache: [tokens, Hq, D]."""
        self.cache.write_rotary(layer, k, v, cos, sin, positions, self.slots)
        return nbx.paged_attention(q, self.cache.k[layer], self.cache.v[layer], self.table, self.lens, self.cu,
                                   is_causal=True, window=window, max_seq_len=self.longest)

    def end(self) -> None:
        pass


class ContiguousCache:
    def __init__(self, layers, kv_heads, head_dim, capacities, dtype, device):
        self.keys = [[nbx.empty((kv_heads, c, head_dim), dtype=dtype, device=device) for _ in range(layers)]
                     for c in capacities]
        self.values = [[nbx.empty((kv_heads, c, head_dim), dtype=dtype, device=device) for _ in range(layers)]
                       for c in capacities]
        self.capacities = list(capacities)
        self.held = [0] * len(capacities)
        self.device = nbx.as_device(device)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for seq in self.keys + self.values for t in seq)

    def lengths(self, seqs) -> list[int]:
        return [self.held[s] for s in seqs]

    def begin(self, seqs, counts) -> None:
        for s, n in zip(seqs, counts):
            if self.held[s] + n > self.capacities[s]:
                raise nbx.ArgumentError(f"sequence {s} holds {self.capacities[s]} tokens; {self.held[s]} + {n} "
                                        "do not fit")
        self.step = list(zip(seqs, counts))

    def attend(self, layer, q, k, v, cos, sin, positions, starts, counts, window):
        k = nbx.rotary_embedding(k, cos, sin, positions)
        heads, kv_heads = q.shape[1], k.shape[1]
        out = nbx.empty(tuple(q.shape), dtype=q.dtype, device=self.device)
        for (s, n), a in zip(self.step, starts):
            end = self.held[s] + n
            self.keys[s][layer][:, self.held[s]:end] = k[a:a + n].permute(1, 0, 2)
            self.values[s][layer][:, self.held[s]:end] = v[a:a + n].permute(1, 0, 2)
            o = nbx.scaled_dot_product_attention(q[a:a + n].permute(1, 0, 2), self.keys[s][layer][:, :end],
                                                 self.values[s][layer][:, :end], is_causal=True,
                                                 enable_gqa=heads != kv_heads, causal_alignment="bottom_right",
                                                 window=window)
            out[a:a + n] = o.permute(1, 0, 2)
        return out

    def end(self) -> None:
        """Every layer has taken the step's tokens: they count from now on."""
        for s, n in self.step:
            self.held[s] += n
