"""Attention on the kernel devices: scaled_dot_product_attention, varlen_attention and
paged_attention through one flash kernel (flash.py), rotary_embedding through rope.py.

Every call is turned into the kernel's terms (`Operands`: each tensor with its batch, head and
token strides, the head dim at unit stride) and then takes one of two paths:
- prefill: programs over blocks of query rows, each walking its keys once (flash.prefill);
- decode, for a few query tokens (<= DECODE_TOKENS) whose group's rows fit one program: the keys
  split over programs to fill the device (flash-decoding), the partials merged by combine_kernel
  in a fixed order.
q, k and v are float16, bfloat16 or float32 (float32 products in IEEE float32); float64 and head
dims above MAX_HEAD_DIM are refused by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from math import prod

import triton.language as tl

from nbx.core import dtypes
from nbx.core.errors import NotSupportedError
from nbx.core.tensor import Tensor

from .. import launch
from ..cost import LAUNCH, Buffer, Cost, declares
from ..registry import implements
from . import tuning
from .common import ADDITIVE_MASK, KEEP_MASK, NO_MASK
from .flash import DENSE, PACKED, PAGED, combine_kernel, prefill_kernel

SUPPORTED = ("float16", "bfloat16", "float32")
MAX_HEAD_DIM = 256
DECODE_TOKENS = 8      # query tokens a sequence may have for the split-K decode path
DECODE_ROWS = 128      # query rows (tokens x heads of a group) one decode program holds
_DOT = {"float16": tl.float16, "bfloat16": tl.bfloat16, "float32": tl.float32}


def check_supported(op: str, q: Tensor, v_dim: int) -> None:
    if q.dtype.name not in SUPPORTED:
        raise NotSupportedError(f"{op} on {q.device.type} takes {', '.join(SUPPORTED)}; got {q.dtype.name}")
    for what, d in (("q/k head dim", q.shape[-1]), ("v head dim", v_dim)):
        if d > MAX_HEAD_DIM or d < 1:
            raise NotSupportedError(f"{op} on {q.device.type}: {what} {d} is not supported (1 .. {MAX_HEAD_DIM}; "
                                    f"a q tile and K/V blocks of a wider head do not fit shared memory)")


def unit_last(t: Tensor) -> Tensor:
    """t with its last dim at unit stride (a copy only where it is not)."""
    return t if t.shape[-1] <= 1 or t.strides[-1] == 1 else t.contiguous()


@dataclass(frozen=True)
class Shape:
    """What the path, the setting and the cost of a call depend on (no tensor: costs allocate nothing)."""
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int              # fixed, or the longest of a packed batch
    k_len: int              # fixed, or the longest
    head_dim: int
    v_dim: int
    dtype: object
    device: object
    varlen_q: bool = False
    paged: bool = False
    lse: bool = False

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads


@dataclass(frozen=True)
class Operands:
    """One attention call in the kernel's terms. Strides are (batch, head, token) in elements."""
    q: Tensor
    k: Tensor
    v: Tensor
    q_strides: tuple
    k_strides: tuple
    v_strides: tuple
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int              # fixed, or the longest with cu_q
    k_len: int              # fixed, or the longest with kv_lens
    out: Tensor
    out_strides: tuple
    lse: Tensor | None = None
    lse_strides: tuple = (0, 0, 0)
    cu_q: Tensor | None = None
    kv_mode: int = DENSE
    kv_lens: Tensor | None = None     # cu_k (PACKED) or the lengths (PAGED)
    table: Tensor | None = None
    block_tokens: int = 1
    mask: Tensor | None = None
    mask_strides: tuple = (0, 0, 0, 0)
    slopes: Tensor | None = None
    slope_strides: tuple = (0, 0)

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def head_dim(self) -> int:
        return self.q.shape[-1]

    @property
    def v_dim(self) -> int:
        return self.v.shape[-1]

    @property
    def shape(self) -> Shape:
        return Shape(self.batch, self.q_heads, self.kv_heads, self.q_len, self.k_len, self.head_dim, self.v_dim,
                     self.q.dtype, self.q.device, self.cu_q is not None, self.kv_mode == PAGED, self.lse is not None)


