"""Scaled dot-product attention: the dense front-end with torch's argument meanings, the varlen one
over sequences packed with cu_seqlens, and their float64 numpy references.

Layouts: `scaled_dot_product_attention` takes q (*batch, Hq, L, E), k (*batch, Hk, S, E), v (*batch,
Hk, S, Ev) as torch does; `varlen_attention` takes q (total_q, Hq, E), k (total_k, Hk, E), v (total_k,
Hk, Ev) with sequence b at rows cu_seqlens[b]:cu_seqlens[b+1], as flash-attention's varlen entry does.

Causal alignment (docs/attention.md): query row i sits at key position i + offset, where offset is 0
for "top_left" (torch's is_causal: the tril of an L x S matrix) and S - L for "bottom_right"
(flash-attention's: the last query row sees every key, the alignment decoding and chunked prefill
need). The causal mask, the sliding window and ALiBi's distances all measure from that position.

Scores are s = (q . k) * scale, then softcap * tanh(s / softcap), then ALiBi's -slope * |pos - j|,
then the mask (a bool mask keeps where True, a float mask is added). A row whose every key is masked
has output 0 and log-sum-exp -inf (torch's math path gives NaN there; a defined 0 is what a kernel's
padding rows need). Half inputs compute in float32 (the references) and round once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from math import prod

import numpy as np

from .. import layout, reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..tensor import Tensor
from ._common import check_category, common_device, compute_dtype, oracle_dtype, wrap

ALIGNMENTS = ("top_left", "bottom_right")


@dataclass(frozen=True)
class AttentionOptions:
    """Everything about one attention call but its tensors (hashable: kernels key launches on it).

    window_left/right: how many keys before/after the query's aligned position it sees (None:
    all); causal folds into window_right = 0. softcap 0.0: no capping."""
    scale: float
    causal: bool = False
    alignment: str = "top_left"
    window_left: int | None = None
    window_right: int | None = None
    softcap: float = 0.0

    @property
    def right(self) -> int | None:
        """The bound on j - pos that causal and the window set together (None: unbounded)."""
        if self.causal:
            return 0 if self.window_right is None else min(0, self.window_right)
        return self.window_right

    def offset(self, q_len: int, k_len: int) -> int:
        """Where query row 0 sits among the keys."""
        return 0 if self.alignment == "top_left" else k_len - q_len


def _check_tensor(op: str, role: str, t) -> None:
    if not isinstance(t, Tensor):
        raise DTypeError(f"{op}: {role} must be a tensor, got {type(t).__name__}")


def _options(op, head_dim, is_causal, scale, causal_alignment, window, softcap) -> AttentionOptions:
    # torch's sdpa takes dropout_p before is_causal, flash-attention's varlen max_seqlen_q/k: a call
    # ported positionally, (q, k, v, mask, 0.0, True), would read 0.0 as is_causal and True as the
    # scale, a silent wrong answer
    if not isinstance(is_causal, (bool, np.bool_)):
        raise ArgumentError(f"{op}: is_causal is a bool, got {is_causal!r} (a call in torch's order, dropout_p "
                            f"before is_causal, or flash-attention's, max_seqlen before causal? pass is_causal=, "
                            f"scale=, dropout_p= and max_seqlen_q/k= by name)")
    if isinstance(scale, (bool, np.bool_)) or (scale is not None and not isinstance(scale, (int, float, np.number))):
        raise ArgumentError(f"{op}: scale is a number or None, got {scale!r}")
    if causal_alignment not in ALIGNMENTS:
        raise ArgumentError(f"{op}: causal_alignment is one of {ALIGNMENTS}, got {causal_alignment!r}")
    left = right = None
    if window is not None:
        if len(tuple(window)) != 2:
            raise ArgumentError(f"{op}: window is (left, right), got {window!r}")
        left, right = window
        for side, w in (("left", left), ("right", right)):
            if w is not None and (not isinstance(w, (int, np.integer)) or isinstance(w, bool) or w < 0):
                raise ArgumentError(f"{op}: window {side} is a count of keys >= 0 or None, got {w!r}")
        left = None if left is None else int(left)
        right = None if right is None else int(right)
    softcap = 0.0 if softcap is None else float(softcap)
    if softcap < 0 or not math.isfinite(softcap):
        raise ArgumentError(f"{op}: softcap is a positive float (or None), got {softcap}")
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    return AttentionOptions(scale, bool(is_causal), causal_alignment, left, right, softcap)


def _check_dtypes(op: str, q: Tensor, k: Tensor, v: Tensor) -> None:
    check_category(f"{op} (q)", q.dtype, "real_floating")
    if k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise DTypeError(f"{op}: q, k and v must share a dtype, got {q.dtype.name}, {k.dtype.name}, {v.dtype.name}")


def _check_alibi(op: str, slopes, heads_shape: tuple[int, ...]):
    """slopes: one per query head (Hq,) or per batch and head (the q shape up to its heads)."""
    if slopes is None:
        return None
    _check_tensor(op, "alibi_slopes", slopes)
    check_category(f"{op} (alibi_slopes)", slopes.dtype, "real_floating")
    if tuple(slopes.shape) not in (heads_shape[-1:], heads_shape):
        raise ShapeError(f"{op}: alibi_slopes has shape {tuple(slopes.shape)}, expected {heads_shape[-1:]} or "
                         f"{heads_shape}")
    return slopes


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                                 *, causal_alignment: str = "top_left", window=None, softcap: float | None = None,
                                 alibi_slopes: Tensor | None = None, return_lse: bool = False, dropout_p: float = 0.0):
    """softmax(q k^T * scale [+ options]) v over the last two dims, as torch.nn.functional's.

    q (*batch, Hq, L, E), k (*batch, Hk, S, E), v (*batch, Hk, S, Ev) -> (*batch, Hq, L, Ev) in q's
    dtype; Hk == Hq unless enable_gqa (then Hq % Hk == 0: query head h reads KV head h // (Hq // Hk)).
    attn_mask broadcasts to (*batch, Hq, L, S): bool keeps where True, floating is added. is_causal
    with causal_alignment "top_left" (torch's) or "bottom_right" (q's last row at k's last key).
    window (left, right): keys pos - left .. pos + right only (None on a side: unbounded). softcap:
    scores become softcap * tanh(s / softcap). alibi_slopes (Hq,) or (*batch, Hq): -slope * |pos - j|
    added. return_lse: (out, lse) with lse (*batch, Hq, L) float32, the natural log of each row's sum
    of exp(score) (-inf for a row with nothing to attend to, whose output is 0). dropout_p: torch's
    keyword, taken so ported calls run; only 0.0 (inference: any other is refused by name).
    """
    op = "scaled_dot_product_attention"
    if dropout_p != 0:
        raise NotSupportedError(f"{op}: dropout_p={dropout_p!r}: nbx is an inference library and applies no "
                                f"dropout (pass 0.0, torch's value under eval)")
    for role, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(op, role, t)
        if t.ndim < 2:
            raise ShapeError(f"{op}: {role} needs (..., tokens, head_dim), got shape {tuple(t.shape)}")
    _check_dtypes(op, q, k, v)
    if not (q.ndim == k.ndim == v.ndim):
        raise ShapeError(f"{op}: q, k, v have {q.ndim}, {k.ndim}, {v.ndim} dims (they must match)")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"{op}: q's head dim {q.shape[-1]} differs from k's {k.shape[-1]}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ShapeError(f"{op}: k {tuple(k.shape)} and v {tuple(v.shape)} differ before the head dim")
    if enable_gqa:
        if q.ndim < 3:
            raise ShapeError(f"{op}: enable_gqa needs a heads dim (-3), q has shape {tuple(q.shape)}")
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk:
            raise ShapeError(f"{op}: {hq} query heads are not a multiple of {hk} KV heads")
        if q.shape[:-3] != k.shape[:-3]:
            raise ShapeError(f"{op}: q's batch dims {tuple(q.shape[:-3])} differ from k's {tuple(k.shape[:-3])}")
    elif q.shape[:-2] != k.shape[:-2]:
        raise ShapeError(f"{op}: q {tuple(q.shape)} and k {tuple(k.shape)} differ before the tokens dim "
                         f"(mismatched heads need enable_gqa=True)")
    options = _options(op, q.shape[-1], is_causal, scale, causal_alignment, window, softcap)
    score_shape = (*q.shape[:-1], k.shape[-2])
    if attn_mask is not None:
        _check_tensor(op, "attn_mask", attn_mask)
        if attn_mask.dtype.kind not in ("bool", "float"):
            raise DTypeError(f"{op}: attn_mask is bool (keep) or floating (added), got {attn_mask.dtype.name}")
        try:
            fits = layout.broadcast_shapes(attn_mask.shape, score_shape) == score_shape
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(f"{op}: attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the "
                             f"scores' shape {score_shape}")
        attn_mask = attn_mask.broadcast_to(score_shape)
    alibi_slopes = _check_alibi(op, alibi_slopes, tuple(q.shape[:-2]))
    common_device(q, k, v, attn_mask, alibi_slopes)
    out, lse = implementation(op, q.device)(q, k, v, attn_mask, alibi_slopes, options, bool(return_lse))
    return (out, lse) if return_lse else out


def _cu_seqlens_shape(op: str, role: str, cu: Tensor, batch: int | None) -> None:
    """cu's dtype and shape, which the host knows without reading its values."""
    _check_tensor(op, role, cu)
    check_category(f"{op} ({role})", cu.dtype, "integer")
    if cu.ndim != 1 or cu.shape[0] < 1 or (batch is not None and cu.shape[0] != batch + 1):
        raise ShapeError(f"{op}: {role} is (batch + 1,) offsets, got shape {tuple(cu.shape)}")


def _cu_seqlens(op: str, role: str, cu: Tensor, total: int, batch: int | None) -> np.ndarray:
    _cu_seqlens_shape(op, role, cu, batch)
    offsets = cu.numpy().astype(np.int64)
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != total:
        raise ShapeError(f"{op}: {role} must rise from 0 to the {total} packed tokens, got {offsets.tolist()}")
    return offsets


def _reads_offsets(device) -> bool:
    """Whether varlen_attention reads its offsets' values on the host: on host memory (cpu; interp
    outside a captured step, which runs as a GPU's would), where a read costs no wait."""
    from ..deferred_checks import deferring
    return device.type == "cpu" or (device.type == "interp" and not deferring())


def _bound(op: str, role: str, given, offsets: np.ndarray | None) -> int | None:
    """A max_seqlen given (an int >= 0, checked against the offsets where they were read), or the
    offsets' longest sequence, or None (neither: the kernel's bound is the packed total)."""
    if given is not None and (not isinstance(given, (int, np.integer)) or isinstance(given, bool) or given < 0):
        raise ArgumentError(f"{op}: {role} is a count of tokens >= 0 or None, got {given!r}")
    if offsets is None:
        return None if given is None else int(given)
    longest = int(np.diff(offsets).max()) if offsets.shape[0] > 1 else 0
    if given is not None and longest > given:
        raise ShapeError(f"{op}: {role} {given} is below the longest sequence's {longest} tokens")
    return longest if given is None else int(given)


def varlen_attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                     is_causal: bool = False, scale: float | None = None, *, causal_alignment: str = "top_left",
                     window=None, softcap: float | None = None, alibi_slopes: Tensor | None = None,
                     return_lse: bool = False, max_seqlen_q: int | None = None, max_seqlen_k: int | None = None):
    """Attention of each packed sequence to its own keys, no padding: q (total_q, Hq, E), k
    (total_k, Hk, E), v (total_k, Hk, Ev), sequence b at rows cu_seqlens[b]:cu_seqlens[b+1] (int
    offsets, batch + 1 of them). Hq % Hk == 0 (GQA/MQA as in the dense front-end). Options as
    scaled_dot_product_attention's, the alignment per sequence; alibi_slopes (Hq,) or (batch, Hq).
    Returns (total_q, Hq, Ev) in q's dtype, and with return_lse the lse (Hq, total_q) float32.
    An empty sequence (equal offsets) contributes no rows; a sequence with queries but no keys gets 0s.
    max_seqlen_q, max_seqlen_k (flash-attention's): bounds on any one sequence's tokens. Given both,
    a GPU reads nothing back (the kernel reads each sequence's rows from the offsets on the device,
    so a captured step takes them as inputs; their values are then the caller's to keep right);
    host memory checks the offsets and the bounds every call.
    """
    op = "varlen_attention"
    for role, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(op, role, t)
        if t.ndim != 3:
            raise ShapeError(f"{op}: {role} is (tokens, heads, head_dim), got shape {tuple(t.shape)}")
    _check_dtypes(op, q, k, v)
    if q.shape[2] != k.shape[2]:
        raise ShapeError(f"{op}: q's head dim {q.shape[2]} differs from k's {k.shape[2]}")
    if k.shape[:2] != v.shape[:2]:
        raise ShapeError(f"{op}: k {tuple(k.shape)} and v {tuple(v.shape)} differ before the head dim")
    hq, hk = q.shape[1], k.shape[1]
    if hk == 0 or hq % hk:
        raise ShapeError(f"{op}: {hq} query heads are not a multiple of {hk} KV heads")
    _cu_seqlens_shape(op, "cu_seqlens_q", cu_seqlens_q, None)
    batch = cu_seqlens_q.shape[0] - 1
    _cu_seqlens_shape(op, "cu_seqlens_k", cu_seqlens_k, batch)
    options = _options(op, q.shape[2], is_causal, scale, causal_alignment, window, softcap)
    alibi_slopes = _check_alibi(op, alibi_slopes, (batch, hq))
    device = common_device(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes)
    read = _reads_offsets(device) or max_seqlen_q is None or max_seqlen_k is None   # a GPU: only for a bound
    cu_q = _cu_seqlens(op, "cu_seqlens_q", cu_seqlens_q, q.shape[0], None) if read else None
    cu_k = _cu_seqlens(op, "cu_seqlens_k", cu_seqlens_k, k.shape[0], batch) if read else None
    bounds = (_bound(op, "max_seqlen_q", max_seqlen_q, cu_q), _bound(op, "max_seqlen_k", max_seqlen_k, cu_k))
    out, lse = implementation(op, device)(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, options,
                                          bool(return_lse), *bounds)
    return (out, lse) if return_lse else out


# ---- the numpy references ------------------------------------------------------------------------

def _precision(dtype, precision):
    return oracle_dtype(dtype) if precision == reference.FLOAT64 else compute_dtype(dtype)


def allowed_keys(options: AttentionOptions, q_len: int, k_len: int) -> np.ndarray:
    """(L, S) bool: which keys each query row may see under causal and the window."""
    pos = np.arange(q_len)[:, None] + options.offset(q_len, k_len)
    j = np.arange(k_len)[None, :]
    keep = np.ones((q_len, k_len), dtype=bool)
    if options.right is not None:
        keep &= j <= pos + options.right
    if options.window_left is not None:
        keep &= j >= pos - options.window_left
    return keep


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, options: AttentionOptions, mask=None, slopes=None):
    """The reference of one batch: q (H, L, E), k (H, S, E), v (H, S, Ev) already in the compute
    dtype (k, v repeated to q's heads); mask (H, L, S) bool or additive or None; slopes (H,) or None.
    Returns (out (H, L, Ev), lse (H, L))."""
    heads, q_len, k_len = q.shape[0], q.shape[1], k.shape[1]
    compute = q.dtype
    with np.errstate(all="ignore"):
        s = np.matmul(q, k.transpose(0, 2, 1)) * compute.type(options.scale)  # BLAS: real sizes in seconds
        if options.softcap:
            cap = compute.type(options.softcap)
            s = cap * np.tanh(s / cap)
        if slopes is not None:
            pos = np.arange(q_len)[:, None] + options.offset(q_len, k_len)
            distance = np.abs(pos - np.arange(k_len)[None, :]).astype(compute)
            s = s - slopes.astype(compute)[:, None, None] * distance
        s = np.where(allowed_keys(options, q_len, k_len), s, -np.inf)
        if mask is not None:
            s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask.astype(compute)
        m = np.max(s, axis=-1, keepdims=True) if k_len else np.full((heads, q_len, 1), -np.inf, compute)
        finite = np.isfinite(m)
        p = np.exp(s - np.where(finite, m, 0))
        total = np.sum(p, axis=-1, keepdims=True)
        out = np.matmul(p, v) / np.where(finite, total, 1)
        out = np.where(finite, out, 0)
        lse = np.where(finite, m + np.log(total), -np.inf)[..., 0]
    return out.astype(compute), lse.astype(compute)


