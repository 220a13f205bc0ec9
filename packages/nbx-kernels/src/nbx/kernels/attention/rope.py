"""rotary_embedding: one kernel that rotates a block of tokens (all heads) and, fused, writes the
result into a paged cache's slots (and V beside it), which saves the separate pass of a cache write.

Dim a of each pair is i (half-split) or 2i (interleaved), dim b is i + rotary_dim/2 or 2i + 1:
out[a] = x[a] cos[a] - x[b] sin[a], out[b] = x[b] cos[b] + x[a] sin[b], HF's formula with its
tables. Dims past rotary_dim are copied. A token whose position is outside the table gets NaN in
its rotated dims (the host cannot check without waiting for the device). float32 arithmetic,
one rounding at the store.
"""
from __future__ import annotations

from math import prod

import triton
import triton.language as tl

from nbx.core.errors import NotSupportedError
from nbx.core.ops.paged import check_slots
from nbx.core.tensor import Tensor

from .. import launch, plans, rows
from ..cost import Buffer, Cost, declares
from ..dependent_launch import wait_for_predecessor
from ..plans import Launch, LaunchPlan, Slot
from ..elementwise.casts import narrow, widen
from ..registry import implements
from . import tuning


@triton.jit
def _load_heads(x_ptr, t, t_ok, heads, sxt, sxh, a, b, HALF: tl.constexpr, BLOCK_H: tl.constexpr,
                BLOCK_R: tl.constexpr):
    """Rows t of x (all heads): the pairs' dims a and b in float32, and where they lie."""
    h = tl.arange(0, BLOCK_H)
    ok = t_ok[:, None, None] & (h[None, :, None] < heads)
    if BLOCK_R != HALF:   # a power-of-two half needs no column mask (the loads stay 16-byte vectors)
        ok = ok & (tl.arange(0, BLOCK_R)[None, None, :] < HALF)
    x_rows = x_ptr + t.to(tl.int64)[:, None, None] * sxt + h[None, :, None] * sxh
    xa = widen(tl.load(x_rows + a[None, None, :], mask=ok, other=0.0), tl.float32)
    xb = widen(tl.load(x_rows + b[None, None, :], mask=ok, other=0.0), tl.float32)
    return xa, xb, x_rows, ok


