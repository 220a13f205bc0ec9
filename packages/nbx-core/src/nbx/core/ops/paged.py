"""Attention over a paged KV cache and the writes into it: `paged_attention`, `kv_cache_write` and
the fused `rotary_kv_cache_write`, with their numpy references. `nbx.memory.kv_cache` keeps the
blocks, tables and lengths these take (docs/attention.md).

A layer's cache is k_cache (num_blocks, block_tokens, Hk, E) and v_cache (num_blocks, block_tokens,
Hk, Ev). Token j of sequence b lives in row j % block_tokens of block block_table[b, j //
block_tokens]; a slot is that row counted over the whole cache, block * block_tokens + row. A
sequence's queries are its last tokens, so alignment is bottom-right: query t of a sequence of q_len
queries and seq_len cached tokens sits at position seq_len - q_len + t (its own key, written first).

Values in the table, the lengths and the slots are checked on host-memory devices (cpu, interp
outside captured steps); on a GPU that would wait for the device, so the kernels instead skip slots outside the cache
(-1 marks a padding token, as in vLLM) and read no block past a sequence's length; nbx.memory's
cache checks its own tables when it builds them.
"""
from __future__ import annotations

import math

import numpy as np

from .. import reference
from ..dispatch import implementation, register
from ..errors import DTypeError, IndexingError, ShapeError
from ..spec import OpSpec, define, front_end, params
from ..tensor import Tensor
from ._common import check_category, common_device, wrap
from .attention import AttentionOptions, _check_alibi, _check_dtypes, _check_tensor, _options, _precision, attend
from .rotary import _rotary_reference, check_positions, check_rotary


def _host_checked(*tensors) -> bool:
    """Whether the tensors live in host memory (cpu, interp): a fact of the signature."""
    return all(t.device.type in ("cpu", "interp") for t in tensors if t is not None)


def _checks_now(call) -> bool:
    """Whether this call checks its values: on host memory, except interp's inside a captured step
    (nbx.graph), which runs as a GPU's would: a step reads nothing back, the kernels skip bad slots
    and blocks. Asked per call: whether a step is running is no part of the signature."""
    if not call.host_values:
        return False
    from ..deferred_checks import deferring
    return call.facts.device.type == "cpu" or not deferring()


def _check_cache(op: str, k_cache: Tensor, v_cache: Tensor, kv_heads_dim: int = 2) -> None:
    for role, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _check_tensor(op, role, t)
        if t.ndim != 4:
            raise ShapeError(f"{op}: {role} is (num_blocks, block_tokens, kv_heads, head_dim), got {tuple(t.shape)}")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ShapeError(f"{op}: k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ before "
                         f"the head dim")
    if k_cache.dtype is not v_cache.dtype:
        raise DTypeError(f"{op}: k_cache is {k_cache.dtype.name}, v_cache {v_cache.dtype.name} (they must match)")


