"""The key/value cache of one sequence being decoded: per layer, K and V of [kv_heads, capacity,
head_dim], filled from the front as tokens arrive (prefill writes many rows, each decode step one).

Contiguous per sequence until the paged cache of issue 19 is on main; its interface (append a
layer's new rows, get the rows so far) is what the decoder uses, so the paged one replaces it here.
"""
from __future__ import annotations

import nbx.core as nbx


class KVCache:
    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int, dtype, device):
        shape = (kv_heads, capacity, head_dim)
        self.keys = [nbx.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [nbx.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.capacity = capacity
        self.length = 0          # tokens every layer holds
        self.pending = 0         # tokens of the step in flight (appended to some layers already)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.keys + self.values)

    def append(self, layer: int, k: nbx.Tensor, v: nbx.Tensor) -> tuple[nbx.Tensor, nbx.Tensor]:
        """Write k, v ([tokens, kv_heads, head_dim]) after the rows held; the layer's K and V so far,
        each [kv_heads, length + tokens, head_dim] (views of the cache, no copy)."""
        n = k.shape[0]
        end = self.length + n
        if end > self.capacity:
            raise nbx.ArgumentError(f"the KV cache holds {self.capacity} tokens; {self.length} + {n} do not fit")
        self.pending = n
        self.keys[layer][:, self.length:end] = k.permute(1, 0, 2)
        self.values[layer][:, self.length:end] = v.permute(1, 0, 2)
        return self.keys[layer][:, :end], self.values[layer][:, :end]

    def commit(self) -> None:
        """Every layer has taken the step's tokens: they count from now on."""
        self.length += self.pending
        self.pending = 0
