"""The paged KV cache: fixed-size blocks of K and V per layer, a block table per sequence, append,
free and reuse, fork with copy on write. It lives in nbx.memory, not in the kernels: it is memory
bookkeeping (which block holds which tokens, who shares it) that models drive, and nbx.models may
import nbx.memory but no kernel package; its reads and writes go through nbx.core's front-ends
(`paged_attention`, `kv_cache_write`, `rotary_kv_cache_write`), which each backend implements.

Each layer holds k (num_blocks, block_tokens, kv_heads, head_dim) and v (..., v_head_dim). The block
size is the device file's `tiles.kv_cache.block_tokens` unless given (a cpu device has no file: give
it). Blocks are reference counted: `fork` shares every block of a sequence; a later append into a
shared block that is not full first copies it (every layer's K and V rows, copy on write), so
neither sequence sees the other's new tokens. A block whose count falls to 0 returns to the free
list, lowest ids first out, so a freed sequence's blocks are the next ones used.

`slab_events()` lists the cache's allocations for nbx.memory.slab (they live to the end: a plan
places them once), `nbytes` is their sum; `bytes_for` and `blocks_for` size a cache before it exists.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from nbx.core import device_files, dtypes
from nbx.core.device import as_device
from nbx.core.errors import ArgumentError, IndexingError, OutOfMemoryError
from nbx.core.ops.creation import asarray, zeros

ALIGNMENT = 256  # the pool's block alignment (docs/memory.md): each layer's K and V are one allocation


@dataclass
class Sequence:
    blocks: list = field(default_factory=list)
    length: int = 0


def block_tokens_of(device) -> int:
    """The device file's tiles.kv_cache.block_tokens (a device without a file is refused by name)."""
    return int(device_files.in_force(as_device(device)).value("tiles.kv_cache")["block_tokens"])


def bytes_for(layers: int, kv_heads: int, head_dim: int, num_blocks: int, block_tokens: int, dtype,
              v_head_dim: int | None = None) -> int:
    """The bytes of a cache of these sizes (every layer's K and V)."""
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    item = dtypes.as_dtype(dtype).itemsize
    return layers * num_blocks * block_tokens * kv_heads * (head_dim + v_head_dim) * item


def blocks_for(budget_bytes: int, layers: int, kv_heads: int, head_dim: int, block_tokens: int, dtype,
               v_head_dim: int | None = None) -> int:
    """The most blocks a cache may have within budget_bytes."""
    return budget_bytes // bytes_for(layers, kv_heads, head_dim, 1, block_tokens, dtype, v_head_dim)