def _decodes(shape: Shape) -> bool:
    return not shape.varlen_q and shape.q_len <= DECODE_TOKENS and shape.q_len * shape.group <= DECODE_ROWS


def _flags(ops: Operands, options) -> dict:
    mask_kind = NO_MASK if ops.mask is None else (KEEP_MASK if ops.mask.dtype.kind == "bool" else ADDITIVE_MASK)
    return dict(GROUP=ops.group, HEAD_DIM=ops.head_dim, V_DIM=ops.v_dim,
                BLOCK_D=tuning.pow2_at_least(ops.head_dim), BLOCK_DV=tuning.pow2_at_least(ops.v_dim),
                VARLEN_Q=ops.cu_q is not None, KV_MODE=ops.kv_mode, BOTTOM_RIGHT=options.alignment == "bottom_right",
                HAS_LEFT=options.window_left is not None, HAS_RIGHT=options.right is not None,
                SOFTCAP=options.softcap > 0, ALIBI=ops.slopes is not None, MASK_KIND=mask_kind,
                DOT=_DOT[ops.q.dtype.name], IEEE=ops.q.dtype is dtypes.float32)


def _args(ops: Operands, options, out: Tensor, out_strides, lse, lse_strides, split_len: int, split_strides):
    dummy = ops.q
    table = ops.table if ops.table is not None else dummy
    return (ops.q, ops.k, ops.v, out, dummy if lse is None else lse, dummy if ops.mask is None else ops.mask,
            dummy if ops.slopes is None else ops.slopes, dummy if ops.cu_q is None else ops.cu_q,
            dummy if ops.kv_lens is None else ops.kv_lens, table,
            ops.q_len, ops.k_len, ops.kv_heads, options.window_left or 0, options.right or 0, ops.block_tokens,
            table.strides[0] if ops.table is not None else 0,
            *ops.q_strides, *ops.k_strides, *ops.v_strides, *out_strides, *lse_strides,
            *ops.mask_strides, *ops.slope_strides, float(options.scale), float(options.softcap or 1.0),
            split_len, *split_strides)


def decode_split(shape: Shape, setting) -> tuple[int, int]:
    """(splits, split_len): enough programs to fill the device (tiles.attention_decode.programs),
    each at least one block of keys."""
    programs = launch.tiles("attention_decode", shape.device)["programs"]
    block_n = setting["block_n"]
    blocks = max(1, math.ceil(shape.k_len / block_n))
    splits = min(blocks, max(1, math.ceil(programs / (shape.batch * shape.kv_heads))))
    split_len = math.ceil(blocks / splits) * block_n
    return (math.ceil(shape.k_len / split_len) if shape.k_len else 1), split_len


def served(shape: Shape, options, setting=None, decode_setting=None):
    """("decode" or "prefill", the setting it launches with)."""
    if _decodes(shape):
        if decode_setting is None:
            decode_setting = tuning.decode_setting(shape.device, shape.k_len, shape.q_len * shape.group,
                                                   shape.head_dim, shape.dtype, shape.paged)
        return "decode", decode_setting
    if setting is None:
        setting = tuning.prefill_setting(shape.device, shape.q_len, shape.k_len, shape.head_dim, shape.v_dim,
                                         shape.group, shape.dtype, options.causal)
    return "prefill", setting