def _check_paged(call, facts) -> None:
    """paged_attention's rules that the signature decides (shapes, dtypes, options, the device),
    once a signature; what the values decide (offsets, lengths, the table) is paged_bounds'."""
    op = "paged_attention"
    q, k_cache, v_cache, block_table, seq_lens = call.q, call.k_cache, call.v_cache, call.block_table, call.seq_lens
    cu_seqlens_q, max_q_len = call.cu_seqlens_q, call.max_q_len
    _check_cache(op, k_cache, v_cache)
    _check_tensor(op, "q", q)
    for role, t in (("block_table", block_table), ("seq_lens", seq_lens)):
        _check_tensor(op, role, t)
        check_category(f"{op} ({role})", t.dtype, "integer")
    packed = cu_seqlens_q is not None
    if q.ndim != (3 if packed else 4):
        raise ShapeError(f"{op}: q is {'(total_q, Hq, E) with cu_seqlens_q' if packed else '(batch, q_len, Hq, E)'}, "
                         f"got shape {tuple(q.shape)}")
    _check_dtypes(op, q, k_cache, v_cache)
    hq, hk = q.shape[-2], k_cache.shape[2]
    if q.shape[-1] != k_cache.shape[3]:
        raise ShapeError(f"{op}: q's head dim {q.shape[-1]} differs from the cache's {k_cache.shape[3]}")
    if hk == 0 or hq % hk:
        raise ShapeError(f"{op}: {hq} query heads are not a multiple of the cache's {hk} KV heads")
    if block_table.ndim != 2 or seq_lens.ndim != 1 or seq_lens.shape[0] != block_table.shape[0]:
        raise ShapeError(f"{op}: block_table (batch, max_blocks) and seq_lens (batch,) disagree: "
                         f"{tuple(block_table.shape)}, {tuple(seq_lens.shape)}")
    batch = seq_lens.shape[0]
    if packed:
        from .attention import _cu_seqlens_shape
        _cu_seqlens_shape(op, "cu_seqlens_q", cu_seqlens_q, batch)
        if max_q_len is not None and (int(max_q_len) < 0 or int(max_q_len) > q.shape[0]):
            raise ShapeError(f"{op}: max_q_len {max_q_len} is outside 0 .. the {q.shape[0]} packed queries")
    elif q.shape[0] != batch:
        raise ShapeError(f"{op}: q has {q.shape[0]} sequences, seq_lens {batch}")
    facts.options = _options(op, q.shape[-1], call.is_causal, call.scale, "bottom_right", call.window, call.softcap)
    _check_alibi(op, call.alibi_slopes, (batch, hq))
    facts.device = common_device(q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q, call.alibi_slopes)
    facts.out_dtype = q.dtype
    facts.host_values = _host_checked(block_table, seq_lens, cu_seqlens_q)   # host memory: values checked per call


paged_attention = front_end(define(OpSpec(
    "paged_attention", params("q", "k_cache", "v_cache", "block_table", "seq_lens", cu_seqlens_q=None, is_causal=False,
                              scale=None, window=None, softcap=None, alibi_slopes=None, return_lse=False,
                              max_seq_len=None, max_q_len=None),
    _check_paged, by_value=("scale", "softcap"), doc="""Each sequence's queries attending to its cached tokens (their
own included).

q (batch, q_len, Hq, E) for a fixed count of queries a sequence (decode: 1, speculative: 2-8),
or (total_q, Hq, E) packed with cu_seqlens_q (chunked prefill); Hq % Hk == 0. block_table
(batch, max_blocks) and seq_lens (batch,) integers. Options as scaled_dot_product_attention's,
the alignment bottom-right. max_seq_len: the longest seq_len, when the caller knows it (else
read from seq_lens, which waits for the device). max_q_len (packed q): a bound on the queries
of any one sequence, when the caller knows it (a decode step: 1); else, on a GPU, total_q (the
offsets are never read on the host there: the kernel reads each sequence's rows from
cu_seqlens_q on the device, so a captured step takes them as inputs). Returns out shaped as q
with Ev, and with return_lse the lse (batch, Hq, q_len) or (Hq, total_q) float32.
Checked once a signature (scale and softcap by value; max_seq_len and max_q_len are ints, by value);
the values of the table, the lengths and the offsets each call, on host-memory devices.""")))


