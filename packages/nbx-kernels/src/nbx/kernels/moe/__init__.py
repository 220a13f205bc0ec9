"""Mixture of experts on the shared launch path: moe_route, moe_align and moe_experts.

moe_experts is one plan of five launches: the alignment's two (count, place) at the served
setting's row block, the gate/up grouped GEMM (SwiGLU in one pass) into the intermediate in sorted
order, the down grouped GEMM with the routed weight in its epilogue into one row per pair, and the
combine in slot order (kernel.py). Its workspace: the alignment's tables, the intermediate
[capacity, I] and the pair rows [T * k, H], both of x's dtype (each rounded once, as a torch
loop over experts rounds each expert's output).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import triton.language as tl

from nbx.core import dtypes
from nbx.core.errors import DTypeError, NotSupportedError
from nbx.core.ops.moe import align_capacity
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..softmax import float_bits
from ..rows import pow2_at_least
from ..elementwise.casts import COMPILED
from ..matmul.epilogue import TMA_ALIGN, TMA_DTYPES
from ..matmul.tuning import stages_that_fit
from ..types import tl_type
from .float8 import expert_float8_kernel
from .kernel import (align_count_kernel, align_place_kernel, combine_kernel, expert_down_kernel,
                     expert_gate_up_kernel, expert_gemv_down_kernel, expert_gemv_gate_up_kernel, route_align_kernel,
                     route_kernel)
from .routing_tuning import align_setting, route_label, route_setting
from .tuning import experts_setting

INT32 = dtypes.int32
COMBINE_BLOCK = 1024


# ---- routing --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RouteOptions:
    """What a routing launch is specialised on (moe_route's arguments but the tensors and scaling)."""
    top_k: int
    scoring: str
    renormalize: bool
    groups: int
    kept: int
    group_score: str
    has_bias: bool


def _route_meta(options: RouteOptions, count: int, block_t: int, num_warps: int) -> dict:
    return dict(TOP_K=options.top_k, SIGMOID=options.scoring == "sigmoid", RENORM=options.renormalize,
                HAS_BIAS=options.has_bias, GROUPS=options.groups, KEPT=options.kept, TOP2=options.group_score == "top2",
                BLOCK_T=block_t, BLOCK_E=pow2_at_least(count), BLOCK_G=pow2_at_least(options.groups),
                BLOCK_K=pow2_at_least(options.top_k), num_warps=num_warps)


def _route_args(shape, strides, options: RouteOptions) -> tuple:
    tokens, count = shape
    bias = Slot("bias") if options.has_bias else Slot("logits")   # without a bias, the logits' pointer (never read)
    return (Slot("logits"), bias, Slot("weights"), Slot("experts"), tokens, count, count // options.groups, *strides)


def _route_launch(shape, strides, options: RouteOptions, dtype, device, setting=None) -> Launch:
    """route_kernel over the logits slot into the weights and experts slots, at the given setting or
    the served one (routing_tuning.ROUTE); block_tokens is cut to the device file's max_elements
    logits a program (the uncertified default's bound: certified settings lie within it)."""
    tokens, count = shape
    s = setting if setting is not None else route_setting(
        device, tokens, count, options.top_k, dtype,
        route_label(options.scoring, options.groups, options.kept, options.group_score, options.has_bias))
    most = launch.tiles("moe_route", device)["max_elements"]
    block_t = max(1, min(s["block_tokens"], most // pow2_at_least(count)))
    return Launch(route_kernel, (triton_cdiv(tokens, block_t),), (*_route_args(shape, strides, options),
                                                                   Slot("scaling_bits")),
                  _route_meta(options, count, block_t, s["num_warps"]))


def _route_align_launch(shape, strides, options: RouteOptions, block_m: int, device, prefix: str) -> Launch:
    """route_align_kernel (the band's routing and alignment in one program), its tables named
    prefix + name as _align_launches names them."""
    tokens, count = shape
    pairs = tokens * options.top_k
    block_t = pow2_at_least(tokens)
    # one program holds every token's [experts] rows: at most 16 elements of one a thread (sm_90's
    # ptxas spilled 16 tokens x 256 experts at 4 warps, 32 a thread; not at 8 warps)
    warps = min(16, max(launch.tiles("moe_route", device)["num_warps"], pow2_at_least(block_t * pow2_at_least(count)
                                                                                       // 512)))
    meta = _route_meta(options, count, block_t, warps)
    tables = tuple(Slot(prefix + name) for name in ("sorted_pairs", "block_experts", "inverse", "padded_count"))
    args = _route_args(shape, strides, options)
    return Launch(route_align_kernel, (1,), (*args[:4], *tables, *args[4:], Slot("scaling_bits"),
                                             align_capacity(pairs, count, block_m)),
                  dict(meta, BLOCK_M=block_m, BLOCKS_PER_EXPERT=pow2_at_least(triton_cdiv(block_t, block_m)),
                       BLOCK=launch.tiles("moe_align", device)["block"]))


def _route_outputs(tokens: int, top_k: int, make) -> tuple:
    return make("weights", (tokens, top_k), dtypes.float32), make("experts", (tokens, top_k), INT32)


def _route_plan(shape, strides, dtype, device, options: RouteOptions, setting=None):
    return LaunchPlan(device, (_route_launch(shape, strides, options, dtype, device, setting),),
                      outputs=_route_outputs(shape[0], options.top_k, plans.output))


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _route_options(logits, top_k, scoring="softmax", renormalize=True, groups=1, kept=1, group_score="max",
                   correction_bias=None, scaling=1.0):
    """(RouteOptions, the bias, the scaling) of moe_route's normalized arguments: the one place
    they are formed, for moe_route, moe_routed_experts and their costs."""
    options = RouteOptions(int(top_k), scoring, bool(renormalize), int(groups), int(kept), group_score,
                           correction_bias is not None)
    return options, correction_bias, float(scaling)


def route_plan(logits, options: RouteOptions, setting=None) -> LaunchPlan:
    signature = (logits.shape, logits.strides, logits.dtype, logits.device, options)
    return plans.cached("moe_route", (*signature, plans.setting_key(setting)),
                        lambda: _route_plan(*signature, setting))


def _routed(logits, routing: tuple, setting=None, experts=None) -> dict:
    """moe_route's tables (routing: its arguments after the logits) at setting or the served one,
    the experts into the given tensor where there is one."""
    options, bias, scaling = _route_options(logits, *routing)
    plan = route_plan(logits, options, setting)
    if logits.shape[0] == 0:
        return plans.execute(LaunchPlan(plan.device, (), plan.outputs), {"experts": experts})
    return plans.execute(plan, {"logits": logits, "bias": bias, "scaling_bits": float_bits(scaling),
                                "experts": experts})


def route_experts(logits, top_k: int, routing=(), setting=None, experts=None):
    """The experts [T, top_k] of moe_route (routing: its arguments after top_k, scaling aside) into
    experts (given, or new), at setting (the certifier's) or the served one: routing_tuning's workload."""
    return _routed(logits, (top_k, *routing), setting, experts)["experts"]


@implements("moe_route")
def _moe_route(logits, *routing):
    found = _routed(logits, routing)
    return found["weights"], found["experts"]


@declares("moe_route")
def _route_cost(logits, *routing, **named) -> Cost:
    tokens, count = logits.shape
    options, _, _ = _route_options(logits, *routing, **named)
    top_k = options.top_k
    plan = route_plan(logits, options)
    return Cost(plan.buffers(), logits.size * logits.dtype.itemsize + tokens * top_k * 8, 6 * logits.size * top_k,
                len(plan.launches))


# ---- alignment ------------------------------------------------------------------------------------

def _align_launches(pairs: int, count: int, block_m: int, device, prefix: str = "", setting=None) -> tuple:
    """The two alignment launches over the experts slot, their tables named prefix + name, at the
    given setting or the served one (routing_tuning.ALIGN)."""
    tile = setting if setting is not None else align_setting(device, pairs, count)
    capacity = align_capacity(pairs, count, block_m)
    s = {name: Slot(prefix + name) for name in ("counts", "sorted_pairs", "block_experts", "inverse", "padded_count")}
    return (Launch(align_count_kernel, (count,), (Slot("experts"), s["counts"], pairs),
                   dict(BLOCK=tile["block"], num_warps=tile["num_warps"])),
            Launch(align_place_kernel, (count + 1,),
                   (Slot("experts"), s["counts"], s["sorted_pairs"], s["block_experts"], s["inverse"],
                    s["padded_count"], pairs, count, capacity),
                   dict(BLOCK=tile["block"], BLOCK_E=pow2_at_least(count), BLOCK_M=block_m,
                        num_warps=tile["num_warps"])))


def _align_tables(pairs: int, count: int, block_m: int, make, prefix: str = "") -> tuple:
    capacity = align_capacity(pairs, count, block_m)
    return (make(prefix + "sorted_pairs", (capacity,), INT32), make(prefix + "block_experts", (capacity // block_m,), INT32),
            make(prefix + "inverse", (pairs,), INT32), make(prefix + "padded_count", (1,), INT32))


def align_plan(experts: Tensor, count: int, block_m: int, setting=None) -> LaunchPlan:
    def build():
        pairs = experts.size
        return LaunchPlan(experts.device, _align_launches(pairs, count, block_m, experts.device, setting=setting),
                          outputs=_align_tables(pairs, count, block_m, plans.output),
                          workspace=(plans.workspace("counts", (count,), INT32),), copies=("experts",))
    return plans.cached("moe_align", (experts.shape, experts.strides, experts.dtype, experts.device, count, block_m,
                                      plans.setting_key(setting)), build)


@implements("moe_align")
def _moe_align(experts, count, block_m):
    found = plans.execute(align_plan(experts, count, block_m), {"experts": experts})
    return found["sorted_pairs"], found["block_experts"], found["inverse"], found["padded_count"]


@declares("moe_align")
def _align_cost(experts, count, block_m) -> Cost:
    plan = align_plan(experts, count, block_m)
    tables = sum(b.nbytes for b in plan.buffers())
    return Cost(plan.buffers(), 2 * count * experts.size * experts.dtype.itemsize + tables, 0, len(plan.launches))


# ---- the expert layer -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ExpertsPlan:
    setting: dict
    capacity: int     # rows of the sorted pairs (a multiple of block_m)
    band: bool        # the one-token band's setting
    tma: bool = False # the expert GEMMs read their weights (and down its intermediate) through descriptors
    gemv: bool = False # the band's GEMV form: a pair a program row, the intermediate of pairs rows


@dataclass(frozen=True)
class WeightLayout:
    """A layer's expert weights as the kernels read them: float ([E, I, H] element strides) or
    int4 (the packed bytes' strides, the scales' (expert, column) strides, group and scheme)."""
    shape: tuple            # (E, I, H)
    gate: tuple             # gate/up (expert, n, k) strides
    down: tuple             # down's (expert, n, k) strides
    gate_scales: tuple = (0, 0)
    down_scales: tuple = (0, 0)
    group: int = 0          # 0: float weights
    scheme: str = "none"
    descriptors: bool = False   # float weights a tensor descriptor can read: contiguous, 16-byte rows and bases
    scale_block: tuple = ()     # block-scaled float8 weights: (rows, columns) of a scale's block; scheme the type

    @property
    def label(self) -> str:
        """The launch key's weights field: dense, int4-<scheme>-g<group>, or fp8-<type>-b<rows>x<columns>."""
        if self.scale_block:
            return f"fp8-{self.scheme}-b{self.scale_block[0]}x{self.scale_block[1]}"
        return "dense" if not self.group else f"int4-{self.scheme}-g{self.group}"


def _float8_layout(w_gate, w_up, w_down) -> WeightLayout:
    """Block-scaled float8 weights (the front-end checked one type and block for the three), read
    by expert_float8_kernel with contiguous values and scales."""
    for w in (w_gate, w_up, w_down):
        if not w.weight.is_contiguous() or not w.scales.is_contiguous():
            raise NotSupportedError("moe_experts reads float8 expert weights with contiguous values and scales")
    return WeightLayout(tuple(w_gate.shape), tuple(w_gate.weight.strides), tuple(w_down.weight.strides),
                        tuple(w_gate.scales.strides[:2]), tuple(w_down.scales.strides[:2]),
                        scheme=w_gate.dtype.name.removeprefix("float8_"), scale_block=w_gate.block)


def weight_layout(w_gate, w_up, w_down) -> WeightLayout:
    from nbx.core.quant import QuantizedTensor
    from nbx.core.quant_float8 import Float8BlockWeight
    if isinstance(w_gate, Float8BlockWeight):
        return _float8_layout(w_gate, w_up, w_down)
    quantized = [isinstance(w, QuantizedTensor) for w in (w_gate, w_up, w_down)]
    if not any(quantized):
        if w_gate.strides != w_up.strides:
            raise NotSupportedError(f"moe_experts reads w_gate and w_up with one set of strides; got "
                                    f"{w_gate.strides} and {w_up.strides} (make them contiguous)")
        return WeightLayout(tuple(w_gate.shape), tuple(w_gate.strides), tuple(w_down.strides),
                            descriptors=_descriptor_ready(w_gate, w_up, w_down))
    if not all(quantized) or len({(w.group_size, w.scheme) for w in (w_gate, w_up, w_down)}) > 1:
        raise NotSupportedError("moe_experts takes int4 expert weights for gate, up and down alike, of one group "
                                "size and scheme")
    for w in (w_gate, w_up, w_down):
        if not w.qweight.is_contiguous() or not w.scales.is_contiguous() or \
                (w.zeros is not None and not w.zeros.is_contiguous()):
            raise NotSupportedError("moe_experts reads int4 expert weights with contiguous bytes, scales and minima")
    return WeightLayout(tuple(w_gate.shape), tuple(w_gate.qweight.strides), tuple(w_down.qweight.strides),
                        tuple(w_gate.scales.strides[:2]), tuple(w_down.scales.strides[:2]), w_gate.group_size,
                        w_gate.scheme)


def _descriptor_ready(w_gate, w_up, w_down) -> bool:
    """Whether the TMA kernels can read the float weights as [E * N, K] matrices (matmul's rules:
    its descriptor dtypes, unit last stride, 16-byte aligned rows and bases)."""
    if w_gate.dtype.name not in TMA_DTYPES or w_gate.dtype.itemsize == 1:
        return False
    return all(w.is_contiguous() and w.shape[-1] * w.dtype.itemsize % TMA_ALIGN == 0
               and w.data_ptr() % TMA_ALIGN == 0 for w in (w_gate, w_up, w_down))


def _weight_values(w_gate, w_up, w_down) -> dict:
    """The weight slots of a call: the float weights, the int4 weights' bytes, scales and minima, or
    the float8 weights' values and block scales."""
    from nbx.core.quant import QuantizedTensor
    from nbx.core.quant_float8 import Float8BlockWeight
    if isinstance(w_gate, Float8BlockWeight):
        return {slot: t for name, w in (("gate", w_gate), ("up", w_up), ("down", w_down))
                for slot, t in ((f"w_{name}", w.weight), (f"s_{name}", w.scales))}
    if not isinstance(w_gate, QuantizedTensor):
        return {"w_gate": w_gate, "w_up": w_up, "w_down": w_down}
    values = {}
    for name, w in (("gate", w_gate), ("up", w_up), ("down", w_down)):
        values.update({f"w_{name}": w.qweight, f"s_{name}": w.scales,
                       f"z_{name}": w.scales if w.zeros is None else w.zeros})
    return values


def _dot_types(dtype, quantized: bool):
    if dtype.kind != "float" or dtype.itemsize == 1 or (quantized and dtype is dtypes.float64):
        raise DTypeError(f"moe_experts multiplies float16, bfloat16, float32{'' if quantized else ' or float64'} "
                         f"activations{' by int4 or float8 weights' if quantized else ''}, got {dtype.name}")
    acc = tl.float64 if dtype is dtypes.float64 else tl.float32
    precision = "ieee" if dtype in (dtypes.float32, dtypes.float64) else None
    return tl_type(dtype), acc, precision


def _experts_build(x_layout, w: WeightLayout, k: int, device, setting, route=None) -> LaunchPlan:
    """The layer's plan over given weights and experts, or, with route = (logits shape, strides,
    RouteOptions, the logits' dtype), over its own routing of the logits slot (moe_routed_experts): route_kernel then
    the alignment's two launches, or in the band route_align_kernel alone (the same tables)."""
    (tokens, hidden), x_strides, dtype = x_layout
    count, inter, _ = w.shape
    from .tuning import BAND_TOKENS
    s = dict(setting) if setting is not None else dict(
        experts_setting(device, tokens, count, k, inter, hidden, dtype, w.label))
    block_m, pairs = s["block_m"], tokens * k
    capacity = align_capacity(pairs, count, block_m)
    int4, float8 = w.group > 0, bool(w.scale_block)
    dot, acc, precision = _dot_types(dtype, int4 or float8)
    block_k = s["block_k"] if not int4 or w.group % s["block_k"] == 0 else w.group   # an int4 K step lies in one group
    if float8:   # a float8 K step lies in one scale block
        block_k = _float8_block_k(s["block_k"], w.scale_block)
    stages = s["num_stages"]
    if COMPILED:  # the interpreter has no shared memory (and no pipeline); gate/up's stages hold two weight tiles
        stages = stages_that_fit({**s, "block_k": block_k}, dtype.itemsize, 2 * dtype.itemsize, launch.facts(device))
    # the descriptor loads where the setting asks for them and the weights and device allow (else
    # the pointer kernel at the same tile: the same products)
    band = tokens <= BAND_TOKENS
    gemv = band and s.get("kernel") == "gemv"
    if gemv and (int4 or float8):
        raise NotSupportedError(f"the band's gemv form sums float expert weights; {w.label} weights take kernel = tiles")
    tma = (s.get("loads") == "tma" and w.descriptors and bool(launch.facts(device).value("matrix_unit.tma"))
           and not gemv)
    gemm = dict(DOT=dot, ACC=acc, PRECISION=precision, BLOCK_M=block_m, BLOCK_N=s["block_n"], BLOCK_K=block_k,
                GROUP_M=s["group_m"], INT4=int4, GROUP=max(w.group, 1), SIGNED=w.scheme == "symmetric",
                ASYMMETRIC=w.scheme == "asymmetric", TMA=tma, num_warps=s["num_warps"], num_stages=stages)
    blocks = capacity // block_m
    p = "align_"
    if gemv:
        gate_up, down = _gemv_launches(w, x_strides, pairs, k, inter, hidden, acc, s, block_k)
    elif float8:
        gate_up, down = _float8_launches(w, x_strides, pairs, k, capacity, dict(
            DOT=dot, ACC=acc, PRECISION=precision, BLOCK_M=block_m, BLOCK_N=s["block_n"], BLOCK_K=block_k,
            GROUP_M=s["group_m"], SCALE_N=w.scale_block[0], SCALE_K=w.scale_block[1], num_warps=s["num_warps"],
            num_stages=stages))
    else:
        described = 2 if tma and not int4 else 0   # gate's and up's, h's and down's (kernel.py)
        scales = ((Slot("s_gate"), Slot("z_gate"), Slot("s_up"), Slot("z_up"), Slot("s_down"), Slot("z_down")) if int4
                  else (Slot("w_gate"),) * 4 + (Slot("w_down"),) * 2)   # float weights: their own pointers (never read)
        gate_up = Launch(expert_gate_up_kernel, (blocks * triton_cdiv(inter, s["block_n"]),),
                         (Slot("x"), Slot("w_gate"), Slot("w_up"), *scales[:4], Slot("h"), Slot(p + "sorted_pairs"),
                          Slot(p + "block_experts"), capacity, inter, hidden, pairs, k, *x_strides, *w.gate,
                          *w.gate_scales, count * inter), dict(EVEN_K=hidden % block_k == 0, **gemm),
                         descriptors=described)
        down = Launch(expert_down_kernel, (blocks * triton_cdiv(hidden, s["block_n"]),),
                      (Slot("h"), Slot("w_down"), *scales[4:], Slot("pair_rows"), Slot("weights"),
                       Slot(p + "sorted_pairs"), Slot(p + "block_experts"), capacity, hidden, inter, pairs, *w.down,
                       *w.down_scales, count * hidden),
                      dict(EVEN_K=inter % block_k == 0, **gemm), descriptors=described)
    combine = Launch(combine_kernel, (tokens, triton_cdiv(hidden, COMBINE_BLOCK)),
                     (Slot("pair_rows"), Slot("out"), hidden), dict(TOP_K=k, ACC=acc, BLOCK=COMBINE_BLOCK))
    # given experts in the gemv form: no alignment (its launches read the experts slot itself); a
    # routed band's route_align_kernel writes the tables with the routing either way
    aligned = route is not None or not gemv
    counts = () if (route is not None and band) or not aligned else (plans.workspace(p + "counts", (count,), INT32),)
    tables = _align_tables(pairs, count, block_m, plans.workspace, p) if aligned else ()
    workspace = (*counts, *tables, plans.workspace("h", (pairs if gemv else capacity, inter), dtype),
                 plans.workspace("pair_rows", (pairs, hidden), dtype))
    if route is None:
        first, copies = _align_launches(pairs, count, block_m, device, p) if aligned else (), ("experts", "weights")
    else:
        shape, strides, options, logits_dtype = route
        first = ((_route_align_launch(shape, strides, options, block_m, device, p),) if band else
                 (_route_launch(shape, strides, options, logits_dtype, device),
                  *_align_launches(pairs, count, block_m, device, p)))
        workspace, copies = (*_route_outputs(tokens, k, plans.workspace), *workspace), ()
    return LaunchPlan(device, (*first, gate_up, down, combine), outputs=(plans.output("out", (tokens, hidden), dtype),),
                      workspace=workspace, copies=copies, detail=ExpertsPlan(s, capacity, band, tma, gemv))


def _gemv_launches(w: WeightLayout, x_strides, pairs: int, k: int, inter: int, hidden: int, acc, s, block_k: int
                   ) -> tuple:
    """The band's GEMV form of the two products (kernel = gemv): a pair a program row, over the
    routing's own experts and weights (the alignment's tables unread)."""
    meta = dict(ACC=acc, BLOCK_N=s["block_n"], BLOCK_K=block_k, num_warps=s["num_warps"])
    gate_up = Launch(expert_gemv_gate_up_kernel, (pairs * triton_cdiv(inter, s["block_n"]),),
                     (Slot("x"), Slot("w_gate"), Slot("w_up"), Slot("h"), Slot("experts"), inter, hidden, k,
                      *x_strides, *w.gate), dict(EVEN_K=hidden % block_k == 0, **meta))
    down = Launch(expert_gemv_down_kernel, (pairs * triton_cdiv(hidden, s["block_n"]),),
                  (Slot("h"), Slot("w_down"), Slot("pair_rows"), Slot("weights"), Slot("experts"), hidden, inter,
                   *w.down), dict(EVEN_K=inter % block_k == 0, **meta))
    return gate_up, down


def _float8_block_k(block_k: int, scale_block: tuple) -> int:
    """The served block_k, or the largest power of two under it that divides the scale block's
    columns (a K step in one block); tl.dot takes K steps of 16 or more."""
    step = gcd(block_k, scale_block[1])
    if step < 16:
        raise NotSupportedError(f"moe_experts' float8 weights at scale blocks {scale_block}: a K step of "
                                f"{block_k} lies in one block only at {step} columns (the matrix unit takes 16 "
                                f"or more); use scale blocks of 16 or more columns (128 x 128 in checkpoints)")
    return step


def _float8_launches(w: WeightLayout, x_strides, pairs: int, k: int, capacity: int, meta: dict) -> tuple:
    """The gate/up and down launches of expert_float8_kernel over the alignment's tables (named as
    _experts_build's), into the intermediate h and the pair rows."""
    count, inter, hidden = w.shape
    blocks, p = capacity // meta["BLOCK_M"], "align_"
    tables = (Slot(p + "sorted_pairs"), Slot(p + "block_experts"))
    gate_up = Launch(expert_float8_kernel, (blocks * triton_cdiv(inter, meta["BLOCK_N"]),),
                     (Slot("x"), Slot("w_gate"), Slot("w_up"), Slot("s_gate"), Slot("s_up"), Slot("h"),
                      Slot("weights"), *tables, capacity, inter, hidden, pairs, k, *x_strides, *w.gate[:2],
                      *w.gate_scales), dict(meta, GATED=True))
    down = Launch(expert_float8_kernel, (blocks * triton_cdiv(hidden, meta["BLOCK_N"]),),
                  (Slot("h"), Slot("w_down"), Slot("w_down"), Slot("s_down"), Slot("s_down"), Slot("pair_rows"),
                   Slot("weights"), *tables, capacity, hidden, inter, pairs, k, inter, 1, *w.down[:2],
                   *w.down_scales), dict(meta, GATED=False))
    return gate_up, down


def experts_plan(x, weights, experts, w_gate, w_up, w_down, setting=None) -> LaunchPlan:
    w = weight_layout(w_gate, w_up, w_down)
    x_layout = (tuple(x.shape), tuple(x.strides), x.dtype)
    k = experts.shape[1]
    signature = (x_layout, w, k, experts.dtype, weights.dtype, x.device, plans.setting_key(setting))
    return plans.cached("moe_experts", signature, lambda: _experts_build(x_layout, w, k, x.device, setting))


def launch_experts(x, weights, experts, w_gate, w_up, w_down, out: Tensor | None = None, setting=None) -> Tensor:
    """The expert layer into out (new, or a given contiguous [T, H] of x's dtype); setting
    overrides the served one (the certifier's)."""
    if out is not None or x.shape[0] == 0:
        out = launch.output(x.shape, x.dtype, x.device, out)
        if x.shape[0] == 0:
            return out
    plan = experts_plan(x, weights, experts, w_gate, w_up, w_down, setting)
    values = {"x": x, "weights": weights, "experts": experts, "out": out, **_weight_values(w_gate, w_up, w_down)}
    return plans.execute(plan, values)["out"]


# ---- the routed layer: routing and the expert layer in one plan -------------------------------

def routed_plan(x, logits, w_gate, w_up, w_down, options: RouteOptions, setting=None) -> LaunchPlan:
    w = weight_layout(w_gate, w_up, w_down)
    x_layout = (tuple(x.shape), tuple(x.strides), x.dtype)
    route = (tuple(logits.shape), tuple(logits.strides), options, logits.dtype)
    signature = (x_layout, w, route, x.device, plans.setting_key(setting))   # route holds the logits' dtype
    return plans.cached("moe_routed_experts", signature,
                        lambda: _experts_build(x_layout, w, options.top_k, x.device, setting, route))


def _routed_values(x, logits, w_gate, w_up, w_down, bias, scaling) -> dict:
    return {"x": x, "logits": logits, "bias": bias, "scaling_bits": float_bits(scaling),
            **_weight_values(w_gate, w_up, w_down)}


@implements("moe_routed_experts")
def _moe_routed_experts(x, logits, w_gate, w_up, w_down, *routing):
    if x.shape[0] == 0:
        return launch.output(x.shape, x.dtype, x.device)
    options, bias, scaling = _route_options(logits, *routing)
    plan = routed_plan(x, logits, w_gate, w_up, w_down, options)
    return plans.execute(plan, _routed_values(x, logits, w_gate, w_up, w_down, bias, scaling))["out"]


@declares("moe_routed_experts")
def _routed_cost(x, logits, w_gate, w_up, w_down, *routing) -> Cost:
    """The routing's bytes (the logits read, weights and experts written) and the expert layer's."""
    if x.shape[0] == 0:
        return Cost((plans.output("out", x.shape, x.dtype).buffer(),), 0, 0, 0)
    options, _, _ = _route_options(logits, *routing)
    plan = routed_plan(x, logits, w_gate, w_up, w_down, options)
    pairs = x.shape[0] * options.top_k
    alignment_reads = 0 if plan.detail.band else 2 * logits.shape[1] * pairs * 4   # the band's ids stay in registers
    moved = logits.size * logits.dtype.itemsize + pairs * 8 + alignment_reads
    return Cost(plan.buffers(), moved + _layer_bytes(x, options.top_k, w_gate, w_up, w_down, plan),
                6 * x.shape[0] * options.top_k * x.shape[1] * w_gate.shape[1] + 6 * logits.size * options.top_k,
                len(plan.launches), notes=_layer_notes(plan))


def band_tables(logits, top_k, block_m, *routing) -> dict:
    """route_align_kernel's outputs alone (tests: the tables equal moe_route's and moe_align's):
    weights, experts, sorted_pairs, block_experts, inverse, padded_count."""
    options, bias, scaling = _route_options(logits, top_k, *routing)
    tokens, count = logits.shape

    def build():
        pairs = tokens * options.top_k
        return LaunchPlan(logits.device, (_route_align_launch(logits.shape, logits.strides, options, block_m,
                                                              logits.device, ""),),
                          outputs=(*_route_outputs(tokens, options.top_k, plans.output),
                                   *_align_tables(pairs, count, block_m, plans.output)))
    plan = plans.cached("moe_route_align", (logits.shape, logits.strides, logits.dtype, logits.device, options,
                                            block_m), build)
    return plans.execute(plan, {"logits": logits, "bias": bias, "scaling_bits": float_bits(scaling)})


STAGES = {"alignment": slice(0, -3), "gemms": slice(-3, -1), "combine": slice(-1, None)}   # the plan's launches


def _staged(plan: LaunchPlan, values: dict) -> dict:
    plans.execute(plan, values)
    parts = {name: LaunchPlan(plan.device, plan.launches[part]) for name, part in STAGES.items()}
    return {name: (lambda part=part: plans.execute(part, values)) for name, part in parts.items()}


def staged_runs(x, weights, experts, w_gate, w_up, w_down) -> dict:
    """Each stage of the layer's plan (STAGES) run alone over one call's buffers, for a benchmark's
    breakdown: {stage: fn()}, after one whole run has filled the tables and the intermediates each
    stage reads (a stage rerun writes what it wrote before: the same bits)."""
    plan = experts_plan(x, weights, experts, w_gate, w_up, w_down)
    return _staged(plan, {"x": x, "weights": weights, "experts": experts, **_weight_values(w_gate, w_up, w_down)})


def routed_staged_runs(x, logits, w_gate, w_up, w_down, top_k, **routing) -> dict:
    """staged_runs of moe_routed_experts' plan: its "alignment" stage is the routing and the
    alignment (one launch in the band, three past it)."""
    options, bias, scaling = _route_options(logits, top_k, **routing)
    plan = routed_plan(x, logits, w_gate, w_up, w_down, options)
    return _staged(plan, _routed_values(x, logits, w_gate, w_up, w_down, bias, scaling))


@implements("moe_experts")
def _moe_experts(x, weights, experts, w_gate, w_up, w_down):
    return launch_experts(x, weights, experts, w_gate, w_up, w_down)


@declares("moe_experts")
def experts_cost(x, weights, experts, w_gate, w_up, w_down) -> Cost:
    """Bytes: x's rows once per pair, the weights of the experts that can be hit (at most one per
    pair), the intermediate and the pair rows written and read, the tables; flops: the three
    products of every pair (padding rows excluded)."""
    tokens, hidden = x.shape
    count, inter, _ = w_gate.shape
    if tokens == 0:
        return Cost((plans.output("out", x.shape, x.dtype).buffer(),), 0, 0, 0)
    plan = experts_plan(x, weights, experts, w_gate, w_up, w_down)
    # each expert's alignment programs read every id (the gemv form aligns nothing)
    alignment_reads = 0 if plan.detail.gemv else 2 * count * experts.size * experts.dtype.itemsize
    return Cost(plan.buffers(), _layer_bytes(x, experts.shape[1], w_gate, w_up, w_down, plan) + alignment_reads,
                6 * experts.size * hidden * inter, len(plan.launches), notes=_layer_notes(plan))


def _layer_bytes(x, k, w_gate, w_up, w_down, plan) -> int:
    """x's rows once per pair, the weights of the experts that can be hit (at most one per pair),
    the intermediate and the pair rows written and read, the output."""
    tokens, hidden = x.shape
    count, inter, _ = w_gate.shape
    pairs, item = tokens * k, x.dtype.itemsize
    hit = min(count, pairs)
    expert_bytes = sum(w.nbytes for w in (w_gate, w_up, w_down)) // count   # int4: bytes, scales and minima
    rows = pairs if plan.detail.gemv else plan.detail.capacity   # the intermediate's rows
    return (pairs * hidden * item + hit * expert_bytes + 2 * rows * inter * item
            + 3 * pairs * hidden * item + tokens * hidden * item)


def _layer_notes(plan) -> tuple:
    if plan.detail.gemv:
        return ("gemv (band)",)
    return (f"block_m {plan.detail.setting['block_m']}" + (" (band)" if plan.detail.band else ""),)


__all__ = ["launch_experts", "experts_plan", "staged_runs", "routed_staged_runs", "routed_plan", "band_tables",
           "RouteOptions", "STAGES", "weight_layout", "WeightLayout", "route_plan", "align_plan", "experts_cost"]
