"""Attention on the kernel devices: scaled_dot_product_attention, varlen_attention and
paged_attention through one flash kernel (flash.py); rotary_embedding and the cache writes
through rope.py.

Every call is described by a `Layout` (hashable: each operand's (batch, head, token) strides with
the head dim at unit stride, the sizes, the flags and the options), which is the plan's signature
on the shared launch path (nbx.kernels.plans). The plan takes one of two paths:
- prefill: programs over blocks of query rows, each walking its keys once;
- decode, for a few query tokens (<= DECODE_TOKENS) whose group's rows fit one program: the keys
  split over programs to fill the device (flash-decoding), the partials merged by combine_kernel
  in a fixed order; where batch x KV heads fill the device already, one program a group and no
  partials.
Lengths that come from data (a packed batch's longest sequence, a paged batch's longest context)
enter the layout rounded up to a power of two: a decode loop keeps its plan for a doubling of its
context, the kernel reading each sequence's own length from the device.

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
from nbx.core.layout import reach
from nbx.core.tensor import Tensor

from .. import plans
from ..cost import Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from . import tuning
from .common import ADDITIVE_MASK, KEEP_MASK, NO_MASK
from ..matmul.epilogue import TMA_ALIGN
from .flash import DENSE, PACKED, PAGED, combine_kernel, prefill_kernel

SUPPORTED = ("float16", "bfloat16", "float32")
MAX_HEAD_DIM = 256
DECODE_TOKENS = 8      # query tokens a sequence may have for the split-K decode path
DECODE_ROWS = 128      # query rows (tokens x heads of a group) one decode program holds
_DOT = {"float16": tl.float16, "bfloat16": tl.bfloat16, "float32": tl.float32}
_NONE3 = (0, 0, 0)


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


def contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Layout:
    """One attention call in the kernel's terms; strides are (batch, head, token) in elements."""
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int              # fixed, or (packed) the longest rounded up to a power of two
    k_len: int              # fixed, or (packed, paged) the longest rounded up to a power of two
    head_dim: int
    v_dim: int
    dtype: object
    device: object
    q_strides: tuple = _NONE3
    k_strides: tuple = _NONE3
    v_strides: tuple = _NONE3
    out_shape: tuple = ()
    out_strides: tuple = _NONE3
    lse_shape: tuple | None = None
    lse_strides: tuple = _NONE3
    varlen_q: bool = False
    kv_mode: int = DENSE
    block_tokens: int = 1
    table_stride: int = 0
    mask_kind: int = NO_MASK
    mask_strides: tuple = (0, 0, 0, 0)
    alibi: bool = False
    slope_strides: tuple = (0, 0)
    wide: bool = False      # K or V offsets may pass int32
    tma: bool = False       # K and V readable through tensor descriptors (descriptor_ready)

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def decodes(self) -> bool:
        return self.q_len <= DECODE_TOKENS and self.q_len * self.group <= DECODE_ROWS

    @property
    def query_rows(self) -> tuple[int, int]:
        """(batch, tokens) of the query rows as they lie: packed, one batch of total_q tokens
        (a row's sequence comes from cu_q), else batch x q_len."""
        return (1, self.out_shape[0]) if self.varlen_q else (self.batch, self.q_len)


def decode_split(lay: Layout, setting) -> tuple[int, int]:
    """(splits, split_len): the setting's programs over batch x KV heads (the device file's tile
    until a key is certified: enough to fill the device), each at least one block of keys."""
    programs = setting["programs"]
    block_n = setting["block_n"]
    blocks = max(1, math.ceil(lay.k_len / block_n))
    splits = min(blocks, max(1, math.ceil(programs / max(1, lay.batch * lay.kv_heads))))
    split_len = math.ceil(blocks / splits) * block_n
    return (math.ceil(lay.k_len / split_len) if lay.k_len else 1), split_len


