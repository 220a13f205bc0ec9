"""The decode step as a captured graph (nbx.graph): every layer of one token per sequence, replayed
for the cost of a launch on GPUs.

What changes from step to step reaches the graph as static input tensors written before each
replay: the new tokens' embedding rows (looked up in front of the replay: a GPU take reads its
bounds flag back, which a capture cannot hold), their positions, the cache slots they are written
to, the block table (as wide as the capacities need from the start), the sequence lengths and the
queries' cu_seqlens (one query a sequence: 0, 1, ..., batch). The
cache's bookkeeping (which block, which slot) stays on the host, in front of the replay; the rope
tables are built to the capacity before the capture, so the graph never sees a new one. The
attention's max_seq_len is the length's bucket (nbx.graph captures once per bucket of the device
file's ladder). A batch whose size changes (a sequence ended) is a new key: captured once more.

Used where nbx.graph, nbx.memory's paged cache and a stream capture for the device (cuda) are all
present; elsewhere the eager forward decodes (on cpu and interp nbx.graph would only run the
function eagerly, and the front-ends' host-side checks there, a position or block table read, are
what a step may not do).
"""
from __future__ import annotations

import nbx.core as nbx

from .kv_cache import PagedCache, PagedStep


def available(cache) -> bool:
    if not isinstance(cache, PagedCache) or not hasattr(nbx, "graph"):
        return False
    try:
        from nbx.memory import graphs
        graphs.capture_support(cache.device.type)
    except (ImportError, nbx.NotSupportedError):
        return False
    return True


class GraphDecode:
    def __init__(self, decoder, cache: PagedCache):
        self.decoder, self.cache = decoder, cache
        self.capacity = max(cache.capacities)
        decoder._ensure_rope(self.capacity)
        self.step = None

    def _fn(self, x, pos, slots, table, lens, cu, length):
        d = self.decoder
        step = PagedStep(self.cache.cache, slots, table, lens, cu, length.bucket, 1)   # one query a sequence
        return d.head(d.layers_forward(x, pos, step, x.shape[0]))

    def __call__(self, tokens: list[int], seqs: list[int]) -> nbx.Tensor:
        """Logits [len(seqs), vocab] of one new token per sequence (the replay's output: read it
        before the next call, which overwrites it)."""
        import numpy as np
        positions = self.cache.lengths(seqs)
        table, slots, lens, cu = self.cache.step_arrays(seqs, [1] * len(seqs))
        device = self.decoder.device
        ids = nbx.asarray(np.asarray(tokens, dtype=np.int64), device=device)
        inputs = [self.decoder.embed_rows(ids),
                  nbx.asarray(np.asarray(positions, dtype=np.int64), device=device),
                  nbx.asarray(slots, device=device), nbx.asarray(table, device=device),
                  nbx.asarray(lens, device=device), nbx.asarray(cu, device=device)]
        longest = int(lens.max())
        if self.step is None:
            # the capture runs fn on these inputs first; a replay then gives this step's outputs
            # (writing the same rows into the same slots again)
            self.step = nbx.graph.capture(self._fn, *inputs, length=longest, max_length=self.capacity,
                                          device=device)
            return self.step.replay(length=longest)
        return self.step(*inputs, length=longest)

    @property
    def reserved(self) -> int:
        """Bytes the captured steps' private pools hold (outside the device allocator's figures)."""
        return 0 if self.step is None else self.step.reserved

    def close(self) -> None:
        if self.step is not None:
            self.step.close()