def run(ops: Operands, options, setting=None, decode_setting=None) -> None:
    """Launch the call described by ops (its out and lse written)."""
    device = ops.q.device
    if ops.out.size == 0:
        return
    path, s = served(ops.shape, options, setting, decode_setting)
    flags = _flags(ops, options)
    if path == "prefill":
        grid = (math.ceil(ops.q_len * ops.group / s["block_m"]), ops.batch * ops.kv_heads)
        launch.run(prefill_kernel, grid, device,
                   *_args(ops, options, ops.out, ops.out_strides, ops.lse, ops.lse_strides, 0, (0, 0)),
                   BLOCK_M=s["block_m"], BLOCK_N=s["block_n"], WRITE_LSE=ops.lse is not None, SPLIT=False,
                   num_warps=s["num_warps"], num_stages=s["num_stages"], **flags)
        return
    splits, split_len = decode_split(ops.shape, s)
    rows = ops.batch * ops.q_heads * ops.q_len
    part = launch.output((splits, ops.batch, ops.q_heads, ops.q_len, ops.v_dim), dtypes.float32, device)
    part_lse = launch.output((splits, ops.batch, ops.q_heads, ops.q_len), dtypes.float32, device)
    part_strides = part.strides[1:4]
    launch.run(prefill_kernel, (splits, ops.batch * ops.kv_heads), device,
               *_args(ops, options, part, part_strides, part_lse, part_lse.strides[1:4], split_len,
                      (part.strides[0], part_lse.strides[0])),
               BLOCK_M=tuning.pow2_at_least(ops.q_len * ops.group), BLOCK_N=s["block_n"], WRITE_LSE=True, SPLIT=True,
               num_warps=s["num_warps"], num_stages=s["num_stages"], **flags)
    lse, lse_strides = (part_lse, (0, 0, 0)) if ops.lse is None else (ops.lse, ops.lse_strides)
    launch.run(combine_kernel, (rows,), device, part, part_lse, ops.out, lse, ops.q_heads * ops.q_len, ops.q_heads,
               splits, *ops.out_strides, *lse_strides, V_DIM=ops.v_dim, BLOCK_S=tuning.pow2_at_least(splits, 2),
               BLOCK_DV=tuning.pow2_at_least(ops.v_dim), WRITE_LSE=ops.lse is not None, num_warps=4)


# ---- the dense front-end ---------------------------------------------------------------------------

def as_heads(t: Tensor) -> Tensor:
    """(*batch, H, T, D) -> (n, H, T, D); (H, T, D) and (T, D) gain the missing dims (views where
    the batch dims merge, else a copy)."""
    while t.ndim < 4:
        t = t.unsqueeze(0)
    if t.ndim > 4:
        t = t.reshape(prod(t.shape[:-3]), *t.shape[-3:])
    return t


def dense_operands(q, k, v, mask, slopes, return_lse=False, out=None) -> Operands:
    q4, k4, v4 = (unit_last(as_heads(t)) for t in (q, k, v))
    n, hq, q_len, _ = q4.shape
    out_shape = (*q.shape[:-1], v.shape[-1])
    out = launch.output(out_shape, q.dtype, q.device, out)
    out4 = as_heads(out)
    lse = launch.output(q.shape[:-1], dtypes.float32, q.device) if return_lse else None
    mask_strides, mask4 = (0, 0, 0, 0), None
    if mask is not None:
        mask4 = as_heads(mask.broadcast_to((*q.shape[:-1], k.shape[-2])))
        mask_strides = mask4.strides
    slopes2, slope_strides = None, (0, 0)
    if slopes is not None:
        slopes2 = slopes.broadcast_to(q.shape[:-2]) if slopes.ndim > 1 else slopes
        slope_strides = (0, slopes2.strides[-1]) if slopes2.ndim == 1 else (0, 0)
        if slopes2.ndim > 1:
            slopes2 = slopes2.reshape(n, hq)
            slope_strides = slopes2.strides
    lse_strides = (0, 0, 0) if lse is None else as_heads(lse.unsqueeze(-1)).strides[:3]
    return Operands(q4, k4, v4, q4.strides[:3], k4.strides[:3], v4.strides[:3], n, hq, k4.shape[1], q_len,
                    k4.shape[2], out, out4.strides[:3], lse, lse_strides, mask=mask4, mask_strides=mask_strides,
                    slopes=slopes2, slope_strides=slope_strides)