def descriptor_ready(k, v, k_strides, v_strides) -> bool:
    """Whether K and V (dense or packed) can be read through tensor descriptors: every (batch,
    head, token) stride and both bases 16-byte aligned (a tensor not made yet, a _Strided, will be
    a fresh allocation: aligned)."""
    item = k.dtype.itemsize if hasattr(k, "dtype") else 0
    strides_ok = all(st * item % TMA_ALIGN == 0 for st in (*k_strides, *v_strides))
    bases_ok = all(not hasattr(t, "data_ptr") or t.data_ptr() % TMA_ALIGN == 0 for t in (k, v))
    return bool(item) and strides_ok and bases_ok


def served(lay: Layout, options, setting=None, decode_setting=None):
    """("decode" or "prefill", the setting it launches with)."""
    if lay.decodes:
        if decode_setting is None:
            decode_setting = tuning.decode_setting(lay.device, lay.k_len, lay.q_len * lay.group, lay.head_dim,
                                                   lay.dtype, lay.kv_mode == PAGED, lay.batch)
        return "decode", decode_setting
    if setting is None:
        setting = tuning.prefill_setting(lay.device, lay.q_len, lay.k_len, lay.head_dim, lay.v_dim, lay.group,
                                         lay.dtype, options.causal, lay.tma)
    return "prefill", setting


_TENSORS = ("q", "k", "v", "out", "lse", "mask", "slopes", "cu_q", "kv_lens", "table")


def _arguments(lay: Layout, options, out: str, out_strides, lse: str, lse_strides, split_len: int, split_strides):
    slots = [Slot(name) for name in _TENSORS]
    slots[3], slots[4] = Slot(out), Slot(lse)
    return (*slots, lay.q_len, lay.k_len, lay.kv_heads, options.window_left or 0, options.right or 0,
            lay.block_tokens, lay.table_stride, *lay.q_strides, *lay.k_strides, *lay.v_strides, *out_strides,
            *lse_strides, *lay.mask_strides, *lay.slope_strides, float(options.scale), float(options.softcap or 1.0),
            split_len, *split_strides)