def _sdpa_reference(q, k, v, attn_mask=None, alibi_slopes=None, options=None, return_lse=False,
                    precision=reference.NATIVE):
    compute = _precision(q.dtype, precision)
    if options is None:
        options = AttentionOptions(1.0 / math.sqrt(q.shape[-1]))
    batch = tuple(q.shape[:-3]) if q.ndim >= 3 else ()
    hq = q.shape[-3] if q.ndim >= 3 else 1
    hk = k.shape[-3] if k.ndim >= 3 else 1
    n = prod(batch)
    qa = q.numpy().astype(compute).reshape(n, hq, q.shape[-2], q.shape[-1])
    ka = k.numpy().astype(compute).reshape(n, hk, k.shape[-2], k.shape[-1])
    va = v.numpy().astype(compute).reshape(n, hk, v.shape[-2], v.shape[-1])
    group = hq // hk
    mask = None if attn_mask is None else np.broadcast_to(attn_mask.numpy(), (*q.shape[:-1], k.shape[-2]))
    mask = None if mask is None else mask.reshape(n, hq, q.shape[-2], k.shape[-2])
    slopes = None
    if alibi_slopes is not None:
        slopes = np.broadcast_to(alibi_slopes.numpy().astype(compute), (*batch, hq)).reshape(n, hq)
    outs, lses = [], []
    for b in range(n):
        o, lse = attend(qa[b], np.repeat(ka[b], group, axis=0), np.repeat(va[b], group, axis=0), options,
                        None if mask is None else mask[b], None if slopes is None else slopes[b])
        outs.append(o)
        lses.append(lse)
    out = np.stack(outs).reshape(*q.shape[:-1], v.shape[-1])
    lse = np.stack(lses).reshape(q.shape[:-1])
    return (out, lse) if return_lse else out