def launch_sdpa(q, k, v, mask, slopes, options, return_lse=False, out=None, setting=None, decode_setting=None):
    """scaled_dot_product_attention into out (new, or a given contiguous one); setting and
    decode_setting override the served ones (the certifier's)."""
    check_supported("scaled_dot_product_attention", q, v.shape[-1])
    ops = dense_operands(q, k, v, mask, slopes, return_lse, out)
    run(ops, options, setting, decode_setting)
    return ops.out, ops.lse


@implements("scaled_dot_product_attention")
def _sdpa(q, k, v, attn_mask, alibi_slopes, options, return_lse):
    return launch_sdpa(q, k, v, attn_mask, alibi_slopes, options, return_lse)


# ---- varlen ----------------------------------------------------------------------------------------

def _longest(cu: Tensor) -> int:
    offsets = cu.numpy()
    return int((offsets[1:] - offsets[:-1]).max()) if offsets.shape[0] > 1 else 0


def varlen_operands(q, k, v, cu_q, cu_k, slopes, return_lse=False) -> Operands:
    q, k, v = unit_last(q), unit_last(k), unit_last(v)
    out = launch.output((q.shape[0], q.shape[1], v.shape[2]), q.dtype, q.device)
    lse = launch.output((q.shape[1], q.shape[0]), dtypes.float32, q.device) if return_lse else None
    batch = cu_q.shape[0] - 1
    slope_strides = (0, 0)
    if slopes is not None:
        slope_strides = (0, slopes.strides[0]) if slopes.ndim == 1 else slopes.strides
    token = lambda t: (0, t.strides[1], t.strides[0])  # noqa: E731  (batch, head, token)
    return Operands(q, k, v, token(q), token(k), token(v), batch, q.shape[1], k.shape[1], _longest(cu_q),
                    _longest(cu_k), out, token(out), lse, (0,) + (lse.strides if lse is not None else (0, 0)),
                    cu_q=cu_q, kv_mode=PACKED, kv_lens=cu_k, slopes=slopes, slope_strides=slope_strides)


@implements("varlen_attention")
def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, options, return_lse):
    check_supported("varlen_attention", q, v.shape[-1])
    ops = varlen_operands(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, return_lse)
    run(ops, options)
    return ops.out, ops.lse


# ---- the paged cache -------------------------------------------------------------------------------

def paged_operands(q, k_cache, v_cache, block_table, seq_lens, cu_q, slopes, return_lse, max_seq_len) -> Operands:
    from .rope import cache_rows
    cache_rows(k_cache), cache_rows(v_cache)  # refused unless blocks and tokens merge into rows
    q = unit_last(q)
    table = block_table if block_table.strides[-1] == 1 or block_table.shape[-1] <= 1 else block_table.contiguous()
    lens = seq_lens if seq_lens.strides[0] == 1 or seq_lens.shape[0] <= 1 else seq_lens.contiguous()
    batch, hq, ev = seq_lens.shape[0], q.shape[-2], v_cache.shape[3]
    out = launch.output((*q.shape[:-1], ev), q.dtype, q.device)
    cache = lambda c: (0, c.strides[2], c.strides[1])  # noqa: E731  (no batch stride: the table says)
    slope_strides = (0, 0)
    if slopes is not None:
        slope_strides = (0, slopes.strides[0]) if slopes.ndim == 1 else slopes.strides
    if cu_q is None:  # (batch, q_len, Hq, E)
        lse = launch.output((batch, hq, q.shape[1]), dtypes.float32, q.device) if return_lse else None
        tokens = lambda t: (t.strides[0], t.strides[2], t.strides[1])  # noqa: E731
        return Operands(q, k_cache, v_cache, tokens(q), cache(k_cache), cache(v_cache), batch, hq, k_cache.shape[2],
                        q.shape[1], max_seq_len, out, tokens(out), lse, lse.strides if lse is not None else (0, 0, 0),
                        kv_mode=PAGED, kv_lens=lens, table=table, block_tokens=k_cache.shape[1], slopes=slopes,
                        slope_strides=slope_strides)
    lse = launch.output((hq, q.shape[0]), dtypes.float32, q.device) if return_lse else None
    tokens = lambda t: (0, t.strides[1], t.strides[0])  # noqa: E731
    return Operands(q, k_cache, v_cache, tokens(q), cache(k_cache), cache(v_cache), batch, hq, k_cache.shape[2],
                    _longest(cu_q), max_seq_len, out, tokens(out), lse, (0,) + (lse.strides if lse is not None else
                                                                                 (0, 0)),
                    cu_q=cu_q, kv_mode=PAGED, kv_lens=lens, table=table, block_tokens=k_cache.shape[1], slopes=slopes,
                    slope_strides=slope_strides)