@triton.jit
def _store_heads(xa, xb, x_rows, ok, out_ptr, row, t_ok, heads, sot, soh, a, b, ca, cb, sa, sb, bad,
                 HALF: tl.constexpr, DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_P: tl.constexpr):
    """The loaded pairs rotated by the tables' rows ca .. sb (loaded once for every head and every
    tensor a launch rotates) into out's rows row; the dims past rotary_dim copied."""
    h = tl.arange(0, BLOCK_H)
    out_a = tl.where(bad, float("nan"), xa * ca - xb * sa)
    out_b = tl.where(bad, float("nan"), xb * cb + xa * sb)
    o_rows = out_ptr + row[:, None, None] * sot + h[None, :, None] * soh
    tl.store(o_rows + a[None, None, :], narrow(out_a, out_ptr.dtype.element_ty), mask=ok)
    tl.store(o_rows + b[None, None, :], narrow(out_b, out_ptr.dtype.element_ty), mask=ok)
    if DIM > 2 * HALF:  # the dims past rotary_dim pass through
        p = 2 * HALF + tl.arange(0, BLOCK_P)
        pass_ok = t_ok[:, None, None] & (h[None, :, None] < heads) & (p[None, None, :] < DIM)
        kept = tl.load(x_rows + p[None, None, :], mask=pass_ok, other=0.0)
        tl.store(o_rows + p[None, None, :], narrow(widen(kept, tl.float32), out_ptr.dtype.element_ty), mask=pass_ok)


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, pos_ptr, out_ptr, slot_ptr, v_ptr, v_out_ptr, q_ptr, q_out_ptr,
                tokens, heads, q_heads, max_positions, out_rows, sxt, sxh, sct, sot, soh, svt, svh, svot, svoh,
                sqt, sqh, sqot, sqoh,
                HALF: tl.constexpr, DIM: tl.constexpr, V_DIM: tl.constexpr, INTERLEAVED: tl.constexpr,
                SLOTS: tl.constexpr, COPY_V: tl.constexpr, ROTATE_Q: tl.constexpr, BLOCK_TOKENS: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_QH: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
                BLOCK_V: tl.constexpr, PDL: tl.constexpr = False):
    """Grid: (cdiv(tokens, BLOCK_TOKENS),). SLOTS: out row of token t is slot[t] (a paged cache's
    row), else t; a slot outside 0 .. out_rows - 1 (-1: padding) is not written. COPY_V: v's row t
    copied to v_out's row of the same slot. ROTATE_Q: q's row t (q_heads heads) rotated too, into
    q_out's row t, with the same table rows (the decode step's q and k in one launch). HALF 0:
    nothing rotated (a plain cache write)."""
    wait_for_predecessor(PDL)  # no memory touched before: nbx.kernels.dependent_launch
    pid = tl.program_id(0)
    t = pid * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
    i = tl.arange(0, BLOCK_R)
    t_in = t < tokens
    if INTERLEAVED:
        a = 2 * i
        b = 2 * i + 1
    else:
        a = i
        b = i + HALF
    # x (and q) loaded first, under the token mask alone: in flight while the positions (and slots)
    # come back, on which the tables' addresses (and the stores' mask) wait
    xa, xb, x_rows, ok = _load_heads(x_ptr, t, t_in, heads, sxt, sxh, a, b, HALF, BLOCK_H, BLOCK_R)
    if ROTATE_Q:   # every token's q, padding tokens (slot -1) included: their rows are the step's
        qa, qb, q_rows, q_ok = _load_heads(q_ptr, t, t_in, q_heads, sqt, sqh, a, b, HALF, BLOCK_QH, BLOCK_R)
    pos = tl.load(pos_ptr + t, mask=t_in, other=0).to(tl.int64)
    t_ok = t_in
    row = t.to(tl.int64)
    if SLOTS:
        row = tl.load(slot_ptr + t, mask=t_in, other=-1).to(tl.int64)
        t_ok = t_in & (row >= 0) & (row < out_rows)
        row = tl.where(t_ok, row, 0)
        ok = ok & t_ok[:, None, None]   # a padding token's k is read, never written
    in_table = (pos >= 0) & (pos < max_positions)
    pos = tl.where(in_table, pos, 0)
    c_rows = pos[:, None, None] * sct
    table_ok = t_in[:, None, None] & (i[None, None, :] < HALF)
    ca = widen(tl.load(cos_ptr + c_rows + a[None, None, :], mask=table_ok, other=0.0), tl.float32)
    cb = widen(tl.load(cos_ptr + c_rows + b[None, None, :], mask=table_ok, other=0.0), tl.float32)
    sa = widen(tl.load(sin_ptr + c_rows + a[None, None, :], mask=table_ok, other=0.0), tl.float32)
    sb = widen(tl.load(sin_ptr + c_rows + b[None, None, :], mask=table_ok, other=0.0), tl.float32)
    bad = (~in_table)[:, None, None]
    _store_heads(xa, xb, x_rows, ok, out_ptr, row, t_ok, heads, sot, soh, a, b, ca, cb, sa, sb, bad, HALF, DIM,
                 BLOCK_H, BLOCK_P)
    if ROTATE_Q:
        _store_heads(qa, qb, q_rows, q_ok, q_out_ptr, t.to(tl.int64), t_in, q_heads, sqot, sqoh, a, b, ca, cb, sa,
                     sb, bad, HALF, DIM, BLOCK_QH, BLOCK_P)
    if COPY_V:
        h = tl.arange(0, BLOCK_H)
        e = tl.arange(0, BLOCK_V)
        v_ok = t_ok[:, None, None] & (h[None, :, None] < heads) & (e[None, None, :] < V_DIM)
        vals = tl.load(v_ptr + t.to(tl.int64)[:, None, None] * svt + h[None, :, None] * svh + e[None, None, :],
                       mask=v_ok, other=0.0)
        tl.store(v_out_ptr + row[:, None, None] * svot + h[None, :, None] * svoh + e[None, None, :],
                 narrow(widen(vals, tl.float32), v_out_ptr.dtype.element_ty), mask=v_ok)


def _pow2(n: int) -> int:
    return rows.pow2_at_least(n)


def _flat_tokens(x: Tensor) -> Tensor:
    """(*tokens, heads, dim) -> (tokens, heads, dim), the dim at unit stride."""
    x = x.reshape(prod(x.shape[:-2]), x.shape[-2], x.shape[-1]) if x.ndim != 3 else x
    return x if x.shape[-1] <= 1 or x.strides[-1] == 1 else x.contiguous()


