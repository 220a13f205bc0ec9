"""linear, addmm, baddbmm and gated_linear on the kernel devices: one fused launch (fused.py).

The front-ends (nbx.core.ops.products) hand every product with an epilogue to "linear":
x [..., K] (or a batch [B, M, K]) times weight [N, K] (or [B, N, K]) read through its transpose
in place, bias and residual broadcast to the result. A 2-D weight takes every leading dim of x as
rows: x is viewed as (rows, K), copied only where its strides cannot merge; bias and residual are
read through their strides over the result (stride 0 where broadcast), copied only where
broadcast leading dims cannot merge into rows. The plan (pure: layouts and the served setting in,
launch constants out) is kept per call layout.

Decode rows: the certified setting of the key decides the tile and split_k; with split_k > 1 the
products land in float32 (float64) partials, workspace of the call, and a second launch sums them
in a fixed order and applies the epilogue; the gemv kernel (kernel.gemv_k_steps) sums on the CUDA
cores, unsplit, in one launch. K == 0 runs the same launch (no K steps): the epilogue
of a zero product.

norm (weight, eps): the product of rms_norm(x, weight, eps), the norm fused into the pointer kernel's
A loads (fused.py, NORM; kernel.normed_k_steps): rms_norm(x) @ W.T = rstd * ((x * weight) @ W.T),
so each K step multiplies x * weight (rounded once to x's dtype) and sums x**2 from the same tile;
the rows' rstd scales the accumulators once K is complete (split K: each split's sums of squares
go to a [split_k, M] workspace that the split epilogue adds in order). x is read once, as without
the norm: the norm costs its weight's bytes and no launch. x * weight must be finite in x's dtype
(a float16 residual stream of |x * w| > 65504 overflows where rms_norm would not). The launch key is
the plain or gated product's; the tma kernel has no norm, so a key certified for it refuses a
normed call by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import triton.language as tl

from nbx.core import dtypes, layout
from nbx.core.dtypes import DType
from nbx.core.errors import NotSupportedError
from nbx.core.promotion import result_type
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..elementwise.casts import COMPILED
from ..cost import LAUNCH, Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..rows import float_bits
from ..types import tl_type
from . import INT32_MAX, check_dtypes
from .fused import bias_form, fused_matmul_kernel, split_epilogue_kernel
from .kernel import SCALE_BLOCK
from .hopper import tf32_round_kernel, tma_matmul_kernel
from .linear_tuning import linear_setting
from .tuning import block_k_that_fits, epilogue_bytes, half_store, stages_that_fit

SPLIT_BLOCK = 1024   # elements a program of the split-K epilogue sums (a store pass: its size barely matters)
ROUND_BLOCK = (8, 512)   # rows x columns a program of the TF32 rounding pass takes (a copy: its size barely matters)


@dataclass(frozen=True)
class LinearPlan:
    batch: int
    m: int
    n: int
    k: int
    a: tuple             # (batch, row, k) strides of A after any copy
    b: tuple             # (batch, k, n) strides of B (the weight's transpose)
    bias: tuple | None   # (batch, row, n) strides of the bias over the result
    residual: tuple | None
    copies: tuple        # operands read through a dense copy: "x", "bias", "residual"
    split_k: int
    meta: tuple          # the kernel's constants and launch options
    split_meta: tuple    # the split epilogue's constants
    tma: bool = False    # the persistent descriptor kernel (hopper.py) instead of the pointer kernel
    scales: tuple | None = None   # (x scale, weight scale) strides of a scaled (float8) product
    out_shape: tuple = ()
    dtype: DType | None = None
    norm: bool = False   # x RMS-normed in the loads (the norm weight and eps per call)

    @property
    def grid(self) -> tuple[int, ...]:
        meta = dict(self.meta)
        tiles = -(-self.m // meta["BLOCK_M"]) * -(-self.n // meta["BLOCK_N"])
        if self.tma:
            return (min(tiles, meta["PROGRAMS"]),)
        return (self.batch * tiles, self.split_k)

    def partial_shape(self, gated: bool) -> tuple[int, ...]:
        return ((2 if gated else 1), self.batch, self.split_k, self.m, self.n) if self.split_k > 1 else (0,)

    @property
    def squares_shape(self) -> tuple[int, ...] | None:
        """A split normed product's workspace: each split's sums of x**2 of each row."""
        return (self.split_k, self.m) if self.norm and self.split_k > 1 and not self.tma else None


def out_shape(x_shape, w_shape) -> tuple[int, ...]:
    return tuple(x_shape[:-1]) + (w_shape[-2],)


def _rows(shape, strides, rows: int, width: int):
    """(row, column) strides of a tensor viewed as (rows, width), or None when a copy is needed."""
    found = layout.view_strides(tuple(shape), tuple(strides), (rows, width))
    return None if found is None else tuple(found)


def _addend_strides(shape, strides, out: tuple, batched: bool, rows: int):
    """An addend's (batch, row, n) strides over the result, or None where it must be copied."""
    broadcast = layout.broadcast_strides(tuple(shape), tuple(strides), out)
    if batched:
        return tuple(broadcast)
    flat = _rows(out, broadcast, rows, out[-1])
    return None if flat is None else (0, *flat)