def paged_bounds(call) -> tuple[int, int | None]:
    """(max_seq_len, max_q_len) of one checked call: the given bounds, or read from the lengths and
    offsets; on host-memory devices (cpu, interp) the values are checked too, each call (they are
    no part of the signature)."""
    op, q, seq_lens, cu_seqlens_q = "paged_attention", call.q, call.seq_lens, call.cu_seqlens_q
    max_seq_len, max_q_len = call.max_seq_len, call.max_q_len
    batch = seq_lens.shape[0]
    checks = _checks_now(call)
    if cu_seqlens_q is not None:
        if checks:   # host memory: the values are checked (and bound) for free
            from .attention import _cu_seqlens
            offsets = _cu_seqlens(op, "cu_seqlens_q", cu_seqlens_q, q.shape[0], batch)
            longest = int(np.diff(offsets).max()) if batch else 0
            if max_q_len is not None and longest > int(max_q_len):
                raise ShapeError(f"{op}: max_q_len {max_q_len} is below the longest query count {longest}")
            max_q_len = longest if max_q_len is None else max_q_len
        elif max_q_len is None:
            max_q_len = q.shape[0]
    if max_seq_len is None or checks:
        lens = seq_lens.numpy().astype(np.int64)
        longest = int(lens.max()) if batch else 0
        if max_seq_len is not None and longest > max_seq_len:
            raise ShapeError(f"{op}: max_seq_len {max_seq_len} is below the longest seq_len {longest}")
        max_seq_len = longest if max_seq_len is None else max_seq_len
        if checks:
            check_block_table(op, call.block_table.numpy(), lens, call.k_cache.shape[0], call.k_cache.shape[1])
    return int(max_seq_len), None if max_q_len is None else int(max_q_len)


