"""conv1d/2d/3d and conv_transpose1d/2d/3d on the shared launch path.

Paths, decided from shapes alone (one plan each, `plans.cached`):
- depthwise (groups == input channels, one input channel a group, not transposed): the window
  kernel (kernel.py), a BLOCK_C x BLOCK_W tile of one output row, channels by width;
- 1 x 1, stride 1, no padding, one group, channels-last input (no upsample): a product, nbx.linear of the
  (positions, channels) matrix by the (out, in) weight with the bias in its epilogue;
- every other convolution: the implicit GEMM (kernel.py), tiled by the certified setting of its
  launch key (tuning.py);
- conv_transpose1d/2d/3d: polyphase, one implicit-GEMM launch a phase (an output residue modulo
  the stride per dim: an ordinary convolution of stride 1 over the taps of that residue) writing
  its strided view of the output, keyed by its own M, N, K; a weight of torch's layout is read
  through one dense copy (its input channels at unit stride) a call.
1-D and 2-D convolutions are the 3-D kernels with unit leading spatial dims (stride 0). The output
keeps the input's layout: channels-last in, channels-last out (as torch).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from math import gcd, prod

from nbx.core import dtypes
from nbx.core.errors import NotSupportedError
from nbx.core import layout
from nbx.core.layout import contiguous_strides, reach
from nbx.core.ops.conv import _written, conv_out_size, transpose_out_size
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import LAUNCH, RESULT, Buffer, Cost, declares, price
from ..elementwise.casts import COMPILED
from ..matmul import INT32_MAX
from ..matmul.epilogue import TMA_ALIGN, TMA_DTYPES
from ..matmul.tuning import stages_that_fit
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..types import tl_type
from .kernel import DEPTHWISE, conv_gemm_kernel, window_kernel
from .split import SplitK
from .tuning import PHASE_LABEL, conv_setting

KERNEL_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32)


def check_dtype(op: str, dtype) -> None:
    if dtype not in KERNEL_DTYPES:
        raise NotSupportedError(f"{op}: the kernels compute {[d.name for d in KERNEL_DTYPES]}, not {dtype.name} "
                                f"(compute it on the CPU)")


def three(values, fill) -> tuple:
    """A spatial tuple of one to three entries as three (leading dims filled)."""
    return (fill,) * (3 - len(values)) + tuple(values)


is_channels_last = layout.is_channels_last


def storage_layout(batch: int, channels: int, sizes, channels_last: bool):
    """(storage shape, logical strides of (N, C, *S), dims that give the logical view) of an output."""
    n = len(sizes)
    if channels_last:
        shape = (batch, *sizes, channels)
        spatial = tuple(prod(sizes[d + 1:]) * channels for d in range(n))
        return shape, (prod(sizes) * channels, 1, *spatial), (0, n + 1, *range(1, n + 1))
    shape = (batch, channels, *sizes)
    return shape, tuple(prod(shape[d + 1:]) for d in range(n + 2)), tuple(range(n + 2))


def window_tile(device, channels_last: bool) -> dict:
    """The window kernels' tile (tiles.window: block_c channels by block_w positions of a row), its
    long side along the contiguous dim: a channels-last tile is block_w channels by block_c
    positions, so each row of the tile is one coalesced run of channels."""
    tile = dict(launch.tiles("window", device))
    if channels_last:
        tile["block_c"], tile["block_w"] = tile["block_w"], tile["block_c"]
    return tile


@dataclass(frozen=True)
class Detail:
    path: str                  # "gemm", "depthwise", "phases" (a transposed convolution)
    view: tuple[int, ...]      # permutation of the storage output to the logical (N, C, *S)
    tile: dict
    flops: int
    bytes_moved: int


@dataclass(frozen=True)
class Epilogue:
    """What follows the bias in the store: the activation (None or a name of products.ACTIVATIONS)
    and the residual's logical strides (N, C, D, H, W), or None."""
    activation: str | None = None
    residual: tuple | None = None

    def args(self) -> tuple:
        return (Slot("res") if self.residual else Slot("out"), *(self.residual or (0,) * 5))

    def meta(self) -> dict:
        return dict(ACTIVATION=self.activation, HAS_RES=self.residual is not None)