TMA_DTYPES = ("float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2", "int8")
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
SCALED_OUTPUTS = ("float16", "bfloat16", "float32")
TMA_ALIGN = 16       # bytes: a descriptor's base and row strides


def eligible(batched: bool, a, b, n: int, k: int, operands: DType, dtype: DType, aligned: bool, same_up: bool,
             stored: tuple = ()) -> bool:
    """Whether the operands can be read (and C written) through tensor descriptors: no batch, a
    non-empty K, A's K and one of B's dims at unit stride, row strides and bases 16-byte aligned.
    stored: (x's, the weight's[, up's]) dtypes as they lie in memory, when they differ (a
    descriptor reads rows of the stored elements; the tile is widened after the load)."""
    if batched or k == 0 or not aligned or not same_up or operands.name not in TMA_DTYPES or a[2] != 1:
        return False
    if 1 not in (b[1], b[2]):
        return False
    row = b[2] if b[1] == 1 else b[1]
    a_item = stored[0].itemsize if stored else operands.itemsize
    b_item = min(t.itemsize for t in stored[1:]) if stored else operands.itemsize   # weight and up: the narrower
    return a[1] * a_item % TMA_ALIGN == 0 and row * b_item % TMA_ALIGN == 0 and n * dtype.itemsize % TMA_ALIGN == 0