def _table(t: Tensor) -> Tensor:
    return t if t.strides[-1] == 1 or t.shape[-1] <= 1 else t.contiguous()


def _build(x_layout, table, v_layout, target, v_target, interleaved, device, setting, q_layout=None) -> LaunchPlan:
    """The rope launch. x_layout, v_layout: (shape, strides, dtype) of the (tokens, heads, dim)
    inputs; table: (shape, row stride) of cos/sin or None (no rotation); target, v_target: the row
    and head strides of the cache rows written through slots, or None (a new output); q_layout:
    (shape, strides, dtype) of a q rotated in the same launch into a new output "q_out"."""
    (tokens, heads, dim), x_strides, dtype = x_layout
    q_heads, q_strides = (0, (0, 0)) if q_layout is None else (q_layout[0][1], q_layout[1])
    if setting is None:   # the launch's work: k's heads and q's
        setting = tuning.rope_setting(device, tokens * (heads + q_heads) * dim, dim, dtype)
    half, max_positions, table_stride = (0, 1, 0) if table is None else (table[0][1] // 2, table[0][0], table[1])
    outputs = ()
    slots = target is not None
    if target is None:
        outputs = (plans.output("out", (tokens, heads, dim), dtype),)
        target = (heads * dim, dim)
    if q_layout is not None:
        outputs += (plans.output("q_out", (tokens, q_heads, dim), q_layout[2]),)
    rows = Slot("out_rows")
    v_dim, v_strides = (dim, x_strides) if v_layout is None else (v_layout[0][2], v_layout[1])
    v_target = target if v_target is None else v_target
    block = setting["block_tokens"]
    args = (Slot("x"), Slot("cos"), Slot("sin"), Slot("positions"), Slot("out"), Slot("slots"), Slot("v"),
            Slot("v_out"), Slot("q") if q_layout else Slot("x"), Slot("q_out") if q_layout else Slot("x"), tokens, heads,
            q_heads, max_positions, rows, x_strides[0], x_strides[1], table_stride, *target, v_strides[0], v_strides[1],
            *v_target, *q_strides[:2], q_heads * dim, dim)
    meta = dict(HALF=half, DIM=dim, V_DIM=v_dim, INTERLEAVED=bool(interleaved), SLOTS=slots,
                COPY_V=v_layout is not None, ROTATE_Q=q_layout is not None, BLOCK_TOKENS=block, BLOCK_H=_pow2(heads),
                BLOCK_QH=_pow2(max(q_heads, 1)), BLOCK_R=_pow2(max(half, 1)),
                BLOCK_P=_pow2(max(dim - 2 * half, 1)), BLOCK_V=_pow2(v_dim), num_warps=setting["num_warps"])
    return LaunchPlan(device, (Launch(rope_kernel, (triton.cdiv(tokens, block),), args, meta),), outputs)


def _described(t: Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.strides), t.dtype)


def rope_plan(x, cos, sin, positions, interleaved, setting=None, slots=None, cache=None, v=None, v_cache=None,
              q=None):
    """(plan, values but "out") of one rope launch (launch_rope's arguments), the plan kept per
    call layout in the one plan cache."""
    if x.dtype.name not in ("float16", "bfloat16", "float32"):
        raise NotSupportedError(f"rotary_embedding on {x.device.type} takes float16, bfloat16 or float32; got "
                                f"{x.dtype.name}")
    device = x.device
    flat = _flat_tokens(x)
    tokens, heads, dim = flat.shape
    table = None
    if cos is not None:
        cos, sin = _table(cos), _table(sin)
        if cos.strides != sin.strides:
            cos, sin = cos.contiguous(), sin.contiguous()
        table = (tuple(cos.shape), cos.strides[0], cos.dtype, sin.dtype)
    vv = None if v is None else _flat_tokens(v)
    qq = None if q is None else _flat_tokens(q)
    target = None if cache is None else tuple(cache.strides[:2])
    v_target = None if v_cache is None else tuple(v_cache.strides[:2])
    q_layout = None if qq is None else _described(qq)
    signature = (_described(flat), table, None if vv is None else _described(vv), target, v_target, bool(interleaved),
                 device, plans.setting_key(setting), q_layout)
    plan = plans.cached("rotary_embedding", signature, lambda: _build(
        _described(flat), table and table[:2], None if vv is None else _described(vv), target, v_target,
        interleaved, device, setting, q_layout))
    if positions is not None and positions.ndim != 1:
        positions = positions.reshape(tokens)
    pos = _unit(positions) if positions is not None else _unit(slots)
    values = {"x": flat, "cos": cos if cos is not None else flat, "sin": sin if sin is not None else flat,
              "positions": pos, "out": cache, "slots": _unit(slots) if slots is not None else pos,
              "v": vv if vv is not None else flat, "v_out": v_cache if v_cache is not None else flat,
              "out_rows": cache.shape[0] if cache is not None else tokens, "q": qq}
    return plan, values