def _build(lay: Layout, options, setting, decode_setting) -> LaunchPlan:
    path, s = served(lay, options, setting, decode_setting)
    flags = dict(GROUP=lay.group, HEAD_DIM=lay.head_dim, V_DIM=lay.v_dim,
                 BLOCK_D=tuning.pow2_at_least(lay.head_dim), BLOCK_DV=tuning.pow2_at_least(lay.v_dim),
                 VARLEN_Q=lay.varlen_q, KV_MODE=lay.kv_mode, BOTTOM_RIGHT=options.alignment == "bottom_right",
                 HAS_LEFT=options.window_left is not None, HAS_RIGHT=options.right is not None,
                 SOFTCAP=options.softcap > 0, ALIBI=lay.alibi, MASK_KIND=lay.mask_kind, DOT=_DOT[lay.dtype.name],
                 IEEE=lay.dtype is dtypes.float32, WIDE=lay.wide,
                 FOLD=options.scale > 0 and not options.softcap > 0 and not lay.alibi and lay.mask_kind != ADDITIVE_MASK,
                 num_warps=s["num_warps"], num_stages=s["num_stages"])
    outputs = (plans.output("out", lay.out_shape, lay.dtype),)
    if lay.lse_shape is not None:
        outputs += (plans.output("lse", lay.lse_shape, dtypes.float32),)
    if path == "prefill":
        grid = (max(1, math.ceil(lay.q_len * lay.group / s["block_m"])), lay.batch * lay.kv_heads)
        args = _arguments(lay, options, "out", lay.out_strides, "lse" if lay.lse_shape else "q", lay.lse_strides, 0,
                          (0, 0))
        # descriptors where the setting asks and the call allows (a certified key's tma flag is lay.tma)
        tma = s["loads"] == "tma" and lay.tma
        one = Launch(prefill_kernel, grid, args, dict(BLOCK_M=s["block_m"], BLOCK_N=s["block_n"],
                                                      WRITE_LSE=lay.lse_shape is not None, SPLIT=False, TMA=tma,
                                                      maxnreg=s["max_registers"] or None, **flags),
                     descriptors=2 if tma else 0)   # K's and V's (flash.py)
        return LaunchPlan(lay.device, (one,), outputs, (), (), ("prefill", dict(s), 1))
    splits, split_len = decode_split(lay, s)
    rows_block = tuning.pow2_at_least(lay.q_len * lay.group)
    if splits == 1:  # batch x KV heads fill the device already: one program a group, no partials
        args = _arguments(lay, options, "out", lay.out_strides, "lse" if lay.lse_shape else "q", lay.lse_strides, 0,
                          (0, 0))
        one = Launch(prefill_kernel, (1, lay.batch * lay.kv_heads), args,
                     dict(BLOCK_M=rows_block, BLOCK_N=s["block_n"], WRITE_LSE=lay.lse_shape is not None, SPLIT=False,
                          TMA=False, **flags))
        return LaunchPlan(lay.device, (one,), outputs, (), (), ("decode", dict(s), 1))
    batch, tokens = lay.query_rows
    rows = batch * lay.q_heads * tokens
    part_shape = (splits, batch, lay.q_heads, tokens)
    part, part_lse = contiguous_strides((*part_shape, lay.v_dim)), contiguous_strides(part_shape)
    if lay.varlen_q:  # the kernel's b is the sequence; its rows are packed, so no batch stride
        part, part_lse = (part[0], 0, *part[2:]), (part_lse[0], 0, *part_lse[2:])
    workspace = (plans.workspace("partials", (*part_shape, lay.v_dim), dtypes.float32),
                 plans.workspace("partial_lse", part_shape, dtypes.float32))
    split = Launch(prefill_kernel, (splits, lay.batch * lay.kv_heads),
                   _arguments(lay, options, "partials", part[1:4], "partial_lse", part_lse[1:4], split_len,
                              (part[0], part_lse[0])),
                   dict(BLOCK_M=rows_block, BLOCK_N=s["block_n"], WRITE_LSE=True, SPLIT=True, TMA=False, **flags))
    lse = "lse" if lay.lse_shape is not None else "partial_lse"
    merge = Launch(combine_kernel, (rows,),
                   (Slot("partials"), Slot("partial_lse"), Slot("out"), Slot(lse), lay.q_heads * tokens,
                    lay.q_heads, splits, *lay.out_strides, *(lay.lse_strides if lay.lse_shape else _NONE3)),
                   dict(V_DIM=lay.v_dim, BLOCK_S=tuning.pow2_at_least(splits, 2),
                        BLOCK_DV=tuning.pow2_at_least(lay.v_dim), WRITE_LSE=lay.lse_shape is not None, num_warps=4))
    return LaunchPlan(lay.device, (split, merge), outputs, workspace, (), ("decode", dict(s), splits))


def launch_plan(lay: Layout, options, setting=None, decode_setting=None) -> LaunchPlan:
    signature = (lay, options, plans.setting_key(setting), plans.setting_key(decode_setting))
    return plans.cached("attention", signature, lambda: _build(lay, options, setting, decode_setting))


def execute(lay: Layout, options, values: dict, setting=None, decode_setting=None):
    """(out, lse or None) of the call lay describes, its tensors in values."""
    if prod(lay.out_shape) == 0:
        from .. import launch
        out = values.get("out") if values.get("out") is not None else launch.output(lay.out_shape, lay.dtype,
                                                                                     lay.device)
        lse = launch.output(lay.lse_shape, dtypes.float32, lay.device) if lay.lse_shape is not None else None
        return out, lse
    q = values["q"]
    for name in _TENSORS:  # a slot the launch never reads (no mask, no table) still takes a pointer
        if values.get(name) is None and name not in ("out", "lse"):
            values[name] = q
    done = plans.execute(launch_plan(lay, options, setting, decode_setting), values)
    return done["out"], done.get("lse") if lay.lse_shape is not None else None