def _decide(x_shape, x_strides, w_shape, w_strides, bias_layout, res_layout, operands: DType, dtype: DType,
          gated: bool, activation, device, setting, aligned: tuple = (True, True), same_up: bool = True,
          input_precision=None, scale_strides=None, stored: tuple = (), norm=None) -> LinearPlan:
    shape = out_shape(x_shape, w_shape)
    n, k = w_shape[-2], w_shape[-1]
    batched = len(w_shape) == 3
    batch = w_shape[0] if batched else 1
    m = x_shape[-2] if batched else prod(x_shape[:-1])
    copies = []
    if batched:
        a = tuple(x_strides)
    else:
        flat = _rows(x_shape, x_strides, m, k)
        if flat is None:
            copies.append("x")
            flat = (k, 1)
        a = (0, *flat)
    b = (w_strides[0] if batched else 0, w_strides[-1], w_strides[-2])
    addends = []
    for name, found in (("bias", bias_layout), ("residual", res_layout)):
        strides = None if found is None else _addend_strides(*found, shape, batched, m)
        if found is not None and strides is None:
            copies.append(name)
            strides = _addend_strides(shape, layout.contiguous_strides(shape), shape, batched, m)
        addends.append(strides)
    block_scaled = scale_strides is not None and scale_strides[0] == "block"
    tma = eligible(batched, a, b, n, k, operands, dtype, aligned[0] or "x" in copies, same_up, stored) and aligned[1] \
        and not block_scaled   # the tma kernel scales after the K loop only
    precision = input_precision or ("ieee" if operands in (dtypes.float32, dtypes.float64) else None)
    s = dict(setting if setting is not None else linear_setting(device, m, n, k, dtype, a[1:], b[1:],
                                                                 _form(gated, scale_strides, batched), tma, precision))
    facts = launch.facts(device)
    gemv = s["kernel"] == "gemv"
    if gemv and (scale_strides is not None or operands is dtypes.int8 or precision not in (None, "ieee")
                 or s["split_k"] > 1):
        raise NotSupportedError(f"the gemv kernel sums 16-bit or IEEE float operands unsplit: not {operands.name} with "
                                f"precision {precision}, scales {scale_strides is not None}, split_k {s['split_k']}")
    if not gemv:   # the dots' operands are of operands (the gemv kernel has no dot)
        s["block_k"] = block_k_that_fits(s["block_k"], operands.itemsize, facts)
    if s["kernel"] == "tma" and norm is not None:
        raise NotSupportedError(f"a normed product (norm=) runs the pointer kernel, whose A loads take the norm; the "
                                f"setting served for m={m}, n={n}, k={k} is the tma kernel's: norm x first")
    if s["kernel"] == "tma" and not tma:
        raise NotSupportedError(f"the tma kernel cannot read these operands through tensor descriptors (A strides "
                                f"{a[1:]}, B strides {b[1:]}, {operands.name}, aligned {aligned}): serve it 'tiles'")
    wide64 = operands is dtypes.float64
    reach_m, reach_n, reach_k = m + s["block_m"], n + s["block_n"], k + s["block_k"]
    wide = max(reach_m * abs(a[1]) + reach_k * abs(a[2]), reach_k * abs(b[1]) + reach_n * abs(b[2]),
               reach_m * n + reach_n, *(reach_m * abs(t[1]) + reach_n * abs(t[2]) for t in addends if t)) > INT32_MAX
    stages = s["num_stages"]
    if COMPILED:  # the interpreter has no shared memory (and no pipeline)
        tiled = (addends[1] is not None) + (bias_form(addends[0]) is True)   # addends read as tiles
        reserved = epilogue_bytes(s, dtype.itemsize, dtype.itemsize * tiled)
        stages = stages_that_fit(s, operands.itemsize, operands.itemsize * (2 if gated else 1), facts, reserved)
    acc = tl.float64 if wide64 else tl.int32 if operands is dtypes.int8 else tl.float32
    epilogue = dict(HAS_BIAS=bias_form(addends[0]), ACTIVATION=activation, HAS_RES=addends[1] is not None,
                    GATED=gated)
    if block_scaled and SCALE_BLOCK % s["block_k"]:
        raise NotSupportedError(f"block_k {s['block_k']} does not divide the {SCALE_BLOCK}-wide scale blocks of K")
    meta = dict(SCALED=scale_strides is not None and not block_scaled, BLOCK_SCALED=block_scaled,
                DOT=tl_type(operands), ACC=acc, PRECISION=precision, EVEN_K=k % s["block_k"] == 0, WIDE=wide,
                BLOCK_M=s["block_m"], BLOCK_N=s["block_n"],
                BLOCK_K=s["block_k"], GROUP_M=s["group_m"], SPLIT_K=s["split_k"], **epilogue,
                NORM=norm is not None, GEMV=gemv, num_warps=s["num_warps"], num_stages=stages)
    split_meta = dict(ACC=acc, SPLIT_K=s["split_k"], BLOCK=SPLIT_BLOCK, **epilogue, NORM=norm is not None)
    if s["kernel"] == "tma":
        for name in ("EVEN_K", "WIDE", "SPLIT_K", "BLOCK_SCALED", "NORM", "GEMV"):
            del meta[name]
        meta.update(B_KMAJOR=b[1] == 1, PROGRAMS=s["programs"], WARP_SPECIALIZE=bool(s["warp_specialize"]),
                    B_ROUNDED=precision == "tf32" and not gated
                    and (stored[1] if stored else operands) is dtypes.float32)
        # B_ROUNDED: a float32 weight rounded to TF32 once (hopper.py says why); narrower ones are TF32 values
        meta.update(HALF_STORE=half_store(dtype.itemsize))
    return LinearPlan(batch, m, n, k, a, b, addends[0], addends[1], tuple(copies), s["split_k"],
                      tuple(meta.items()), tuple(split_meta.items()), s["kernel"] == "tma", scale_strides, shape, dtype,
                      norm is not None)