def _varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes=None, options=None, return_lse=False,
                      max_seqlen_q=None, max_seqlen_k=None, precision=reference.NATIVE):
    compute = _precision(q.dtype, precision)
    if options is None:
        options = AttentionOptions(1.0 / math.sqrt(q.shape[-1]))
    cu_q = cu_seqlens_q.numpy().astype(np.int64)
    cu_k = cu_seqlens_k.numpy().astype(np.int64)
    hq, hk = q.shape[1], k.shape[1]
    qa, ka, va = (t.numpy().astype(compute) for t in (q, k, v))
    out = np.zeros((q.shape[0], hq, v.shape[2]), compute)
    lse = np.full((hq, q.shape[0]), -np.inf, compute)
    slopes = None
    if alibi_slopes is not None:
        slopes = np.broadcast_to(alibi_slopes.numpy().astype(compute), (cu_q.shape[0] - 1, hq))
    for b in range(cu_q.shape[0] - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if cu_q[b + 1] == cu_q[b]:
            continue
        o, s = attend(qa[qs].transpose(1, 0, 2), np.repeat(ka[ks].transpose(1, 0, 2), hq // hk, axis=0),
                      np.repeat(va[ks].transpose(1, 0, 2), hq // hk, axis=0), options,
                      None, None if slopes is None else slopes[b])
        out[qs] = o.transpose(1, 0, 2)
        lse[:, qs] = s
    return (out, lse) if return_lse else out


reference.register("scaled_dot_product_attention", _sdpa_reference)
reference.register("varlen_attention", _varlen_reference)


def _with_lse(result, dtype, return_lse):
    out, lse = result
    from .. import dtypes
    return wrap(out, dtype), (wrap(lse, dtypes.float32) if return_lse else None)


@register("scaled_dot_product_attention", "cpu")
def _sdpa_cpu(q, k, v, attn_mask, alibi_slopes, options, return_lse):
    return _with_lse(_sdpa_reference(q, k, v, attn_mask, alibi_slopes, options, True), q.dtype, return_lse)


@register("varlen_attention", "cpu")
def _varlen_cpu(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, options, return_lse, max_seqlen_q=None,
                max_seqlen_k=None):
    return _with_lse(_varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, options, True),
                     q.dtype, return_lse)


__all__ = ["scaled_dot_product_attention", "varlen_attention", "AttentionOptions"]