def wide(*tensors) -> bool:
    """Whether an offset into one of tensors (its farthest element) may pass int32."""
    return any(reach(t.shape, t.strides) - 1 >= 2 ** 31 - 1
               for t in tensors if t is not None and t.size)


def pow2_bucket(n: int) -> int:
    return 0 if n <= 0 else tuning.pow2_at_least(n, 1)


def _mask_kind(mask) -> int:
    return NO_MASK if mask is None else (KEEP_MASK if mask.dtype.kind == "bool" else ADDITIVE_MASK)


# ---- the dense front-end ---------------------------------------------------------------------------

def as_heads(t: Tensor) -> Tensor:
    """(*batch, H, T, D) -> (n, H, T, D); (H, T, D) and (T, D) gain the missing dims (views where
    the batch dims merge, else a copy)."""
    while t.ndim < 4:
        t = t.unsqueeze(0)
    if t.ndim > 4:
        t = t.reshape(prod(t.shape[:-3]), *t.shape[-3:])
    return t


def _heads_strides(shape) -> tuple:
    """The (batch, head, token) strides of a contiguous (*batch, H, T, D) tensor."""
    strides = contiguous_strides(as_heads_shape(shape))
    return strides[:3]


def as_heads_shape(shape) -> tuple:
    shape = (1,) * max(0, 4 - len(shape)) + tuple(shape)
    return (prod(shape[:-3]), *shape[-3:])


def _prepared(t: Tensor, copy: bool):
    """as_heads(t) with its head dim at unit stride; without copy (a cost), what the copy would be."""
    needs_copy = t.ndim > 4 or (t.shape[-1] > 1 and t.strides[-1] != 1)
    if needs_copy and not copy:
        shape = as_heads_shape(t.shape)
        return _Strided(contiguous_strides(shape), shape)
    return unit_last(as_heads(t))


def dense_layout(q, k, v, mask, slopes, return_lse, copy=True):
    """(Layout, values) of scaled_dot_product_attention's operands (after as_heads and unit_last;
    copy False: the layout without making the copies, for a cost)."""
    q4, k4, v4 = (_prepared(t, copy) for t in (q, k, v))
    n, hq, q_len, _ = q4.shape
    out_shape = (*q.shape[:-1], v.shape[-1])
    lse_shape = tuple(q.shape[:-1]) if return_lse else None
    mask4 = None if mask is None else _prepared(mask.broadcast_to((*q.shape[:-1], k.shape[-2])), copy)
    slopes2, slope_strides = None, (0, 0)
    if slopes is not None:
        slopes2 = slopes if slopes.ndim == 1 else slopes.broadcast_to(q.shape[:-2]).reshape(n, hq)  # small
        slope_strides = (0, slopes2.strides[0]) if slopes2.ndim == 1 else slopes2.strides
    lay = Layout(n, hq, k4.shape[1], q_len, k4.shape[2], q4.shape[3], v4.shape[3], q.dtype, q.device,
                 q4.strides[:3], k4.strides[:3], v4.strides[:3], out_shape, _heads_strides(out_shape), lse_shape,
                 _heads_strides((*lse_shape, 1)) if lse_shape else _NONE3, mask_kind=_mask_kind(mask),
                 mask_strides=mask4.strides if mask4 is not None else (0, 0, 0, 0), alibi=slopes is not None,
                 slope_strides=slope_strides, wide=wide(k, v),
                 tma=descriptor_ready(k4 if copy else k, v4 if copy else v, k4.strides[:3], v4.strides[:3]))
    return lay, {"q": q4, "k": k4, "v": v4, "mask": mask4, "slopes": slopes2}