def _form(gated: bool, scale_strides, batched: bool = False) -> str:
    if scale_strides is not None:
        return "blockscaled" if scale_strides[0] == "block" else "scaled"
    return "gated" if gated else "batched" if batched else "plain"


def _layout(t: Tensor | None):
    return None if t is None else (tuple(t.shape), tuple(t.strides))


def _operand_dtype(x: Tensor, weight: Tensor, up: Tensor | None, dtype: DType, scaled: bool = False) -> DType:
    if scaled:
        if x.dtype.name not in FLOAT8 or x.dtype is not weight.dtype or dtype.name not in SCALED_OUTPUTS:
            raise NotSupportedError(f"a scaled product on {x.device.type} multiplies two float8 operands of one type "
                                    f"into {', '.join(SCALED_OUTPUTS)}; got {x.dtype.name} x {weight.dtype.name} -> "
                                    f"{dtype.name}")
        return x.dtype
    if x.dtype is dtypes.int8 and weight.dtype is dtypes.int8 and dtype is dtypes.int32 and up is None:
        return dtypes.int8   # int8 x int8 -> int32
    operands = result_type(*(t for t in (x, weight, up) if t is not None))
    check_dtypes(x.dtype, weight.dtype, operands, x.device)
    check_dtypes(operands, operands, dtype, x.device)
    if dtype is dtypes.float64 and operands is not dtypes.float64:
        raise NotSupportedError(f"linear accumulates {operands.name} operands in float32; a float64 result needs "
                                f"float64 operands")
    return operands


def _stored(x: Tensor, weight: Tensor, up: Tensor | None) -> tuple:
    """(x's, the weight's[, up's]) dtypes where they differ (a float16 x of a float32 product),
    else (): the plan reads them (descriptor rows), so they are part of its signature."""
    found = (x.dtype, weight.dtype)
    if up is not None and up.dtype is not weight.dtype:
        found += (up.dtype,)
    return () if len(set(found)) == 1 else found


def _aligned(t: Tensor | None) -> bool:
    return t is None or t.data_ptr() % TMA_ALIGN == 0


def _scale_strides(scales):
    """("row", x's, the weight's scale stride: 0 for one a tensor, 1 for one a row or column, 0, 0),
    or for 128 x 128 block scales (x's [rows, K blocks], the weight's [N blocks, K blocks], both
    dense) ("block", x's row stride, the weight's block-row stride, their K-block strides)."""
    if scales is None:
        return None
    xs, ws = scales
    if xs.ndim == 2 and ws.ndim == 2:
        return ("block", xs.strides[0], ws.strides[0], xs.strides[1], ws.strides[1])
    return ("row", *(0 if t.size == 1 else 1 for t in scales), 0, 0)


