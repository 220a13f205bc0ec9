"""The decode step as one captured graph (nbx.graph), from the token ids fed to the next ones.

Per token the host replays the step and reads the next ids back (one read of batch x 8 bytes,
needed to stop at an EOS id); nothing is uploaded, allocated or checked on the host. The step
holds its state in device tensors it updates itself:

- ids [batch] int64: the tokens fed. The step embeds them, runs every layer, the final norm, the
  lm_head and the argmax, and writes the argmax back into ids for the next replay.
- pos [batch] int64: their positions, advanced by one inside the step. The sequence lengths the
  attention reads (pos + 1) and the slots the new keys and values go to are computed from pos on
  the device: slot_of [batch, capacity] holds each position's slot, because the step reserves each
  sequence's whole capacity in the paged cache when its decode begins (the block table, as wide as
  the capacities need, then never changes).
- cu_seqlens_q (one query a sequence: 0, 1, ..., batch) and the block table: fixed per batch.

The attention's max_seq_len is the length's bucket (nbx.graph.length_bucket, the device file's
ladder): one step is captured per bucket (and per batch of rows: a sequence that ends leaves a
smaller batch, captured once more, its state written from the host once). A capture runs the step
once first (the warm-up that compiles and loads the kernels, which advances the state); where it
was a device graph, the state is written again from the host and the graph replayed. The rope
tables are built to the capacity before the first capture, so no step ever sees a new one.

Sampled decoding (temperature > 0) replays a step that stops at the logits: nbx.sample's Philox
offset is a host value a graph would replay frozen, so the draw runs after the replay (no read:
its tokens are copied into ids on the device) and the one read is of the drawn tokens.

Used where nbx.graph and nbx.memory's paged cache are present on a device other than the cpu
(whose front-ends check positions on the host, which a step may not do): on cuda the steps are
CUDA graphs; on interp nbx.graph runs the same function eagerly, so a test there sees the host's
per-token work as it is on a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import nbx.core as nbx
from nbx.core import deferred_checks

from .kv_cache import PagedCache, PagedStep


def available(cache) -> bool:
    return isinstance(cache, PagedCache) and hasattr(nbx, "graph") and cache.device.type != "cpu"


@dataclass
class _Rows:
    """The device state of a batch of rows (sequence ids) decoding together, and its host mirror."""
    seqs: tuple[int, ...]
    ids: nbx.Tensor          # int64 [batch]: the tokens the next replay feeds
    pos: nbx.Tensor          # int64 [batch]: their positions
    slot_of: nbx.Tensor      # int32 [batch, capacity]: each decoded position's slot in the cache (-1 before
    #                          the decode's start, which no step reads, and past a capacity)
    table: nbx.Tensor        # int32 [batch, blocks]
    cu: nbx.Tensor           # int32 [batch + 1]
    positions: list[int]     # pos, on the host
    fed: list[int]           # ids, on the host
    bucket: int | None = None   # the current length bucket (lengths only grow: looked up when one passes it)


class GraphDecode:
    def __init__(self, decoder, cache: PagedCache):
        self.decoder, self.cache = decoder, cache
        self.capacity = max(cache.capacities)
        decoder._ensure_rope(self.capacity)
        self._rows: dict[tuple, _Rows] = {}    # kept across generations: the captured steps read these tensors
        self._steps: dict[tuple, object] = {}  # (seqs, bucket, greedy) -> nbx.graph Step
        self._current: _Rows | None = None
        self._lengths: dict[int, int] = {}     # a sequence's true length once its capacity is reserved
        self._slots: dict[int, np.ndarray] = {}   # its slots from there (append's), -1 before and past its capacity
        self._last_greedy = True

    def reset(self) -> None:
        """The cache was emptied: the next generation reserves and writes its rows again."""
        self._lengths.clear()
        self._slots.clear()
        self._current = None

    def begin(self, seqs: list[int], tokens: list[int]) -> None:
        """Rows seqs decode from here, fed tokens (their last picked ids): the state written once."""
        cache = self.cache.cache
        for s in seqs:
            if s not in self._lengths:   # the whole capacity reserved now: slots known ahead, as append gives them
                length = self._lengths[s] = cache.length(s)
                self._slots[s] = np.full(self.capacity, -1, dtype=np.int32)
                self._slots[s][length:self.cache.capacities[s]] = cache.append(s, self.cache.capacities[s] - length)
        key = tuple(seqs)
        rows = self._rows.get(key)
        device = self.decoder.device
        table = self.cache.step_arrays(seqs, [0] * len(seqs))[0]
        cu = np.arange(len(seqs) + 1, dtype=np.int32)   # one query a sequence
        slot_of = np.stack([self._slots[s] for s in seqs])
        positions = [self._lengths[s] for s in seqs]
        if rows is None:
            rows = _Rows(key, nbx.empty((len(seqs),), dtype=nbx.int64, device=device),
                         nbx.empty((len(seqs),), dtype=nbx.int64, device=device),
                         nbx.asarray(slot_of, device=device), nbx.asarray(table, device=device),
                         nbx.asarray(cu, device=device), positions, list(tokens))
            self._rows[key] = rows
        else:
            rows.slot_of[...] = nbx.asarray(slot_of, device=device)
            rows.table[...] = nbx.asarray(table, device=device)
        rows.positions, rows.fed, rows.bucket = positions, list(tokens), None
        self._write(rows)
        self._current = rows

    def _write(self, rows: _Rows) -> None:
        """The state from its host mirror (uploads: at a batch's first step and after a capture only)."""
        device = self.decoder.device
        rows.ids[...] = nbx.asarray(np.asarray(rows.fed, dtype=np.int64), device=device)
        rows.pos[...] = nbx.asarray(np.asarray(rows.positions, dtype=np.int64), device=device)

    def _fn(self, rows: _Rows, bucket: int, greedy: bool):
        d = self.decoder
        slots = nbx.take_along_axis(rows.slot_of, rows.pos.reshape(-1, 1), axis=1).reshape(-1)
        lens = (rows.pos + 1).to(dtype=nbx.int32)
        step = PagedStep(self.cache.cache, slots, rows.table, lens, rows.cu, bucket, 1)   # one query a sequence
        logits = d.head(d.layers_forward(d.embed_rows(rows.ids), rows.pos, step, len(rows.seqs)))
        rows.pos[...] = rows.pos + 1
        if not greedy:
            return logits
        tokens = nbx.argmax(logits, dim=-1)
        rows.ids[...] = tokens
        return tokens

    def next_tokens(self, draw=None) -> list[int]:
        """The next token of each row: one replay, one read. draw(logits) -> int64 tokens on the
        device: a sampled step (the draw runs after the replay); None: greedy, all inside it."""
        rows = self._current
        longest = max(rows.positions) + 1
        if rows.bucket is None or longest > rows.bucket:
            rows.bucket = nbx.graph.length_bucket(longest, self.decoder.device, self.capacity)
        bucket = rows.bucket
        greedy = self._last_greedy = draw is None
        key = (rows.seqs, bucket, greedy)
        step = self._steps.get(key)
        if step is None:
            step = nbx.graph.capture(lambda: self._fn(rows, bucket, greedy), device=self.decoder.device)
            self._steps[key] = step
            if step.captured:   # the warm-up advanced the state; the graph has not run yet
                self._write(rows)
                out = step.replay()
            else:               # the eager run was this step
                out = step.outputs
        else:
            out = step.replay()
        if draw is not None:
            out = draw(out)
            rows.ids[...] = out
        with deferred_checks.postponed():   # the step flag is read once, after the generation (check())
            tokens = [int(t) for t in out.tolist()]
        rows.positions, rows.fed = [p + 1 for p in rows.positions], tokens
        for s in rows.seqs:
            self._lengths[s] += 1
        return tokens

    def step_kernels(self) -> tuple[int | None, int, tuple[str, ...]]:
        """What the step replayed last launches a token: (its graph's nodes, launches and copies, as
        the driver counts them (None where steps run eagerly); the launches its ops declare; the ops
        it calls, in order)."""
        step = self._steps[(self._current.seqs, self._current.bucket, self._last_greedy)]
        memory = step.memory
        return step.nodes, memory.declared.launches, memory.calls

    def check(self) -> None:
        """Read the bounds flag the steps' indexing ops raise (one read a generation)."""
        deferred_checks.check(self.decoder.device)

    @property
    def reserved(self) -> int:
        """Bytes the captured steps' private pools hold (outside the device allocator's figures)."""
        return sum(step.reserved for step in self._steps.values())

    def close(self) -> None:
        for step in self._steps.values():
            step.close()
        self._steps.clear()