def launch_sdpa(q, k, v, mask, slopes, options, return_lse=False, out=None, setting=None, decode_setting=None):
    """scaled_dot_product_attention into out (new, or a given contiguous one); setting and
    decode_setting override the served ones (the certifier's)."""
    check_supported("scaled_dot_product_attention", q, v.shape[-1])
    lay, values = dense_layout(q, k, v, mask, slopes, return_lse)
    if out is not None:
        from .. import launch
        values["out"] = launch.output(lay.out_shape, q.dtype, q.device, out)
    return execute(lay, options, values, setting, decode_setting)


@implements("scaled_dot_product_attention")
def _sdpa(q, k, v, attn_mask, alibi_slopes, options, return_lse):
    return launch_sdpa(q, k, v, attn_mask, alibi_slopes, options, return_lse)


# ---- varlen and the paged cache ---------------------------------------------------------------------

def _longest(cu: Tensor) -> int:
    offsets = cu.numpy()
    return int((offsets[1:] - offsets[:-1]).max()) if offsets.shape[0] > 1 else 0


def _slope_strides(slopes) -> tuple:
    return (0, 0) if slopes is None else (0, slopes.strides[0]) if slopes.ndim == 1 else slopes.strides


def _packed(t: Tensor) -> tuple:
    return (0, t.strides[1], t.strides[0])   # (tokens, heads, dim): no batch stride, rows from cu


def _unit_or_strided(t: Tensor, copy: bool):
    """unit_last(t); without copy (a cost), the layout its copy would have."""
    if not copy and t.shape[-1] > 1 and t.strides[-1] != 1:
        return _Strided(contiguous_strides(t.shape), t.shape)
    return unit_last(t)


def varlen_layout(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, return_lse, copy=True, max_seqlen_q=None,
                  max_seqlen_k=None):
    """(Layout, values) of one varlen_attention call, sized by the bounds on a sequence's tokens
    (None: read from the offsets, a wait on a GPU); copy False: the layout without making the
    head-dim copies (for a cost)."""
    check_supported("varlen_attention", q, v.shape[-1])
    max_seqlen_q = _longest(cu_seqlens_q) if max_seqlen_q is None else max_seqlen_q
    max_seqlen_k = _longest(cu_seqlens_k) if max_seqlen_k is None else max_seqlen_k
    q3, k3, v3 = (_unit_or_strided(t, copy) for t in (q, k, v))
    out_shape = (q.shape[0], q.shape[1], v.shape[2])
    lse_shape = (q.shape[1], q.shape[0]) if return_lse else None
    lay = Layout(cu_seqlens_q.shape[0] - 1, q.shape[1], k.shape[1], pow2_bucket(max_seqlen_q),
                 pow2_bucket(max_seqlen_k), q.shape[2], v.shape[2], q.dtype, q.device, _packed(q3),
                 _packed(k3), _packed(v3), out_shape, _packed_out(out_shape), lse_shape,
                 (0, q.shape[0], 1) if return_lse else _NONE3, varlen_q=True, kv_mode=PACKED,
                 alibi=alibi_slopes is not None, slope_strides=_slope_strides(alibi_slopes),
                 wide=wide(k3 if copy else k, v3 if copy else v),
                 tma=descriptor_ready(k3 if copy else k, v3 if copy else v, _packed(k3), _packed(v3)))
    return lay, {"q": q3, "k": k3, "v": v3, "slopes": alibi_slopes, "cu_q": _unit_rows(cu_seqlens_q) if copy else None,
                 "kv_lens": _unit_rows(cu_seqlens_k) if copy else None}