def _launches(p: "LinearPlan", device, gated: bool, has_bias: bool, has_res: bool, scaled: bool) -> LaunchPlan:
    """The plan's launches: every tensor a Slot of the call's values ("x", "weight", "up", "bias",
    "residual", "xs", "ws", "norm_weight", "out", the split's "part"), alpha, beta and eps per-call
    Slots of their bits; an absent operand's pointer is x's (its constant turns the reads off)."""
    x = Slot("x")
    norm_weight = Slot("norm_weight") if p.norm else x
    squares = Slot("squares") if p.squares_shape else x
    bias, residual = Slot("bias") if has_bias else x, Slot("residual") if has_res else x
    xs, ws = (Slot("xs"), Slot("ws")) if scaled else (x, x)
    up = Slot("up") if gated else Slot("weight")
    bias_s, res_s = p.bias or (0, 0, 0), p.residual or (0, 0, 0)
    scale_s = p.scales[1:] if p.scales else (0, 0, 0, 0)
    scalars = (Slot("alpha"), Slot("beta"))
    meta = dict(p.meta)
    rounded = _rounded_weight(p)
    if p.tma:
        weight, launches = Slot("weight"), ()
        if rounded is not None:
            rows, cols, stride = rounded
            weight = Slot("weight_tf32")
            launches = (Launch(tf32_round_kernel, (-(-rows // ROUND_BLOCK[0]), -(-cols // ROUND_BLOCK[1])),
                               (Slot("weight"), weight, rows, cols, stride),
                               dict(BLOCK_R=ROUND_BLOCK[0], BLOCK_C=ROUND_BLOCK[1], num_warps=4)),)
        args = (x, weight, up, Slot("out"), bias, residual, xs, ws, p.m, p.n, p.k, p.a[1],
                p.b[2] if p.b[1] == 1 else p.b[1], *bias_s[1:], *res_s[1:], *scale_s[:2], *scalars)
        # A's, B's, C's and a gated product's G (hopper.py; an unused G descriptor is not compiled)
        launches += (Launch(tma_matmul_kernel, p.grid, args, meta, descriptors=4 if gated else 3),)
    else:
        part = Slot("part") if p.split_k > 1 else Slot("out")
        args = (x, Slot("weight"), up, Slot("out"), part, bias, residual, xs, ws, norm_weight, squares, p.m, p.n, p.k,
                *p.a, *p.b, *bias_s, *res_s, *scale_s, *scalars, Slot("eps"))
        launches = (Launch(fused_matmul_kernel, p.grid, args, meta),)
        if p.split_k > 1:
            total = p.batch * p.m * p.n
            launches += (Launch(split_epilogue_kernel, (-(-total // SPLIT_BLOCK),),
                                (Slot("part"), Slot("out"), bias, residual, squares, p.m, p.n, p.k, p.batch, *bias_s,
                                 *res_s, *scalars, Slot("eps")), dict(p.split_meta)),)
    shape = p.out_shape
    part_dtype = {tl.float64: dtypes.float64, tl.int32: dtypes.int32}.get(meta["ACC"], dtypes.float32)
    work = (plans.workspace("part", p.partial_shape(gated), part_dtype),) if p.split_k > 1 and not p.tma else ()
    if p.squares_shape:
        work += (plans.workspace("squares", p.squares_shape, part_dtype),)
    if rounded is not None:
        work += (plans.workspace("weight_tf32", (_rounded_elements(rounded),), dtypes.float32),)
    return LaunchPlan(device, launches, (plans.output("out", shape, p.dtype),), work, p.copies, detail=p)


def _rounded_weight(p: "LinearPlan"):
    """(rows, columns, row stride) of the weight as its descriptor reads it, where the plan rounds
    it to TF32 before the product (B_ROUNDED), else None."""
    if not p.tma or not dict(p.meta).get("B_ROUNDED"):
        return None
    return (p.n, p.k, p.b[2]) if p.b[1] == 1 else (p.k, p.n, p.b[1])


def _rounded_elements(rounded) -> int:
    rows, cols, stride = rounded
    return (rows - 1) * stride + cols


def launch_plan(x, weight, bias=None, residual=None, up=None, activation=None, dtype=None, setting=None,
                out: Tensor | None = None, input_precision=None, scales=None, norm_weight=None) -> LaunchPlan:
    """The launches of one call (out: the output it writes; a new one is aligned), kept per call
    layout in the one plan cache; norm_weight: the weight of an RMS norm fused into x's loads."""
    dtype = result_type(x, weight) if dtype is None and scales is None else dtype
    operands = _operand_dtype(x, weight, up, dtype, scales is not None)
    aligned = (_aligned(x), _aligned(weight) and _aligned(up) and _aligned(out))
    same_up = up is None or tuple(up.strides) == tuple(weight.strides)
    signature = (tuple(x.shape), tuple(x.strides), tuple(weight.shape), tuple(weight.strides), _layout(bias),
                 _layout(residual), operands, dtype, up is not None, activation, x.device, plans.setting_key(setting),
                 aligned, same_up, input_precision, _scale_strides(scales), _stored(x, weight, up),
                 None if norm_weight is None else _norm_layout(norm_weight))

    def build() -> LaunchPlan:
        p = _decide(*signature)
        return _launches(p, x.device, up is not None, bias is not None, residual is not None, scales is not None)
    return plans.cached("linear", signature, build)


def _norm_layout(w: Tensor) -> tuple:
    if w.ndim != 1 or (w.shape[0] > 1 and w.strides[0] != 1):
        raise NotSupportedError(f"a fused norm's weight is one contiguous [K] vector, got shape {tuple(w.shape)} "
                                f"strides {tuple(w.strides)}")
    return (tuple(w.shape), w.dtype)


def plan(*args, **kwargs) -> "LinearPlan":
    """The decisions of one call (tile, kernel, split, copies, strides): launch_plan's detail."""
    return launch_plan(*args, **kwargs).detail


def launch_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, activation=None,
                  residual: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0, dtype: DType | None = None,
                  up: Tensor | None = None, out: Tensor | None = None, setting=None, input_precision=None,
                  scales: tuple | None = None, norm: tuple | None = None) -> Tensor:
    """activation(alpha * (x @ weight.T) + bias) + beta * residual, or with up (the gated form)
    activation(x @ weight.T) * (x @ up.T) + beta * residual, into out (new, or a given contiguous
    one). scales: (x's, the weight's) float32 scales of float8 operands, each one a tensor (size
    1) or one a row (a contiguous [rows] / [N]), multiplying the product before the epilogue.
    norm: (weight [K], eps): x read as rms_norm(x, weight, eps). setting overrides the served one
    (the certifier's)."""
    device = x.device
    dtype = (result_type(x, weight) if scales is None else dtypes.bfloat16) if dtype is None else dtype
    shape = out_shape(x.shape, weight.shape)
    out = launch.output(shape, dtype, device, out)
    if out.size == 0:
        return out
    norm_weight, eps = (None, 0.0) if norm is None else norm
    lp = launch_plan(x, weight, bias, residual, up, activation, dtype, setting, out, input_precision, scales,
                     norm_weight)
    copies = lp.copies
    values = {"x": x, "weight": weight, "up": up, "out": out, "alpha": float_bits(alpha), "beta": float_bits(beta),
              "norm_weight": norm_weight, "eps": float_bits(eps),
              "bias": bias.broadcast_to(shape) if "bias" in copies else bias,
              "residual": residual.broadcast_to(shape) if "residual" in copies else residual}
    if scales is not None:
        values["xs"], values["ws"] = scales
    plans.execute(lp, values)
    return out


def linear_cost(x, weight, bias=None, activation=None, residual=None, alpha=1.0, beta=1.0, dtype=None,
                up=None, input_precision=None, scales=None, norm_weight=None) -> Cost:
    """The output, the split partials and any dense copies; every operand read once, the output
    written once (the partials written and read once more); 2 m n k flops a weight (two gated).
    A fused norm: its weight read, 3 flops an element of x (x**2 added, x * w); split, each
    split's sums of squares written and read once."""
    dtype = (result_type(x, weight) if scales is None else dtypes.bfloat16) if dtype is None else dtype
    _operand_dtype(x, weight, up, dtype, scales is not None)
    shape = out_shape(x.shape, weight.shape)
    out_bytes = prod(shape) * dtype.itemsize
    buffers = [Buffer("out", out_bytes)]
    if out_bytes == 0:
        return Cost(tuple(buffers), 0, 0, launches=0)
    lp = launch_plan(x, weight, bias, residual, up, activation, dtype, input_precision=input_precision,
                     scales=scales, norm_weight=norm_weight)
    p = lp.detail
    copied = {"x": x, "bias": bias, "residual": residual}
    for name in p.copies:
        nbytes = (prod(shape) * copied[name].dtype.itemsize if name != "x" else x.nbytes)
        buffers.append(Buffer(f"{name}_contiguous", nbytes, LAUNCH))
    read = sum(t.nbytes for t in (x, weight, bias, residual, up, norm_weight, *(scales or ())) if t is not None)
    moved = read + out_bytes
    if p.split_k > 1:
        part_bytes = prod(p.partial_shape(up is not None)) * (8 if dict(p.meta)["ACC"] == tl.float64 else 4)
        buffers.append(Buffer("partials", part_bytes, LAUNCH))
        moved += 2 * part_bytes
        if p.squares_shape:
            square_bytes = prod(p.squares_shape) * (8 if dict(p.meta)["ACC"] == tl.float64 else 4)
            buffers.append(Buffer("squares", square_bytes, LAUNCH))
            moved += 2 * square_bytes
    rounded = _rounded_weight(p)
    if rounded is not None:   # the weight read and its TF32 copy written once more
        buffers.append(Buffer("weight_tf32", 4 * _rounded_elements(rounded), LAUNCH))
        moved += 2 * weight.nbytes
    scratch = plans.descriptor_scratch(lp)   # the tma kernel's descriptors, as the launch path declares them
    if scratch:
        buffers.append(scratch)
    flops = 2 * p.batch * p.m * p.n * p.k * (2 if up is not None else 1) + (3 * x.size if p.norm else 0)
    return Cost(tuple(buffers), moved, flops, launches=2 if (p.split_k > 1 and not p.tma) or rounded else 1)


@implements("linear")
def _linear(call) -> Tensor:
    """A checked linear (nbx.core.ops.products' spec): its facts result_dtype and precision."""
    return launch_linear(call.x, call.weight, call.bias, call.activation, call.residual, call.alpha, call.beta,
                         call.result_dtype, input_precision=call.precision, norm=_norm(call))


@implements("gated_linear")
def _gated_linear(call) -> Tensor:
    return launch_linear(call.x, call.w_gate, activation=call.activation, dtype=call.result_dtype, up=call.w_up,
                         norm=_norm(call))


def _norm(call):
    """The call's fused RMS norm as (weight, eps), or None (the spec's norm_weight and its epsilon fact)."""
    w = call.norm_weight
    return None if w is None else (w, call.norm_epsilon)


def _prepared_product(call, weight: str, up: str | None, first, alpha: float, beta: float):
    """A signature's repeats of linear or gated_linear: the plan's launcher, looked up once. The
    plan also reads the operands' alignment, which the signature does not hold: a repeat whose
    alignment differs from the first call's takes the full path (first: the implementation)."""
    x, w, u = call.x, getattr(call, weight), None if up is None else getattr(call, up)
    bias, residual = getattr(call, "bias", None), getattr(call, "residual", None)
    dtype = call.result_dtype
    if prod(out_shape(x.shape, w.shape)) == 0:
        return None
    norm = _norm(call)
    norm_weight, eps = (None, 0.0) if norm is None else norm
    run = plans.prepared(launch_plan(x, w, bias, residual, u, call.activation, dtype,
                                     input_precision=getattr(call, "precision", None), norm_weight=norm_weight))
    if run is None:   # a dense copy of x, the bias or the residual: execute makes it
        return None
    aligned = (_aligned(x), _aligned(w) and _aligned(u))
    alpha, beta, eps = float_bits(alpha), float_bits(beta), float_bits(eps)   # eps: in the signature (by value)

    def repeat(c):
        x, w = c.x, getattr(c, weight)
        u = None if up is None else getattr(c, up)
        if (_aligned(x), _aligned(w) and _aligned(u)) != aligned:
            return first(c)
        return run({"x": x, "weight": w, "up": u, "out": None, "alpha": alpha, "beta": beta,
                    "bias": getattr(c, "bias", None), "residual": getattr(c, "residual", None),
                    "norm_weight": c.norm_weight, "eps": eps})["out"]
    return repeat


_linear.prepare = lambda call: _prepared_product(call, "weight", None, _linear, call.alpha, call.beta)
_gated_linear.prepare = lambda call: _prepared_product(call, "w_gate", "w_up", _gated_linear, 1.0, 1.0)

declares("linear")(lambda call: linear_cost(call.x, call.weight, call.bias, call.activation, call.residual, call.alpha,
                                            call.beta, call.result_dtype, input_precision=call.precision,
                                            norm_weight=call.norm_weight))


@implements("scaled_linear")
def _scaled_linear(x: Tensor, weight: Tensor, scale_x: Tensor, scale_w: Tensor, bias, activation, residual,
                   dtype: DType) -> Tensor:
    return launch_linear(x, weight, bias, activation, residual, dtype=dtype, scales=(scale_x, scale_w))


declares("scaled_linear")(lambda x, weight, scale_x, scale_w, bias=None, activation=None, residual=None, dtype=None:
                          linear_cost(x, weight, bias, activation, residual, dtype=dtype, scales=(scale_x, scale_w)))
declares("gated_linear")(lambda call: linear_cost(call.x, call.w_gate, activation=call.activation,
                                                  dtype=call.result_dtype, up=call.w_up, norm_weight=call.norm_weight))

__all__ = ["launch_linear", "linear_cost", "plan", "LinearPlan", "out_shape"]