NO_EPILOGUE = Epilogue()


def residual_strides(residual: Tensor | None):
    """A residual's strides as five (N, C, D, H, W), the missing leading spatial dims 0."""
    if residual is None:
        return None
    st = residual.strides
    return (st[0], st[1], *three(st[2:], 0))


def _gemm_meta(dtype, tile: dict, device) -> dict:
    stages = tile["num_stages"]
    if COMPILED:  # a setting of 16-bit operands held to the shared memory a float32 key's stages take
        stages = stages_that_fit(tile, dtype.itemsize, dtype.itemsize, launch.facts(device))
    return dict(DOT=tl_type(dtype), IEEE=dtype is dtypes.float32, BLOCK_M=tile["block_m"], BLOCK_N=tile["block_n"],
                BLOCK_K=tile["block_k"], GROUP_M=tile["group_m"], num_warps=tile["num_warps"], num_stages=stages)


def _gemm_launch(x_strides, w_strides, o_strides, geometry, bias: bool, dtype, device, setting, spatial: int,
                 epilogue: Epilogue = NO_EPILOGUE, upsample=(1, 1, 1), w_aligned: bool = False,
                 out_offset: int = 0, w_offset: int = 0, split: SplitK | None = None) -> tuple[Launch, dict]:
    """The implicit GEMM launch over 3-D geometry (batch, c_g, groups, o_g, sizes, outs, kernel,
    stride, pad, dilation) of a convolution of `spatial` dims (its launch key's: the path its A tile
    takes, A_SHIFT or A_TILE, follows them), tiled by setting or the certified one (w_aligned: the weight's data is
    16-byte aligned, a descriptor's base). out_offset, w_offset: elements past the output's and the
    weight's first (a transposed convolution's phase: its view of the output, its first tap).
    split: the partials' layout where the caller can split K (its splits are the tile's split_k, set
    here); without it the tile runs unsplit (split_k 1)."""
    batch, c_g, groups, o_g, sizes, outs, kernel, stride, pad, dilation = geometry
    m, k = batch * prod(outs), c_g * prod(kernel)
    if setting is None:
        setting = conv_setting(device, m, o_g, k, dtype, x_strides[1] == 1 and c_g * groups > 1, spatial)
    tile = {**launch.tiles("conv", device), **dict(setting)}
    if split is None:
        tile["split_k"] = 1
    meta = dict(HAS_BIAS=bias, **epilogue.meta(), **_gemm_meta(dtype, tile, device))
    meta.update(zip(("UP_D", "UP_H", "UP_W"), upsample))
    tiles = -(-m // tile["block_m"]) * -(-o_g // tile["block_n"])
    res_slot, *res_strides = epilogue.args()
    channels = (batch, c_g * groups)
    reaches = (reach((*channels, *sizes), x_strides), reach((groups, o_g, c_g, *kernel), w_strides),
               *(reach((batch, o_g * groups, *outs), st) for st in (o_strides, res_strides)))
    # the split partials reach split_k outputs (their stores: n os_n + split split_stride)
    wide = max(*reaches[:2], tile["split_k"] * max(reaches[2:])) - 1 > INT32_MAX // 2
    meta.update(WIDE=wide, EVEN_C=c_g % tile["block_k"] == 0,   # margin: a tile's overreach
                ONE_TAP=prod(kernel) == 1)
    divides = upsample != (1, 1, 1)
    shift = a_shift(x_strides, kernel, stride, outs, divides, tile)
    meta.update(B_DESC=w_aligned and meta["EVEN_C"] and _weight_rows(w_strides, c_g, o_g, kernel, dtype, device),
                A_TILE=not shift and a_tile(x_strides, kernel, divides, tile), A_SHIFT=shift)
    if shift:   # a static shift a width tap; two A tiles a stage (lo, hi), so fewer stages may fit
        meta.update(TAPS_W=kernel[2], PAD_W=pad[2], DIL_W=dilation[2],
                    num_stages=stages_that_fit({**tile, "num_stages": meta["num_stages"]}, 2 * dtype.itemsize,
                                               dtype.itemsize, launch.facts(device)))
    grid, split_stride, out = (tiles, groups), 0, Slot("out", offset=out_offset)
    if tile["split_k"] > 1:   # float32 partials, summed by split.epilogue
        o_strides, split_stride = replace(split, splits=tile["split_k"]).partial_strides(o_strides)
        out, grid = Slot("part"), (tiles, groups, tile["split_k"])
        meta.update(SPLIT_K=tile["split_k"], HAS_BIAS=False, ACTIVATION=None, HAS_RES=False)   # the epilogue's
    args = (Slot("x"), Slot("w", offset=w_offset), Slot("bias"), out, res_slot, batch, c_g, *sizes, o_g, *outs,
            *kernel, *stride, *pad, *dilation, *x_strides, *w_strides, *o_strides, *res_strides, split_stride)
    return Launch(conv_gemm_kernel, grid, args, meta, descriptors=int(meta["B_DESC"])), tile


A_TILE_WARP_ELEMENTS = 1024   # A elements a warp holds: past 32 a thread (64 registers of pointers) sm_90 spills


def _channels_first_tile(x_strides, divides: bool, tile: dict) -> bool:
    """A plain convolution of a channels-first input (positions at unit stride, channels not) whose
    A tile a warp holds in registers (A_TILE's pointers, A_SHIFT's two tiles) without spilling."""
    small = tile["block_m"] * tile["block_k"] // tile["num_warps"] <= A_TILE_WARP_ELEMENTS
    return x_strides[1] != 1 and x_strides[4] == 1 and not divides and small


def a_tile(x_strides, kernel, divides: bool, tile: dict) -> bool:
    """kernel.py's A_TILE: a channels-first convolution of several taps."""
    return _channels_first_tile(x_strides, divides, tile) and prod(kernel) > 1


def a_shift(x_strides, kernel, stride, outs, divides: bool, tile: dict) -> bool:
    """kernel.py's A_SHIFT: a channels-first convolution whose taps are along the width alone (a
    conv1d; so its sums run in the flat loop's order, tap then channels, and stay bit-equal to the
    fused upsample's and to a band's launch), stride 1 there, output rows of whole groups of 8."""
    return (_channels_first_tile(x_strides, divides, tile) and kernel[0] == kernel[1] == 1 and kernel[2] > 1
            and stride[2] == 1 and outs[2] % 8 == 0)


def _weight_rows(w_strides, c_g: int, o_g: int, kernel, dtype, device) -> bool:
    """Whether the weight is one dense [O, taps x C_G] matrix of 16-byte rows (a channels-last weight)
    that a tensor descriptor reads (kernel.py's B_DESC), on a device with descriptor copies."""
    ws_g, ws_o, ws_c, *ws_taps = w_strides
    inner = (kernel[1] * kernel[2] * c_g, kernel[2] * c_g, c_g)   # each tap dim's stride in the dense matrix
    dense = (ws_c == 1 and ws_g == o_g * ws_o and ws_o == prod(kernel) * c_g
             and all(size == 1 or st == want for size, st, want in zip(kernel, ws_taps, inner)))
    return (dense and c_g * dtype.itemsize % TMA_ALIGN == 0 and ws_o * dtype.itemsize % TMA_ALIGN == 0
            and dtype.name in TMA_DTYPES and bool(launch.facts(device).value("matrix_unit.tma")))


def _spatial(shape, strides, n: int):
    return three(shape[2:], 1), (strides[0], strides[1], *three(strides[2:], 0))


def _conv_plan(x_shape, x_strides, w_shape, w_strides, has_bias, dtype, stride, pads, dilation, groups, device,
               setting, epilogue: Epilogue = NO_EPILOGUE, upsample: int = 1, w_aligned: bool = False,
               into_strides=None) -> LaunchPlan:
    """upsample > 1 (the implicit GEMM only): the convolution of x's nearest upsampling by it;
    into_strides: the logical (N, C, *S) strides of a caller's view the kernels store into (the
    "out" value then, not allocated), else those of the plan's output storage."""
    n = len(x_shape) - 2
    read_shape = x_shape
    x_shape = (*x_shape[:2], *(s * upsample for s in x_shape[2:]))   # the image the convolution sees
    batch, channels, out_channels = x_shape[0], x_shape[1], w_shape[0]
    c_g, o_g = channels // groups, out_channels // groups
    kernel = tuple(w_shape[2:])
    outs = tuple(conv_out_size(x_shape[2 + d], *pads[d], kernel[d], stride[d], dilation[d]) for d in range(n))
    cl = is_channels_last(x_shape, x_strides)
    storage, o_strides, view = storage_layout(batch, out_channels, outs, cl)
    sizes, xs = _spatial(x_shape, x_strides, n)
    dense_into = into_strides is None or tuple(into_strides) == o_strides   # the split epilogue stores a dense output
    o_strides = o_strides if into_strides is None else tuple(into_strides)
    os_ = (o_strides[0], o_strides[1], *three(o_strides[2:], 0))
    geometry = (batch, c_g, groups, o_g, sizes, three(outs, 1), three(kernel, 1), three(stride, 1),
                three([p[0] for p in pads], 0), three(dilation, 1))
    flops = 2 * batch * prod(outs) * out_channels * c_g * prod(kernel)
    moved = (prod(read_shape) + prod(w_shape) + prod(storage) + (out_channels if has_bias else 0)) * dtype.itemsize
    if c_g == 1 and groups == channels and upsample == 1:  # depthwise: out channel c reads input channel c // (O / C)
        tile = window_tile(device, cl)
        ws = (w_strides[0], *three(w_strides[2:], 0))
        res_slot, *res_strides = epilogue.args()
        args = (Slot("x"), Slot("w"), Slot("bias"), Slot("out"), Slot("out"), res_slot, channels, *sizes,
                *three(outs, 1), *three(kernel, 1), o_g, *three(stride, 1), *three([p[0] for p in pads], 0),
                *three(dilation, 1), 0, *xs, *ws, *os_, *res_strides)
        grid = (batch * prod(three(outs, 1)[:2]), -(-three(outs, 1)[2] // tile["block_w"]),
                -(-out_channels // tile["block_c"]))
        meta = dict(MODE=DEPTHWISE, ADAPTIVE=False, INCLUDE_PAD=False, HAS_BIAS=has_bias, **epilogue.meta(),
                    BLOCK_C=tile["block_c"],
                    BLOCK_W=tile["block_w"], num_warps=tile["num_warps"])
        return LaunchPlan(device, (Launch(window_kernel, grid, args, meta),), (plans.output("out", storage, dtype),),
                          detail=Detail("depthwise", view, tile, flops, moved))
    w_s = (o_g * w_strides[0], w_strides[0], w_strides[1], *three(w_strides[2:], 0))
    split = SplitK.of(0, batch, out_channels, outs, cl)   # its splits: the tile's split_k
    res_view = epilogue.residual and split.residual(epilogue.residual, batch, out_channels, three(outs, 1))
    # unsplit: a residual the epilogue cannot read, or an into= view the dense split epilogue cannot store
    may_split = dense_into and (epilogue.residual is None or res_view is not None)
    one, tile = _gemm_launch(xs, w_s, os_, geometry, has_bias, dtype, device, setting, n, epilogue=epilogue,
                             upsample=three([upsample] * n, 1), w_aligned=w_aligned, split=split if may_split else None)
    if tile["split_k"] == 1:
        return LaunchPlan(device, (one,), (plans.output("out", storage, dtype),),
                          detail=Detail("gemm", view, tile, flops, moved))
    split = replace(split, splits=tile["split_k"])
    return LaunchPlan(device, (one, split.epilogue(has_bias, epilogue.activation, res_view)),
                      (plans.output("out", storage, dtype),), (split.workspace(),),
                      detail=Detail("gemm", view, tile, flops, moved + 2 * split.nbytes))


@dataclass(frozen=True)
class Phase:
    """One output phase of a transposed convolution along one dim: outputs o0, o0 + stride, ...
    (count of them), an ordinary convolution of stride 1 over the taps k0, k0 + step, ... (taps of
    them): its output u reads input u - lo + j * dilation at tap j (a negative dilation: a later tap
    reads an earlier input, so the weight is read in its own order, never flipped)."""
    o0: int
    count: int
    k0: int
    taps: int
    step: int
    lo: int
    dilation: int


def phases(out_size: int, kernel: int, stride: int, pad: int, dilation: int) -> tuple[Phase, ...]:
    """The phases of one dim with outputs: output o = s t + r - pad (r in [0, s)) gathers
    x[i] w[k] over i s + k dilation = s t + r, so its taps are the k with k dilation = r (mod s):
    k0 + step j, step = s / gcd(dilation, s), reading i = t - (k0 dilation - r) / s - j dilation / gcd.
    A residue no tap reaches (gcd not dividing r, or k0 >= kernel) keeps taps = 0: its outputs are the
    bias alone."""
    g = gcd(dilation, stride)
    step = stride // g
    found = []
    for r in range(stride):
        o0 = (r - pad) % stride
        count = -(-(out_size - o0) // stride)
        if count <= 0:
            continue
        k0 = next((k for k in range(min(step, kernel)) if (k * dilation - r) % stride == 0), kernel)
        taps = -(-(kernel - k0) // step) if k0 < kernel else 0
        t0 = (o0 + pad - r) // stride
        lo = (k0 * dilation - r) // stride - t0 if taps else 0
        found.append(Phase(o0, count, k0 if taps else 0, taps, step, lo, -(dilation // g)))
    return tuple(found)


def phase_weight(weight: Tensor, groups: int) -> Tensor:
    """The transposed weight (C_in, O / g, *K) as (g, O / g, *K, C_in / g): the logical order of the
    dense copy the phases read (its input channels at unit stride, so a B tile's loads are rows)."""
    n = weight.ndim - 2
    split = weight.reshape(groups, weight.shape[0] // groups, *weight.shape[1:])
    return split.permute(0, 2, *range(3, 3 + n), 1)


def copies_weight(w_strides, c_g: int) -> bool:
    """Whether the phases read a dense copy of the weight: its input channels are not at unit stride
    (torch's (C_in, O / g, *K) layout), so a B tile would be read one element at a time."""
    return c_g > 1 and w_strides[0] != 1


def _transpose_plan(x_shape, x_strides, w_shape, w_strides, has_bias, dtype, stride, padding, output_padding, groups,
                    dilation, device, setting, w_aligned: bool = False) -> LaunchPlan:
    """The polyphase form: one implicit-GEMM launch a phase (a residue of the output positions per
    dim), each writing its strided view of the output from its own taps: no intermediate, no
    product by the zeros between the input's samples."""
    n = len(x_shape) - 2
    batch, channels = x_shape[0], x_shape[1]
    c_g, o_g = channels // groups, w_shape[1]
    kernel = tuple(w_shape[2:])
    outs = tuple(transpose_out_size(x_shape[2 + d], padding[d], kernel[d], stride[d], dilation[d], output_padding[d])
                 for d in range(n))
    cl = is_channels_last(x_shape, x_strides)
    storage, o_strides, view = storage_layout(batch, o_g * groups, outs, cl)
    sizes, xs = _spatial(x_shape, x_strides, n)
    copy = copies_weight(w_strides, c_g)
    if copy:   # the (g, O / g, *K, C_in / g) copy: phase_weight's order
        dense = contiguous_strides((groups, o_g, *kernel, c_g))
        w_g, w_o, w_c, w_taps = dense[0], dense[1], dense[-1], dense[2:-1]
    else:
        w_g, w_o, w_c, w_taps = c_g * w_strides[0], w_strides[1], w_strides[0], w_strides[2:]
    launches, tile, macs, reads = [], None, 0, 0
    for combo in product(*(phases(outs[d], kernel[d], stride[d], padding[d], dilation[d]) for d in range(n))):
        counts, taps = [p.count for p in combo], [p.taps for p in combo]
        reached = prod(taps) > 0
        w_offset = sum(p.k0 * st for p, st in zip(combo, w_taps)) if reached else 0
        out_offset = sum(p.o0 * st for p, st in zip(combo, o_strides[2:]))
        os_ = (o_strides[0], o_strides[1], *three([st * s for st, s in zip(o_strides[2:], stride)], 0))
        w_s = (w_g, w_o, w_c, *three([p.step * st for p, st in zip(combo, w_taps)], 0))
        geometry = (batch, c_g, groups, o_g, sizes, three(counts, 1), three(taps, 1), (1, 1, 1),
                    three([p.lo for p in combo], 0), three([p.dilation for p in combo], 1))
        aligned = reached and not copy and w_aligned and w_offset * dtype.itemsize % TMA_ALIGN == 0
        # a phase with no tap stores the bias alone: the device file's tile, no key to resolve
        one, phase_tile = _gemm_launch(xs, w_s, os_, geometry, has_bias, dtype, device,
                                       setting if reached else (setting or {}), PHASE_LABEL if n == 1 else n,
                                       out_offset=out_offset, w_offset=w_offset, w_aligned=aligned)
        launches.append(one)
        tile = tile or phase_tile
        macs += batch * prod(counts) * o_g * groups * c_g * prod(taps)
        reads += reached
    weight_bytes = prod(w_shape) * dtype.itemsize
    moved = ((reads * prod(x_shape) + prod(storage) + (o_g * groups if has_bias else 0)) * dtype.itemsize
             + weight_bytes * (3 if copy else 1))   # a copy: read, written, read again
    return LaunchPlan(device, tuple(launches), (plans.output("out", storage, dtype),), copies=("w",) if copy else (),
                      detail=Detail("phases", view, tile, 2 * macs, moved))


def transpose_plan(x, weight, bias, stride, padding, output_padding, groups, dilation, setting=None) -> LaunchPlan:
    aligned = weight.data_ptr() % TMA_ALIGN == 0   # a descriptor's base (B_DESC), where no copy is read
    key = ("transpose", _layout(x), _layout(weight), bias is not None, stride, padding, output_padding, groups,
           dilation, x.device, plans.setting_key(setting), aligned)
    return plans.cached("conv_transpose", key, lambda: _transpose_plan(
        x.shape, x.strides, weight.shape, weight.strides, bias is not None, x.dtype, stride, padding, output_padding,
        groups, dilation, x.device, setting, aligned))


def _layout(t: Tensor | None):
    return None if t is None else (t.shape, t.strides, t.dtype)


def is_product(x: Tensor, weight: Tensor, stride, pads, dilation, groups) -> bool:
    """A 1 x 1 convolution of a channels-last input: a product of (positions, C) by weight.T."""
    return (groups == 1 and weight.shape[2:] == (1,) * len(stride) and all(s == 1 for s in stride)
            and all(p == (0, 0) for p in pads) and is_channels_last(x.shape, x.strides)
            and x.permute(0, *range(2, x.ndim), 1).is_contiguous() and weight.is_contiguous())


def _product_operands(x: Tensor, weight: Tensor):
    rows = x.permute(0, *range(2, x.ndim), 1).reshape(-1, x.shape[1])
    return rows, weight.reshape(weight.shape[0], weight.shape[1])


def conv_plan(x, weight, bias, stride, pads, dilation, groups, setting=None, activation=None,
              residual=None, upsample: int = 1, into_strides=None) -> LaunchPlan:
    res = residual_strides(residual)   # the key holds the epilogue's fields: its object is made for a new plan
    aligned = weight.data_ptr() % TMA_ALIGN == 0   # a descriptor's base (B_DESC)
    key = ("conv", _layout(x), _layout(weight), bias is not None, stride, pads, dilation, groups, x.device,
           plans.setting_key(setting), activation, res, upsample, aligned, into_strides)
    return plans.cached("conv", key, lambda: _conv_plan(x.shape, x.strides, weight.shape, weight.strides,
                                                        bias is not None, x.dtype, stride, pads, dilation, groups,
                                                        x.device, setting, Epilogue(activation, res), upsample,
                                                        aligned, into_strides))


def launch_conv(x, weight, bias, stride, pads, dilation, groups, out=None, setting=None, activation=None,
                residual=None, upsample: int = 1, into: Tensor | None = None) -> Tensor:
    """The convolution through the window or implicit-GEMM kernel, activation(conv + bias) +
    residual (out: the plan's storage buffer when given; setting overrides the served one: the
    certifier's); upsample > 1: of x's nearest upsampling, fused into the GEMM's input load;
    into: a view of the output's shape and dtype, any strides, that the kernel stores into (returned)."""
    plan = conv_plan(x, weight, bias, stride, pads, dilation, groups, setting, activation, residual, upsample,
                     None if into is None else into.strides)
    values = plans.execute(plan, {"x": x, "w": weight, "bias": x if bias is None else bias,
                                  "out": out if into is None else into, "res": residual})
    return into if into is not None else values["out"].permute(*plan.detail.view)


def _product_residual(residual: Tensor | None):
    """The residual (N, C, *S) as the product's (positions, C) rows (a view when channels-last)."""
    if residual is None:
        return None
    return residual.permute(0, *range(2, residual.ndim), 1).reshape(-1, residual.shape[1])


def _convolution(x, weight, bias, stride, pads, dilation, groups, activation=None, residual=None, upsample=1,
                 into=None):
    """into: a view of the output's shape and dtype (any strides) that receives it (returned):
    stored there by the window and implicit-GEMM kernels, copied there from the product's rows."""
    check_dtype(f"conv{x.ndim - 2}d", x.dtype)
    if upsample == 1 and is_product(x, weight, stride, pads, dilation, groups):
        from nbx.core.ops.products import linear
        rows, w = _product_operands(x, weight)
        out = linear(rows, w, bias, activation=activation, residual=_product_residual(residual))
        out = out.reshape(x.shape[0], *x.shape[2:], weight.shape[0]).permute(0, x.ndim - 1, *range(1, x.ndim - 1))
        return out if into is None else _written(into, out)
    return launch_conv(x, weight, bias, stride, pads, dilation, groups, activation=activation, residual=residual,
                       upsample=upsample, into=into)


def _transposed(x, weight, bias, stride, padding, output_padding, groups, dilation):
    check_dtype(f"conv_transpose{x.ndim - 2}d", x.dtype)
    plan = transpose_plan(x, weight, bias, stride, padding, output_padding, groups, dilation)
    w = phase_weight(weight, groups) if plan.copies else weight
    values = plans.execute(plan, {"x": x, "w": w, "bias": x if bias is None else bias})
    return values["out"].permute(*plan.detail.view)


for _n in (1, 2, 3):
    implements(f"conv{_n}d")(_convolution)
    implements(f"conv_transpose{_n}d")(_transposed)


def _cost(plan: LaunchPlan) -> Cost:
    return Cost(plan.buffers(), plan.detail.bytes_moved, plan.detail.flops, len(plan.launches))


def _conv_cost(x, weight, bias, stride, pads, dilation, groups, activation=None, residual=None, upsample=1,
               into=None) -> Cost:
    """into: the product's copy there is one more launch reading and writing the output; the
    kernels that store into it allocate no output."""
    if upsample == 1 and is_product(x, weight, stride, pads, dilation, groups):
        cost = price("linear", *_product_operands(x, weight), bias, activation, _product_residual(residual))
        return cost if into is None else replace(cost, bytes_moved=cost.bytes_moved + 2 * into.nbytes,
                                                 launches=cost.launches + 1)
    cost = _cost(conv_plan(x, weight, bias, stride, pads, dilation, groups, None, activation, residual, upsample,
                           None if into is None else into.strides))
    return cost if into is None else replace(cost, buffers=tuple(b for b in cost.buffers if b.lifetime != RESULT))


def _transpose_cost(x, weight, bias, stride, padding, output_padding, groups, dilation) -> Cost:
    """The phases' launches, and the weight's dense copy where one is read (a buffer and a launch)."""
    plan = transpose_plan(x, weight, bias, stride, padding, output_padding, groups, dilation)
    copy = tuple(Buffer("w_contiguous", weight.size * weight.dtype.itemsize, LAUNCH) for _ in plan.copies)
    return Cost(plan.buffers() + copy, plan.detail.bytes_moved, plan.detail.flops, len(plan.launches) + len(copy))


for _n in (1, 2, 3):
    declares(f"conv{_n}d")(_conv_cost)
    declares(f"conv_transpose{_n}d")(_transpose_cost)

__all__ = ["launch_conv", "conv_plan", "is_channels_last", "storage_layout", "three", "check_dtype", "window_tile"]