@implements("varlen_attention")
def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, options, return_lse, max_seqlen_q=None,
            max_seqlen_k=None):
    lay, values = varlen_layout(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, return_lse,
                                max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return execute(lay, options, values)


def _packed_out(shape) -> tuple:
    return _packed(_Strided(contiguous_strides(shape)))


class _Strided:
    """The layout of a tensor not made (yet): a contiguous one's strides and shape."""
    def __init__(self, strides, shape=()):
        self.strides, self.shape = strides, shape


def _unit_rows(t: Tensor) -> Tensor:
    """An index tensor (lengths, offsets, a block table) as int32 with unit stride in its last dim:
    the kernel's length arithmetic is int32 throughout."""
    if t.dtype is not dtypes.int32:
        t = t.to(dtype=dtypes.int32)
    return t if t.shape[-1] <= 1 or t.strides[-1] == 1 else t.contiguous()


@implements("paged_attention")
def _paged(call):
    """A checked paged_attention (nbx.core.ops.paged's spec): its bounds from the call (checked
    there on host memory), then the launch."""
    from nbx.core.ops.paged import paged_bounds
    max_seq_len, max_q_len = paged_bounds(call)
    out, lse = launch_paged(call.q, call.k_cache, call.v_cache, call.block_table, call.seq_lens, call.cu_seqlens_q,
                            call.alibi_slopes, call.options, call.return_lse, max_seq_len, max_q_len=max_q_len)
    return (out, lse) if call.return_lse else out


def _prepare_paged(call):
    """A signature's repeats on a GPU: the plan's launcher, looked up once. The plan reads the
    layouts and the bounds (in the signature: max_seq_len, max_q_len by value), never an address;
    host-memory devices check every call's values, and index tensors that need an int32 copy take
    the full path."""
    from nbx.core.ops.paged import paged_bounds
    if call.host_values or call.max_seq_len is None:
        return None
    max_seq_len, max_q_len = paged_bounds(call)   # the given bounds: nothing read
    lay, values = paged_layout(call.q, call.k_cache, call.v_cache, call.block_table, call.seq_lens,
                               call.cu_seqlens_q, call.alibi_slopes, call.return_lse, max_seq_len, max_q_len)
    if prod(lay.out_shape) == 0 or values["q"] is not call.q or values["table"] is not call.block_table \
            or values["kv_lens"] is not call.seq_lens or values["cu_q"] is not call.cu_seqlens_q:
        return None
    run = plans.prepared(launch_plan(lay, call.options))
    if run is None:
        return None
    with_lse = call.return_lse

    def repeat(c):
        q = c.q
        slopes = c.alibi_slopes
        done = run({"q": q, "k": c.k_cache, "v": c.v_cache, "out": None, "lse": None, "mask": q,
                    "slopes": q if slopes is None else slopes, "cu_q": q if c.cu_seqlens_q is None else c.cu_seqlens_q,
                    "kv_lens": c.seq_lens, "table": c.block_table})
        return (done["out"], done["lse"]) if with_lse else done["out"]
    return repeat


_paged.prepare = _prepare_paged


def _index_rows(t: Tensor, copy: bool):
    """_unit_rows(t); without copy (a cost), the layout its int32 copy would have."""
    if not copy and (t.dtype is not dtypes.int32 or (t.shape[-1] > 1 and t.strides[-1] != 1)):
        return _Strided(contiguous_strides(t.shape), t.shape)
    return _unit_rows(t)


def paged_layout(q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q, alibi_slopes, return_lse, max_seq_len,
                 max_q_len=None, copy=True):
    """(Layout, values) of one paged_attention call: its operands as the kernel reads them (q's
    head dim at unit stride, the index tensors int32), sized by max_seq_len and (packed q)
    max_q_len (None: total_q); copy False: the layout without making those copies (for a cost)."""
    from .rope import cache_rows
    check_supported("paged_attention", q, v_cache.shape[-1])
    cache_rows(k_cache), cache_rows(v_cache)  # refused unless blocks and tokens merge into rows
    dtype, device = q.dtype, q.device
    q, table, lens = _unit_or_strided(q, copy), _index_rows(block_table, copy), _index_rows(seq_lens, copy)
    batch, hq, ev = seq_lens.shape[0], q.shape[-2], v_cache.shape[3]
    cache = lambda c: (0, c.strides[2], c.strides[1])  # noqa: E731  (no batch stride: the table says)
    out_shape = (*q.shape[:-1], ev)
    common = dict(kv_mode=PAGED, block_tokens=k_cache.shape[1], table_stride=table.strides[0],
                  alibi=alibi_slopes is not None, slope_strides=_slope_strides(alibi_slopes),
                  wide=wide(k_cache, v_cache))
    if cu_seqlens_q is None:  # (batch, q_len, Hq, E)
        tokens = lambda st: (st[0], st[2], st[1])  # noqa: E731
        lse_shape = (batch, hq, q.shape[1]) if return_lse else None
        lay = Layout(batch, hq, k_cache.shape[2], q.shape[1], pow2_bucket(max_seq_len), q.shape[-1], ev, dtype,
                     device, tokens(q.strides), cache(k_cache), cache(v_cache), out_shape,
                     tokens(contiguous_strides(out_shape)), lse_shape,
                     contiguous_strides(lse_shape) if lse_shape else _NONE3, **common)
    else:
        lse_shape = (hq, q.shape[0]) if return_lse else None
        bound = q.shape[0] if max_q_len is None else max_q_len
        lay = Layout(batch, hq, k_cache.shape[2], pow2_bucket(bound), pow2_bucket(max_seq_len),
                     q.shape[-1], ev, dtype, device, _packed(q), cache(k_cache), cache(v_cache), out_shape,
                     _packed_out(out_shape), lse_shape, (0, q.shape[0], 1) if return_lse else _NONE3, varlen_q=True,
                     **common)
    cu_q = None if cu_seqlens_q is None else _index_rows(cu_seqlens_q, copy)
    return lay, {"q": q, "k": k_cache, "v": v_cache, "slopes": alibi_slopes, "cu_q": cu_q, "kv_lens": lens,
                 "table": table}


def launch_paged(q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q, alibi_slopes, options, return_lse,
                 max_seq_len, out=None, setting=None, decode_setting=None, max_q_len=None):
    """paged_attention into out (new, or a given contiguous one); setting and decode_setting
    override the served ones (the certifier's). Nothing is read back from the device: the plan is
    sized by max_seq_len and (packed q) max_q_len, bounds the front-end supplies (max_q_len None:
    total_q), each rounded up to a power of two; the kernel reads every sequence's own lengths."""
    lay, values = paged_layout(q, k_cache, v_cache, block_table, seq_lens, cu_seqlens_q, alibi_slopes, return_lse,
                               max_seq_len, max_q_len)
    if out is not None:
        from .. import launch
        values["out"] = launch.output(lay.out_shape, q.dtype, q.device, out)
    return execute(lay, options, values, setting, decode_setting)


# ---- declared costs --------------------------------------------------------------------------------

def attention_cost(lay: Layout, options, kv_tokens: int | None = None, pairs: int | None = None) -> Cost:
    """The plan's outputs and workspace; K and V read once per block of query rows (once per KV
    head on the decode path), q and the output once; 4 flops per score and dim (q.k and p.v), the
    seen half of a causal square counted as half. kv_tokens: the key tokens a KV head holds over
    the batch, pairs: the (query token, key) pairs of a query head; both default to the dense
    call's batch x lengths (packed and paged calls give theirs: a paged call's bound is its
    max_seq_len, the lengths staying on the device)."""
    rows = prod(lay.out_shape[:-1])   # query rows as they lie (dense, packed or paged)
    if rows == 0:
        return Cost((plans.output("out", lay.out_shape, lay.dtype).buffer(),), 0, 0)
    lp = launch_plan(lay, options)
    path, setting, splits = lp.detail
    item = lay.dtype.itemsize
    kv_tokens = lay.batch * lay.k_len if kv_tokens is None else kv_tokens
    pairs = lay.batch * lay.q_len * lay.k_len if pairs is None else pairs
    kv_bytes = lay.kv_heads * kv_tokens * (lay.head_dim + lay.v_dim) * item
    moved = rows * (lay.head_dim + lay.v_dim) * item
    if path == "decode":
        moved += kv_bytes + 2 * sum(w.nbytes for w in lp.workspace)
    else:
        moved += kv_bytes * math.ceil(lay.q_len * lay.group / setting["block_m"])
    if lay.kv_mode == PAGED:   # a table entry a block of keys
        moved += lay.batch * math.ceil(lay.k_len / lay.block_tokens) * 4
    seen = 0.5 if options.causal and lay.q_len > 1 else 1.0
    flops = int(2 * lay.q_heads * pairs * (lay.head_dim + lay.v_dim) * seen)
    return Cost(lp.buffers(), moved, flops, len(lp.launches))


def _sdpa_cost(q, k, v, attn_mask=None, alibi_slopes=None, options=None, return_lse=False):
    from nbx.core.ops.attention import AttentionOptions
    options = options or AttentionOptions(1.0 / math.sqrt(q.shape[-1]))
    return attention_cost(dense_layout(q, k, v, attn_mask, alibi_slopes, return_lse, copy=False)[0], options)


declares("scaled_dot_product_attention")(_sdpa_cost)


def _varlen_cost(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes=None, options=None, return_lse=False,
                 max_seqlen_q=None, max_seqlen_k=None):
    """varlen_attention's cost (its implementation's arguments). Given the bounds nothing is read
    and a query is counted against max_seqlen_k keys; else the offsets are read (as the launch
    would for its grid) and the pairs are each sequence's own."""
    from nbx.core.ops.attention import AttentionOptions
    options = options or AttentionOptions(1.0 / math.sqrt(q.shape[-1]))
    lay = varlen_layout(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, return_lse, False, max_seqlen_q,
                        max_seqlen_k)[0]
    if max_seqlen_k is not None:
        return attention_cost(lay, options, kv_tokens=k.shape[0], pairs=q.shape[0] * max_seqlen_k)
    ends_q, ends_k = (cu.numpy().astype("int64") for cu in (cu_seqlens_q, cu_seqlens_k))   # one read each
    lens_q, lens_k = ends_q[1:] - ends_q[:-1], ends_k[1:] - ends_k[:-1]
    return attention_cost(lay, options, kv_tokens=k.shape[0], pairs=int((lens_q * lens_k).sum()))


def _paged_cost(call) -> Cost:
    """paged_attention's cost from its checked call: sized by max_seq_len (read from seq_lens where
    the call gives none, as the launch does), each sequence counted at that bound."""
    from nbx.core.ops.paged import paged_bounds
    max_seq_len, max_q_len = paged_bounds(call)
    lay, _ = paged_layout(call.q, call.k_cache, call.v_cache, call.block_table, call.seq_lens, call.cu_seqlens_q,
                          call.alibi_slopes, call.return_lse, max_seq_len, max_q_len, copy=False)
    queries = call.q.shape[0] if call.cu_seqlens_q is not None else call.q.shape[0] * call.q.shape[1]
    return attention_cost(lay, call.options, kv_tokens=lay.batch * max_seq_len, pairs=queries * max_seq_len)


declares("varlen_attention")(_varlen_cost)
declares("paged_attention")(_paged_cost)

from . import rope  # noqa: E402,F401  (registers rotary_embedding and the cache writes)

__all__ = ["launch_sdpa", "launch_paged", "launch_plan", "execute", "Layout", "dense_layout", "served", "attention_cost",
           "check_supported", "decode_split", "as_heads", "unit_last", "SUPPORTED", "MAX_HEAD_DIM", "DECODE_TOKENS"]