def launch_rope(x, cos, sin, positions, interleaved, out=None, setting=None, slots=None, cache=None, v=None,
                v_cache=None, q=None):
    """rotary_embedding of x into out (new, or a given contiguous one), or, with slots, into
    cache's rows slots[t] (cache: (rows, heads, dim), a view of a paged cache's blocks), v copied
    into v_cache alike, and q (with slots only) rotated in the same launch into a new tensor, which
    is then returned. cos None: nothing rotated (kv_cache_write)."""
    plan, values = rope_plan(x, cos, sin, positions, interleaved, setting, slots, cache, v, v_cache, q)
    tokens, heads, dim = values["x"].shape
    if slots is None:
        out = launch.output(x.shape, x.dtype, x.device, out)
        values["out"] = out.reshape(tokens, heads, dim)
    if q is not None:
        out = launch.output(q.shape, q.dtype, q.device)
        values["q_out"] = out.reshape(tokens, q.shape[-2], dim)
    if tokens == 0 or (heads == 0 and (q is None or q.shape[-2] == 0)):
        return out
    plans.execute(plan, values)
    return out


def _unit(t: Tensor) -> Tensor:
    """Positions or slots as the kernel reads them: int32 or int64 (it widens each to int64 as it
    loads it, so neither is cast: a cast would be a launch a call), at unit stride."""
    from nbx.core import dtypes
    if t.dtype is not dtypes.int32 and t.dtype is not dtypes.int64:
        t = t.to(dtype=dtypes.int32)
    return t if t.shape[0] <= 1 or t.strides[0] == 1 else t.contiguous()


def cache_rows(cache: Tensor) -> Tensor:
    """A (num_blocks, block_tokens, heads, dim) cache as (rows, heads, dim), refused where its
    blocks and their tokens do not merge into one strided dim."""
    if cache.strides[0] != cache.shape[1] * cache.strides[1] or (cache.shape[3] > 1 and cache.strides[3] != 1):
        raise NotSupportedError(f"a paged cache's blocks and tokens must merge into rows (strides {cache.strides} "
                                f"of shape {tuple(cache.shape)}): allocate it contiguous")
    return cache._view((cache.shape[0] * cache.shape[1], cache.shape[2], cache.shape[3]), cache.strides[1:])


def _rows_view(cache: Tensor) -> Tensor:
    """cache_rows of a cache whose layout was checked for this signature: the view, made unchecked."""
    shape, strides = cache.shape, cache._strides
    return Tensor._of(cache._storage, cache.dtype, (shape[0] * shape[1], shape[2], shape[3]), strides[1:],
                      cache._offset)


def _write(call, rotated: bool):
    return launch_rope(call.k, call.cos if rotated else None, call.sin if rotated else None,
                       call.positions if rotated else None, call.interleave if rotated else False, slots=call.slots,
                       cache=cache_rows(call.k_cache), v=call.v, v_cache=cache_rows(call.v_cache),
                       q=call.q if rotated else None)


@implements("kv_cache_write")
def _kv_cache_write(call):
    check_slots(call)
    _write(call, False)


@implements("rotary_kv_cache_write")
def _rotary_kv_cache_write(call):
    """The caches written; q's rotation returned when the call hands one (else None)."""
    check_slots(call)
    return _write(call, True)