class PagedKVCache:
    """Blocks of K and V for `layers` layers, and the sequences that own them."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, num_blocks: int, dtype=None, device=None,
                 v_head_dim: int | None = None, block_tokens: int | None = None):
        if min(layers, kv_heads, head_dim, num_blocks) < 1:
            raise ArgumentError(f"a KV cache needs at least one layer, head, dim and block; got layers {layers}, "
                                f"kv_heads {kv_heads}, head_dim {head_dim}, num_blocks {num_blocks}")
        self.device = as_device(device if device is not None else "cpu")
        self.dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.float32
        self.block_tokens = block_tokens_of(self.device) if block_tokens is None else int(block_tokens)
        self.layers, self.kv_heads, self.head_dim, self.num_blocks = layers, kv_heads, head_dim, num_blocks
        self.v_head_dim = head_dim if v_head_dim is None else v_head_dim
        shape = (num_blocks, self.block_tokens, kv_heads)
        self.k = [zeros((*shape, head_dim), dtype=self.dtype, device=self.device) for _ in range(layers)]
        self.v = [zeros((*shape, self.v_head_dim), dtype=self.dtype, device=self.device) for _ in range(layers)]
        self.refs = np.zeros(num_blocks, dtype=np.int64)
        self._free = list(range(num_blocks))  # a heap: the lowest free id first
        self.sequences: dict = {}
        self._changes = 0         # moves on every append, fork and free: batch() is kept until then
        self._batch = None        # (seq_ids, changes, its tensors)

    # ---- sizes ---------------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        return bytes_for(self.layers, self.kv_heads, self.head_dim, self.num_blocks, self.block_tokens, self.dtype,
                         self.v_head_dim)

    def slab_events(self, prefix="kv") -> list:
        """("alloc", id, bytes, alignment) of every layer's K and V, for nbx.memory.slab's planners."""
        return [("alloc", (prefix, layer, part), t.nbytes, ALIGNMENT)
                for layer in range(self.layers) for part, t in (("k", self.k[layer]), ("v", self.v[layer]))]

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    # ---- sequences ---------------------------------------------------------------------------------
    def add(self, seq_id) -> None:
        if seq_id in self.sequences:
            raise ArgumentError(f"sequence {seq_id!r} is already in the cache")
        self.sequences[seq_id] = Sequence()

    def _sequence(self, seq_id) -> Sequence:
        try:
            return self.sequences[seq_id]
        except KeyError:
            raise IndexingError(f"sequence {seq_id!r} is not in the cache (add it first)") from None

    def _take(self) -> int:
        if not self._free:
            raise OutOfMemoryError(f"the KV cache's {self.num_blocks} blocks of {self.block_tokens} tokens are all "
                                   f"in use: free a sequence or build a larger cache",
                                   requested=self.nbytes // self.num_blocks, live=self.nbytes, free=0,
                                   total=self.nbytes, device=self.device)
        block = heapq.heappop(self._free)
        self.refs[block] = 1
        return block

    def _release(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            heapq.heappush(self._free, block)

    def append(self, seq_id, count: int) -> np.ndarray:
        """Room for count more tokens of seq_id: the slots (int32, block * block_tokens + row) they
        are written to. A shared block that is not full is copied first (copy on write)."""
        seq = self._sequence(seq_id)
        bt = self.block_tokens
        copies = 1 if count and self._shared_tail(seq) else 0
        needed = -(-(seq.length + count) // bt) - len(seq.blocks) + copies
        if needed > len(self._free):  # refused before anything changes
            raise OutOfMemoryError(f"sequence {seq_id!r} needs {needed} more blocks, {len(self._free)} are free",
                                   requested=needed * self.nbytes // self.num_blocks, free=len(self._free),
                                   total=self.nbytes, device=self.device)
        if copies:
            self._copy_tail(seq)
        while len(seq.blocks) * bt < seq.length + count:
            seq.blocks.append(self._take())
        j = np.arange(seq.length, seq.length + count)
        seq.length += count
        self._changes += 1
        return (np.asarray(seq.blocks, dtype=np.int64)[j // bt] * bt + j % bt).astype(np.int32)

    def _shared_tail(self, seq: Sequence) -> bool:
        return bool(seq.blocks) and seq.length % self.block_tokens != 0 and self.refs[seq.blocks[-1]] > 1

    def _copy_tail(self, seq: Sequence) -> None:
        old = seq.blocks[-1]
        new = self._take()
        for layer in range(self.layers):
            self.k[layer][new] = self.k[layer][old]
            self.v[layer][new] = self.v[layer][old]
        self._release(old)
        seq.blocks[-1] = new

    def fork(self, src, dst) -> None:
        """dst starts as src: every block shared (its count raised), the same length."""
        parent = self._sequence(src)
        self.add(dst)
        self.sequences[dst] = Sequence(list(parent.blocks), parent.length)
        for block in parent.blocks:
            self.refs[block] += 1
        self._changes += 1

    def free(self, seq_id) -> None:
        """seq_id leaves the cache; blocks no other sequence shares return to the free list."""
        for block in self._sequence(seq_id).blocks:
            self._release(block)
        del self.sequences[seq_id]
        self._changes += 1

    def length(self, seq_id) -> int:
        return self._sequence(seq_id).length

    # ---- what the kernels take ---------------------------------------------------------------------
    def block_table(self, seq_ids) -> np.ndarray:
        """(batch, max_blocks) int32 on the host, 0 past a sequence's blocks (never read)."""
        seqs = [self._sequence(s) for s in seq_ids]
        table = np.zeros((len(seqs), max([len(s.blocks) for s in seqs] + [1])), dtype=np.int32)
        for b, s in enumerate(seqs):
            table[b, :len(s.blocks)] = s.blocks
        if table.size and (table.min() < 0 or table.max() >= self.num_blocks):
            raise IndexingError(f"a block table points past the cache's {self.num_blocks} blocks")
        return table

    def batch(self, seq_ids) -> tuple:
        """(block_table, seq_lens, max_seq_len) for paged_attention over seq_ids, on the cache's device.
        Kept until the next append, fork or free: every layer of a decode step shares one upload."""
        ids = tuple(seq_ids)
        if self._batch is not None and self._batch[0] == ids and self._batch[1] == self._changes:
            return self._batch[2]
        table = self.block_table(ids)
        lens = np.asarray([self._sequence(s).length for s in ids], dtype=np.int32)
        found = (asarray(table, device=self.device), asarray(lens, device=self.device),
                 int(lens.max()) if lens.size else 0)
        self._batch = (ids, self._changes, found)
        return found

    def write(self, layer: int, k, v, slots) -> None:
        """k, v (tokens, kv_heads, dim) into layer's rows slots (from append)."""
        from nbx.core import kv_cache_write
        kv_cache_write(k, v, self.k[layer], self.v[layer], self._slots(slots))

    def write_rotary(self, layer: int, k, v, cos, sin, positions, slots, interleaved: bool = False) -> None:
        """rotary_embedding(k) and v into layer's rows slots, in one pass."""
        from nbx.core import rotary_kv_cache_write
        rotary_kv_cache_write(k, v, cos, sin, positions, self.k[layer], self.v[layer], self._slots(slots),
                              interleaved)

    def _slots(self, slots):
        return asarray(np.asarray(slots, dtype=np.int32), device=self.device) if isinstance(slots, np.ndarray) else slots

    def attend(self, layer: int, q, seq_ids, cu_seqlens_q=None, **options):
        """paged_attention of q over layer's cache for seq_ids (their tokens written first)."""
        from nbx.core import paged_attention
        table, lens, longest = self.batch(seq_ids)
        return paged_attention(q, self.k[layer], self.v[layer], table, lens, cu_seqlens_q, max_seq_len=longest,
                               **options)


__all__ = ["PagedKVCache", "bytes_for", "blocks_for", "block_tokens_of", "ALIGNMENT"]