@implements("paged_attention")
def _paged(q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q, alibi_slopes, options, return_lse, max_seq_len):
    check_supported("paged_attention", q, v_cache.shape[-1])
    ops = paged_operands(q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q, alibi_slopes, return_lse,
                         max_seq_len)
    run(ops, options)
    return ops.out, ops.lse


# ---- declared costs --------------------------------------------------------------------------------

def attention_cost(shape: Shape, options) -> Cost:
    """The output (and lse), the decode path's partials; K and V read once per block of query rows
    (once per KV head on the decode path), q and the output once; 4 flops per score and dim
    (q.k and p.v), the seen half of a causal square counted as half."""
    item = shape.dtype.itemsize
    rows = shape.batch * shape.q_heads * shape.q_len
    buffers = [Buffer("out", rows * shape.v_dim * item)]
    if shape.lse:
        buffers.append(Buffer("lse", rows * 4))
    if rows == 0:
        return Cost(tuple(buffers), 0, 0)
    kv_bytes = shape.batch * shape.kv_heads * shape.k_len * (shape.head_dim + shape.v_dim) * item
    moved = rows * (shape.head_dim + shape.v_dim) * item
    path, s = served(shape, options)
    launches = 1
    if path == "decode":
        splits, _ = decode_split(shape, s)
        part = splits * rows * (shape.v_dim + 1) * 4
        buffers.append(Buffer("partials", part, LAUNCH))
        moved += kv_bytes + 2 * part
        launches = 2
    else:
        moved += kv_bytes * math.ceil(shape.q_len * shape.group / s["block_m"])
    seen = 0.5 if options.causal and shape.q_len > 1 else 1.0
    flops = int(2 * rows * shape.k_len * (shape.head_dim + shape.v_dim) * seen)
    return Cost(tuple(buffers), moved, flops, launches)


def _sdpa_cost(q, k, v, attn_mask=None, alibi_slopes=None, options=None, return_lse=False):
    from nbx.core.ops.attention import AttentionOptions
    options = options or AttentionOptions(1.0 / math.sqrt(q.shape[-1]))
    batch = prod(q.shape[:-3]) if q.ndim > 3 else 1
    heads = lambda t: t.shape[-3] if t.ndim > 2 else 1  # noqa: E731
    shape = Shape(batch, heads(q), heads(k), q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], q.dtype, q.device,
                  lse=return_lse)
    return attention_cost(shape, options)


declares("scaled_dot_product_attention")(_sdpa_cost)

from . import rope  # noqa: E402,F401  (registers rotary_embedding)

__all__ = ["launch_sdpa", "run", "Operands", "Shape", "served", "attention_cost", "check_supported", "decode_split", "as_heads",
           "unit_last", "SUPPORTED", "MAX_HEAD_DIM", "DECODE_TOKENS"]