def _prepare_write(call, rotated: bool):
    """A signature's repeats on a GPU (host memory checks each call's slots): the launcher, the
    caches' row views made unchecked (their layout is the signature's), positions and slots
    read as they are (int32 or int64 at unit stride, else the full path)."""
    k, slots, positions = call.k, call.slots, call.positions if rotated else None
    q = call.q if rotated else None
    if call.host_values or k.shape[0] == 0 or k.shape[1] == 0 or k.ndim != 3 or k.strides[-1] != 1 \
            or call.v.strides[-1] != 1 or (q is not None and (q.ndim != 3 or q.shape[1] == 0 or q.strides[-1] != 1)):
        return None
    plan, values = rope_plan(k, call.cos if rotated else None, call.sin if rotated else None, positions,
                             call.interleave if rotated else False, slots=slots, cache=cache_rows(call.k_cache),
                             v=call.v, v_cache=cache_rows(call.v_cache), q=q)
    if values["slots"] is not slots or (rotated and (values["positions"] is not positions or values["cos"] is not
                                                     call.cos or values["sin"] is not call.sin)):
        return None
    run = plans.prepared(plan)
    if run is None:
        return None
    out_rows = values["out_rows"]

    def repeat(c):
        kc = _rows_view(c.k_cache)
        values = {"x": c.k, "v": c.v, "out": kc, "v_out": _rows_view(c.v_cache), "slots": c.slots,
                  "out_rows": out_rows, "q": None, "q_out": None}
        if rotated:
            values.update(cos=c.cos, sin=c.sin, positions=c.positions, q=c.q)
        else:
            values.update(cos=c.k, sin=c.k, positions=c.slots)
        done = run(values)
        return done["q_out"] if q is not None else None
    return repeat


_kv_cache_write.prepare = lambda call: _prepare_write(call, False)
_rotary_kv_cache_write.prepare = lambda call: _prepare_write(call, True)


@implements("rotary_embedding")
def _rotary(call):
    return launch_rope(call.x, call.cos, call.sin, call.positions, call.interleave)


def _prepare_rotary(call):
    """A signature's repeats: the launcher, when x (tokens, heads, dim) and the tables are read as
    they are (no copy: a view of the whole qkv product is) and positions need no cast."""
    x = call.x
    if x.ndim != 3 or x.shape[0] == 0 or x.shape[1] == 0 or x.strides[-1] != 1:
        return None
    plan, values = rope_plan(x, call.cos, call.sin, call.positions, call.interleave)
    if values["positions"] is not call.positions or values["cos"] is not call.cos or values["sin"] is not call.sin:
        return None
    run = plans.prepared(plan)
    if run is None:
        return None
    rows = values["out_rows"]

    def repeat(c):
        x, p = c.x, c.positions
        return run({"x": x, "cos": c.cos, "sin": c.sin, "positions": p, "out": None, "slots": p, "v": x, "v_out": x,
                    "out_rows": rows, "q": None})["out"]
    return repeat


_rotary.prepare = _prepare_rotary


def rope_cost(call) -> Cost:
    """The output; x read and written once, each token's cos and sin rows once, its position."""
    x, cos, positions = call.x, call.cos, call.positions
    rotary_dim = cos.shape[1]
    tokens = prod(x.shape[:-2])
    moved = 2 * x.nbytes + tokens * (2 * rotary_dim * cos.dtype.itemsize + positions.dtype.itemsize)
    return Cost((Buffer("out", x.nbytes),), moved, 3 * x.size * rotary_dim // max(x.shape[-1], 1))


declares("rotary_embedding")(rope_cost)


def cache_write_cost(call) -> Cost:
    """kv_cache_write and rotary_kv_cache_write (in place: nothing allocated but the fused q's
    rotation): k and v read and written once to their rows, each token's slot; the fused form
    also each token's cos and sin rows and its position, and q read and written once."""
    k, v, slots = call.k, call.v, call.slots
    moved = 2 * (k.nbytes + v.nbytes) + slots.nbytes
    if call.spec.name == "kv_cache_write":
        return Cost((), moved, 0)
    q, cos, positions = call.q, call.cos, call.positions
    rotary_dim, dim = cos.shape[1], max(k.shape[-1], 1)
    moved += k.shape[0] * (2 * rotary_dim * cos.dtype.itemsize + positions.dtype.itemsize)
    rotated = k.size + (0 if q is None else q.size)
    buffers = () if q is None else (Buffer("q_out", q.nbytes),)
    return Cost(buffers, moved + (0 if q is None else 2 * q.nbytes), 3 * rotated * rotary_dim // dim)


declares("kv_cache_write")(cache_write_cost)
declares("rotary_kv_cache_write")(cache_write_cost)

__all__ = ["launch_rope", "rope_plan", "rope_kernel", "rope_cost", "cache_write_cost"]