def check_block_table(op: str, table: np.ndarray, lens: np.ndarray, num_blocks: int, block_tokens: int) -> None:
    """Every block a sequence's tokens use is in the table and in the cache."""
    if lens.size and lens.min() < 0:
        raise ShapeError(f"{op}: seq_lens must be >= 0, got {lens.tolist()}")
    need = -(-lens // block_tokens)
    if need.size and need.max() > table.shape[1]:
        raise IndexingError(f"{op}: a sequence of {int(lens.max())} tokens needs {int(need.max())} blocks of "
                            f"{block_tokens}; the table holds {table.shape[1]} a sequence")
    for b, n in enumerate(need):
        used = table[b, :n]
        if used.size and (used.min() < 0 or used.max() >= num_blocks):
            raise IndexingError(f"{op}: sequence {b}'s block table points past the cache's {num_blocks} blocks: "
                                f"{used.tolist()}")


def _gather(cache: np.ndarray, table: np.ndarray, b: int, length: int) -> np.ndarray:
    """(Hk, length, D): sequence b's cached tokens, through its block table."""
    block_tokens = cache.shape[1]
    j = np.arange(length)
    rows = table[b, j // block_tokens].astype(np.int64) * block_tokens + j % block_tokens
    return cache.reshape(-1, *cache.shape[2:])[rows].transpose(1, 0, 2)


def _paged_reference(q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q=None, alibi_slopes=None, options=None,
                     return_lse=False, max_seq_len=None, max_q_len=None, precision=reference.NATIVE):
    compute = _precision(q.dtype, precision)
    if options is None:
        options = AttentionOptions(1.0 / math.sqrt(q.shape[-1]), alignment="bottom_right")
    table = block_table.numpy()
    lens = seq_lens.numpy().astype(np.int64)
    kc, vc = k_cache.numpy().astype(compute), v_cache.numpy().astype(compute)
    qa = q.numpy().astype(compute)
    hq, hk = q.shape[-2], k_cache.shape[2]
    batch = lens.shape[0]
    cu = (cu_seqlens_q.numpy().astype(np.int64) if cu_seqlens_q is not None
          else np.arange(batch + 1, dtype=np.int64) * (q.shape[1] if q.ndim == 4 else 0))
    flat = qa.reshape(-1, hq, q.shape[-1])
    out = np.zeros((flat.shape[0], hq, v_cache.shape[3]), compute)
    lse = np.full((hq, flat.shape[0]), -np.inf, compute)
    slopes = None if alibi_slopes is None else np.broadcast_to(alibi_slopes.numpy().astype(compute), (batch, hq))
    for b in range(batch):
        rows = slice(cu[b], cu[b + 1])
        if cu[b + 1] == cu[b]:
            continue
        k = np.repeat(_gather(kc, table, b, lens[b]), hq // hk, axis=0)
        v = np.repeat(_gather(vc, table, b, lens[b]), hq // hk, axis=0)
        o, s = attend(flat[rows].transpose(1, 0, 2), k, v, options, None, None if slopes is None else slopes[b])
        out[rows] = o.transpose(1, 0, 2)
        lse[:, rows] = s
    if cu_seqlens_q is None:
        out = out.reshape(*q.shape[:-1], v_cache.shape[3])
        lse = lse.reshape(hq, batch, q.shape[1]).transpose(1, 0, 2)
    return (out, lse) if return_lse else out


# ---- writes -----------------------------------------------------------------------------------------

def _check_write(op: str, k, v, k_cache, v_cache, slots):
    """The writes' rules that the signature decides; their device. The slots' values are
    check_slots' (per call, on host memory)."""
    _check_cache(op, k_cache, v_cache)
    for role, t in (("k", k), ("v", v), ("slots", slots)):
        _check_tensor(op, role, t)
    check_category(f"{op} (slots)", slots.dtype, "integer")
    if k.ndim != 3 or v.ndim != 3 or k.shape[:2] != v.shape[:2]:
        raise ShapeError(f"{op}: k and v are (tokens, kv_heads, head_dim) of one token count, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[1:] != k_cache.shape[2:] or v.shape[1:] != v_cache.shape[2:]:
        raise ShapeError(f"{op}: k {tuple(k.shape)} / v {tuple(v.shape)} do not fit the cache's heads and dims "
                         f"{tuple(k_cache.shape[2:])} / {tuple(v_cache.shape[2:])}")
    if k.dtype is not k_cache.dtype or v.dtype is not v_cache.dtype:
        raise DTypeError(f"{op}: k and v ({k.dtype.name}, {v.dtype.name}) must have the cache's dtype "
                         f"{k_cache.dtype.name}")
    if slots.shape != (k.shape[0],):
        raise ShapeError(f"{op}: slots has shape {tuple(slots.shape)}, expected ({k.shape[0]},)")
    return common_device(k, v, k_cache, v_cache, slots)


def check_slots(call) -> None:
    """A write's slot values (and, fused with the rope on the cpu, its positions), checked each call
    on host-memory devices: a GPU would wait for the device (its kernel skips slots outside the cache)."""
    if not _checks_now(call):
        return
    s = call.slots.numpy()
    rows = call.k_cache.shape[0] * call.k_cache.shape[1]
    if s.size and (s.max() >= rows or s.min() < -1):
        raise IndexingError(f"{call.spec.name}: slots span [{s.min()}, {s.max()}]; the cache holds {rows} rows "
                            f"(-1 marks a padding token)")
    if call.facts.device.type == "cpu" and call.spec.name == "rotary_kv_cache_write":
        check_positions(call.positions, call.cos.shape[0])


def _check_kv_write(call, facts) -> None:
    facts.device = _check_write(call.spec.name, call.k, call.v, call.k_cache, call.v_cache, call.slots)
    facts.out_dtype = call.k.dtype
    facts.host_values = _host_checked(call.slots)


def _check_rotary_write(call, facts) -> None:
    _check_kv_write(call, facts)
    check_rotary(call.spec.name, call.k, call.cos, call.sin, call.positions)
    facts.interleave = bool(call.interleaved)
    q, k = call.q, call.k
    if q is not None:
        _check_tensor(call.spec.name, "q", q)
        if q.ndim != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
            raise ShapeError(f"{call.spec.name}: q is (tokens, heads, head_dim) of k's tokens and head_dim "
                             f"{tuple(k.shape[::2])}, got {tuple(q.shape)}")
        if q.dtype is not k.dtype:
            raise DTypeError(f"{call.spec.name}: q ({q.dtype.name}) is rotated with k, of k's dtype {k.dtype.name}")
        common_device(q, k)


kv_cache_write = front_end(define(OpSpec(
    "kv_cache_write", params("k", "v", "k_cache", "v_cache", "slots"), _check_kv_write,
    doc="""k[t] and v[t] (tokens, Hk, E / Ev) written to row slots[t] of the caches (in place); a slot
of -1 is a padding token and is skipped. Checked once a signature; the slots each call on host memory.""")))

rotary_kv_cache_write = front_end(define(OpSpec(
    "rotary_kv_cache_write", params("k", "v", "cos", "sin", "positions", "k_cache", "v_cache", "slots",
                                    interleaved=False, q=None), _check_rotary_write,
    doc="""rotary_embedding(k, cos, sin, positions) and v written to the caches' slots in one pass (in
place): the fused form of the rope of k followed by kv_cache_write. q (tokens, Hq, head_dim), when
given, is rotated in the same pass (the same positions and table rows) and returned as a new tensor:
rotary_embedding(q, ...), a launch fewer; else the write returns None. Checked once a signature.""")))


def _write_into(kc: np.ndarray, vc: np.ndarray, k_values: np.ndarray, v_values: np.ndarray, slots) -> None:
    s = slots.numpy().astype(np.int64)
    keep = s >= 0
    kc.reshape(-1, *kc.shape[2:])[s[keep]] = k_values[keep]
    vc.reshape(-1, *vc.shape[2:])[s[keep]] = v_values[keep]


def _write_reference(k, v, k_cache, v_cache, slots, precision=reference.NATIVE):
    """The caches after the write, as new arrays (the oracle of kv_cache_write)."""
    kc, vc = k_cache.numpy().copy(), v_cache.numpy().copy()
    _write_into(kc, vc, k.numpy(), v.numpy(), slots)
    return kc, vc


def _rotary_write_reference(k, v, cos, sin, positions, k_cache, v_cache, slots, interleaved=False, q=None,
                            precision=reference.NATIVE):
    """The caches after rotary_kv_cache_write (k rotated in the compute dtype, rounded once to the
    cache's), as new arrays; and, q given, its rotation (rotary_embedding's reference at precision)."""
    kc, vc = k_cache.numpy().copy(), v_cache.numpy().copy()
    rotated = _rotary_reference(k, cos, sin, positions, interleaved).astype(k_cache.dtype.host)
    _write_into(kc, vc, rotated, v.numpy(), slots)
    if q is None:
        return kc, vc
    return kc, vc, _rotary_reference(q, cos, sin, positions, interleaved, precision)


reference.register("paged_attention", _paged_reference)
reference.register("kv_cache_write", _write_reference)
reference.register("rotary_kv_cache_write", _rotary_write_reference)


@register("paged_attention", "cpu")
def _paged_cpu(call):
    from .attention import _with_lse
    paged_bounds(call)
    out, lse = _with_lse(_paged_reference(call.q, call.k_cache, call.v_cache, call.block_table, call.seq_lens,
                                          call.cu_seqlens_q, call.alibi_slopes, call.options, True), call.q.dtype,
                         call.return_lse)
    return (out, lse) if call.return_lse else out


@register("kv_cache_write", "cpu")
def _write_cpu(call):
    check_slots(call)
    _write_into(call.k_cache._host_view(), call.v_cache._host_view(), call.k.numpy(), call.v.numpy(), call.slots)


@register("rotary_kv_cache_write", "cpu")
def _rotary_write_cpu(call):
    check_slots(call)
    rotated = _rotary_reference(call.k, call.cos, call.sin, call.positions, call.interleave)
    _write_into(call.k_cache._host_view(), call.v_cache._host_view(), rotated.astype(call.k_cache.dtype.host),
                call.v.numpy(), call.slots)
    if call.q is not None:
        return wrap(_rotary_reference(call.q, call.cos, call.sin, call.positions, call.interleave), call.q.dtype)


__all__ = ["paged_attention", "kv_cache_write", "rotary_kv_cache_write", "check_block_table"]
