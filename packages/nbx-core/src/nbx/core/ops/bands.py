"""A chain of convolutions run band by band along the first spatial dim (a 2-D image's height, a
1-D sequence's length, a 3-D volume's depth or a video's frames), so that a tall image's or a long
sequence's activations never exist whole: `tiled_conv_chain(x, layers, band_rows)`. A layer may
upsample its input first (`upsample=k`: conv of interpolate(x, scale_factor=k, mode='nearest'),
fused into the convolution as conv2d's upsample=; a VAE decoder's upsampler).

Each band is `band_rows` rows of the chain's output. Walking the chain backwards gives, per layer,
the rows of its input the band needs (its halo: kernel extent, dilation, stride and padding of
every layer after it); those rows are computed from the rows the layer before needs, and so on
down to the input. Only the true image edges are padded: a zero-padded layer takes the part of
its (low, high) padding that falls outside the image as explicit padding of the band; a reflect or
replicate layer pads the band with `pad` (the band then holds the real rows the reflection
reads) and crops it to the rows needed. An upsampling layer holds the stored rows whose upsampled
rows cover the ones needed; when the needed rows start inside a stored row (or off the stride's
grid), the band's convolution computes the few output rows before them too and drops them. Each
band's output rows are written into the full output: after the first band (which gives the
output its layout), the last convolution stores them there itself (into=).

Host time (a GPU waits on it: 8 bands of 2 convolutions are 16 launches): each layer's
convolution is checked once a call on its first band (conv's checked_convolution, the
front-end's own checks) and every band calls the device's implementation with the pads it
derives; a layer's row geometry is worked out once (ConvLayer.rows).

Every output element is then computed from the same input values by the same kernel arithmetic as
in `conv_chain` (the untiled chain), so the two are bit-equal wherever the convolution's
accumulation order does not depend on the launch's size: the CPU and `interp` (one tile for every
size); on a GPU where the band's launches and the whole image's are served one setting.

A diffusion VAE decoder's stages also hold group norms and residual blocks: `GroupNormLayer`
(group_norm with its activation) and `Residual(body, shortcut)` (body(x) + x, or + a 1 x 1
projection). A group norm's statistics are those of its whole input: before the output's bands,
tiled_conv_chain runs the chain up to each norm band by band (in order, the earlier norms applied
with their statistics) and combines the bands' means and variances (Chan's rule, in float64); the
band then applies them per channel (batch_norm's map per sample, then the activation). A chain with
norms is therefore not bit-equal to the untiled one (its statistics are summed in another order and
a half type rounds once more, between the map and the activation) but agrees to the dtype's
tolerance; it costs one more banded pass of its prefix per norm.

Peak memory: the output, the input, and one band's activations of every layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .. import dtypes, layout
from ..errors import ArgumentError, NotSupportedError, ShapeError
from ..tensor import Tensor
from .conv import checked_convolution, conv1d, conv2d, conv3d, conv_out_size, conv_padding, pad_spatial, spatial_tuple

BAND_PADDING_MODES = ("zeros", "reflect", "replicate")
CONVS = {1: conv1d, 2: conv2d, 3: conv3d}
ACTIVATIONS = {None: lambda x: x, "relu": lambda x: _ops().relu(x), "silu": lambda x: _ops().silu(x),
               "gelu": lambda x: _ops().gelu(x), "gelu_tanh": lambda x: _ops().gelu(x, approximate="tanh")}


def _ops():
    from nbx import core   # the activations' front-ends (imported when a band first applies one)
    return core


@dataclass(frozen=True)
class ConvLayer:
    """One convolution of a chain (conv1d, conv2d or conv3d by the weight's rank), with their
    arguments (and the fused activation and nearest upsampling of the input)."""
    weight: Tensor
    bias: Tensor | None = None
    stride: int | tuple = 1
    padding: int | tuple | str = 0
    dilation: int | tuple = 1
    groups: int = 1
    padding_mode: str = "zeros"
    activation: str | None = None
    upsample: int = 1

    @property
    def rank(self) -> int:
        return self.weight.ndim - 2

    @cached_property
    def rows(self):
        """(kernel, stride, dilation, (low, high) padding along the banded dim, the other spatial dims'
        (low, high) paddings); worked out once a layer (every band of every call reads it)."""
        n, kernel = self.rank, tuple(self.weight.shape[2:])
        stride, dilation = spatial_tuple(self.stride, n, "stride"), spatial_tuple(self.dilation, n, "dilation")
        pads = conv_padding(self.padding, n, kernel, stride, dilation)
        return kernel[0], stride[0], dilation[0], pads[0], pads[1:]

    def __call__(self, x: Tensor, padding=None, padding_mode=None) -> Tensor:
        return CONVS[self.rank](x, self.weight, self.bias, self.stride, self.padding if padding is None else padding,
                                self.dilation, self.groups, padding_mode or self.padding_mode,
                                activation=self.activation, upsample=self.upsample)


@dataclass(frozen=True)
class GroupNormLayer:
    """group_norm(x, num_groups, weight, bias, eps, activation=) in a chain (its statistics over the
    whole input: gathered by a banded pass first, see the module's text)."""
    num_groups: int
    weight: Tensor | None = None
    bias: Tensor | None = None
    eps: float = 1e-5
    activation: str | None = None

    def __call__(self, x: Tensor) -> Tensor:
        from .norms import group_norm
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps, activation=self.activation)


@dataclass(frozen=True)
class Residual:
    """body(x) + x, or body(x) + shortcut(x) with shortcut a 1 x 1, stride 1 ConvLayer (a ResNet block
    whose channels change); the body keeps the banded dim's size."""
    body: tuple
    shortcut: ConvLayer | None = None

    def __call__(self, x: Tensor) -> Tensor:
        return conv_chain(x, self.body) + (x if self.shortcut is None else self.shortcut(x))


def conv_chain(x: Tensor, layers) -> Tensor:
    """The layers applied in turn to the whole image."""
    for layer in layers:
        x = layer(x)
    return x


def receptive_field(layers) -> int:
    """The input rows one output row of the chain depends on (at most, for upsampling layers: r
    consecutive upsampled rows fall in at most ceil((r - 1) / k) + 1 stored rows)."""
    return _rows_needed(list(layers), 1)


def _rows_needed(layers, rows: int) -> int:
    for layer in reversed(layers):
        if isinstance(layer, Residual):
            rows = max(rows, _rows_needed(list(layer.body), rows))
        elif isinstance(layer, ConvLayer):
            k, s, d, _, _ = layer.rows
            rows = (rows - 1) * s + d * (k - 1) + 1
            rows = -(-(rows - 1) // layer.upsample) + 1
    return rows


def _heights(height: int, layers) -> list[int]:
    """The height of the chain's input and of each layer's output."""
    heights = [height]
    for layer in layers:
        if isinstance(layer, ConvLayer):
            k, s, d, (lo, hi), _ = layer.rows
            heights.append(conv_out_size(heights[-1] * layer.upsample, lo, hi, k, s, d))
        else:
            heights.append(heights[-1])
            if isinstance(layer, Residual) and _heights(heights[-1], layer.body)[-1] != heights[-1]:
                raise ShapeError(f"tiled_conv_chain: a Residual's body changes the {heights[-1]} rows of its "
                                 f"input (its sum needs the same rows)")
        if heights[-1] < 1:
            raise ShapeError(f"tiled_conv_chain: a layer leaves no rows of the {height}-row input")
    return heights


def _plan_band(first: int, last: int, layers, heights):
    """Per layer (from the input up): (rows held [lo, hi) of its input, rows needed [lo, hi) of its
    padded (upsampled) input in image coordinates); the band is the chain's output rows [first, last)."""
    steps = []
    for index in range(len(layers) - 1, -1, -1):
        if not isinstance(layers[index], ConvLayer):   # a norm: the same rows; a residual: its body's and these
            inner = None
            held = (first, last)
            if isinstance(layers[index], Residual):
                inner = _plan_band(first, last, layers[index].body, _heights(heights[index], layers[index].body))
                held = (min(first, inner[0][0][0]), max(last, inner[0][0][1]))
            steps.append((held, (first, last), inner))
            first, last = held
            continue
        k, s, d, (pad_lo, _), _ = layers[index].rows
        up, size = layers[index].upsample, heights[index]
        need = (first * s - pad_lo, (last - 1) * s - pad_lo + d * (k - 1) + 1)
        held = [max(need[0], 0) // up, -(-min(need[1], size * up) // up)]
        if layers[index].padding_mode != "zeros":  # the rows a reflection of the padding reads
            if need[0] < 0:
                held[1] = max(held[1], min(size, -need[0] + 1))
            if need[1] > size:
                held[0] = min(held[0], max(0, size - 1 - (need[1] - size)))
        steps.append((tuple(held), need, None))
        first, last = held
    return steps[::-1]


class _Call:
    """What one tiled_conv_chain call works out once and every band reuses: each norm's statistics
    (per sample, the per-channel mean and variance on the device) and each ConvLayer's convolution
    checked on its first band (checked_convolution; by the layer and its input's channels and dtype,
    so a layer object met twice is checked for each input it convolves)."""

    def __init__(self):
        self.stats, self._convs = {}, {}

    def conv(self, layer: ConvLayer, band: Tensor, pads, into: Tensor | None = None) -> Tensor:
        """layer's convolution of the band, zero-padded by pads ((low, high) a spatial dim), written
        into the view into when given."""
        key = (id(layer), band.shape[1], band.dtype)
        run = self._convs.get(key)
        if run is None:
            run = self._convs[key] = checked_convolution(band, layer.weight, layer.bias, layer.stride, pads,
                                                         layer.dilation, layer.groups, layer.activation,
                                                         layer.upsample)
        return run(band, pads, into)


def _rows(t: Tensor, start: int, stop: int) -> Tensor:
    """t's rows [start, stop) of the banded dim (a view)."""
    return t.narrow(2, start, stop - start)


def _run_band(layers, steps, band: Tensor, call: _Call, into: Tensor | None = None) -> Tensor:
    """The band (its first layer's rows held) through the layers: the last one's rows of the band,
    written into the view into when given (a last convolution stores them there: no copy)."""
    for index, (layer, (held, need, inner)) in enumerate(zip(layers, steps)):
        if isinstance(layer, GroupNormLayer):
            band = _normalized(layer, band, call.stats[id(layer)])
        elif isinstance(layer, Residual):
            body = inner[0][0]
            out = _run_band(layer.body, inner, _rows(band, body[0] - held[0], body[1] - held[0]), call)
            skip = _rows(band, need[0] - held[0], need[1] - held[0])
            band = out + (skip if layer.shortcut is None else call.conv(layer.shortcut, skip,
                                                                        ((0, 0),) * (skip.ndim - 2)))
        else:
            band = _band_layer(layer, band, held, need, call, into if index == len(layers) - 1 else None)
    if into is not None and band is not into:
        into._copy_from(band)
        return into
    return band


def _normalized(layer: GroupNormLayer, band: Tensor, moments) -> Tensor:
    """The group norm of a band by its input's whole statistics: per sample, batch_norm's per-channel
    map (moments: the group's mean and variance repeated over its channels), then the activation."""
    from .datamove import concat
    from .norms import batch_norm
    rows = [ACTIVATIONS[layer.activation](batch_norm(band[n:n + 1], mean, var, layer.weight, layer.bias, layer.eps))
            for n, (mean, var) in enumerate(moments)]
    return rows[0] if len(rows) == 1 else concat(rows, axis=0)



def _band_layer(layer: ConvLayer, band: Tensor, held, need, call: _Call, into: Tensor | None) -> Tensor:
    """The layer's rows of the band (into: the view they are stored into, unless the layer upsamples:
    its convolution's rows start before the ones needed)."""
    other_pads = layer.rows[4]
    if layer.upsample > 1:
        return _upsampled_band_layer(layer, band, held, need, other_pads, call)
    top, bottom = held[0] - need[0], need[1] - held[1]   # > 0 only at the image's edges
    if layer.padding_mode == "zeros":
        start, stop = max(need[0], held[0]) - held[0], min(need[1], held[1]) - held[0]
        return call.conv(layer, _rows(band, start, stop), ((max(top, 0), max(bottom, 0)), *other_pads), into)
    padded = pad_spatial(band, ((max(top, 0), max(bottom, 0)), *other_pads), layer.padding_mode)
    origin = held[0] - max(top, 0)   # the image row of the padded band's first row
    return call.conv(layer, _rows(padded, need[0] - origin, need[1] - origin), ((0, 0),) * (band.ndim - 2), into)


def _upsampled_band_layer(layer: ConvLayer, band: Tensor, held, need, other_pads, call: _Call) -> Tensor:
    """The band's output rows of an upsampling layer (zero padding): the stored rows held upsample
    to image rows [held[0] k, held[1] k), which may start before the rows needed; extra zero rows
    at the top put the needed start on the stride's grid, and the output rows before it are dropped."""
    k, s, d, _, _ = layer.rows
    up_start, up_end = held[0] * layer.upsample, held[1] * layer.upsample
    top, bottom = max(0, -need[0]), max(0, need[1] - up_end)
    skip = need[0] - (up_start - top)              # upsampled rows held before the first one needed
    extra = -skip % s
    out = call.conv(layer, band, ((top + extra, bottom), *other_pads))
    first, count = (skip + extra) // s, (need[1] - need[0] - d * (k - 1) - 1) // s + 1
    return out.narrow(2, first, count)


def _check_layers(x: Tensor, layers, top: bool = True) -> list:
    layers = list(layers)
    kinds = (ConvLayer, GroupNormLayer, Residual)
    if not layers or not all(isinstance(layer, kinds) for layer in layers):
        raise ArgumentError("tiled_conv_chain takes a non-empty sequence of ConvLayer, GroupNormLayer and Residual")
    if top and (not isinstance(x, Tensor) or x.ndim not in (3, 4, 5)):
        raise ShapeError("tiled_conv_chain takes an (N, C, L), (N, C, H, W) or (N, C, D, H, W) input tensor")
    for layer in layers:
        if isinstance(layer, Residual):
            _check_layers(x, layer.body, top=False)
            short = layer.shortcut
            if short is not None and not _is_projection(short, x.ndim - 2):
                raise ArgumentError("tiled_conv_chain: a Residual's shortcut is None or a 1 x 1, stride 1, unpadded "
                                    "ConvLayer")
            continue
        if isinstance(layer, GroupNormLayer):
            continue
        if layer.weight.ndim != x.ndim:
            raise ShapeError(f"tiled_conv_chain: a layer's weight {tuple(layer.weight.shape)} does not convolve "
                             f"a {x.ndim}-D input (one chain is of one rank)")
        if layer.padding_mode not in BAND_PADDING_MODES:
            raise NotSupportedError(f"tiled_conv_chain: padding_mode {layer.padding_mode!r} is not banded (a "
                                    f"circular pad reads the far edge); it bands {BAND_PADDING_MODES}")
        if layer.upsample != 1 and layer.padding_mode != "zeros":
            raise NotSupportedError(f"tiled_conv_chain: an upsampling layer with padding_mode "
                                    f"{layer.padding_mode!r} is not banded (it pads the upsampled edge); zeros is")
    return layers


def _is_projection(layer, rank: int) -> bool:
    """Whether a shortcut is a 1 x 1, stride 1, unpadded ConvLayer of the chain's rank."""
    ones = (1,) * rank
    return (isinstance(layer, ConvLayer) and layer.rank == rank and layer.upsample == 1
            and tuple(layer.weight.shape[2:]) == ones and spatial_tuple(layer.stride, rank, "stride") == ones
            and conv_padding(layer.padding, rank, ones, ones, ones) == ((0, 0),) * rank)


def _check_norms(norms) -> None:
    """One GroupNormLayer object a norm: the statistics are keyed by the object."""
    if len({id(norm) for norm, _ in norms}) != len(norms):
        raise ArgumentError("tiled_conv_chain: a GroupNormLayer object appears twice in the chain; give each norm "
                            "its own (their statistics differ)")


def _banded(x: Tensor, layers, band_rows: int, call: _Call, sink, target=None) -> None:
    """Each band of the chain's output rows [first, last) handed to sink(first, last, band), computed
    into target(first, last) where that gives a view (the output's rows) rather than None."""
    heights = _heights(x.shape[2], layers)
    for first in range(0, heights[-1], band_rows):
        last = min(first + band_rows, heights[-1])
        if not layers:
            sink(first, last, _rows(x, first, last))
            continue
        steps = _plan_band(first, last, layers, heights)
        band = _run_band(layers, steps, _rows(x, *steps[0][0]), call, target and target(first, last))
        assert band.shape[2] == last - first, "a band's rows follow its plan"
        sink(first, last, band)


def _norms_in_order(layers, before=()) -> list:
    """(norm, the chain whose output is its input) for every GroupNormLayer, in the order they run."""
    found = []
    for index, layer in enumerate(layers):
        if isinstance(layer, GroupNormLayer):
            found.append((layer, [*before, *layers[:index]]))
        elif isinstance(layer, Residual):
            found += _norms_in_order(list(layer.body), [*before, *layers[:index]])
    return found


def _statistics(x: Tensor, prefix, norm: GroupNormLayer, band_rows: int, call: _Call) -> list:
    """Per sample, the (mean, variance) of the norm's input: each band's on the device, brought to
    the host together once the bands are queued (one wait, not one a band), combined in float64
    (Chan's rule) and uploaded once as per-channel tensors (each group's repeated over its
    channels) of the band's statistics dtype, which _normalized hands every band's batch_norm."""
    from .datamove import concat
    from ..tensor import from_numpy
    ops, counts, moments, seen = _ops(), [], [], {}

    def gather(first, last, band):
        n, c = band.shape[:2]
        if c % norm.num_groups:
            raise ShapeError(f"tiled_conv_chain: num_groups {norm.num_groups} does not divide the {c} channels")
        values = band.to(dtype=dtypes.statistics_dtype(band.dtype)).reshape(n, norm.num_groups, -1)
        counts.append(values.shape[2])
        moments.extend((ops.mean(values, axis=2), ops.var(values, axis=2)))
        seen.update(channels=c, dtype=band.dtype, device=band.device)
    _banded(x, prefix, band_rows, call, gather)
    host = concat(moments, axis=0).numpy().astype(np.float64).reshape(len(counts), 2, *moments[0].shape)
    total, mean, m2 = 0, 0.0, 0.0
    for count, (band_mean, band_var) in zip(counts, host):
        before, delta = total, band_mean - mean
        total = before + count
        mean = mean + delta * count / total
        m2 = m2 + band_var * count + delta * delta * before * count / total
    per, dtype = seen["channels"] // norm.num_groups, dtypes.statistics_dtype(seen["dtype"]).host
    return [tuple(from_numpy(np.repeat(a[n], per).astype(dtype), seen["device"]) for a in (mean, m2 / total))
            for n in range(mean.shape[0])]


def tiled_conv_chain(x: Tensor, layers, band_rows: int) -> Tensor:
    """conv_chain(x, layers), computed band_rows output rows at a time (see the module's text)."""
    layers = _check_layers(x, layers)
    band_rows = int(band_rows)
    if band_rows < 1:
        raise ArgumentError(f"tiled_conv_chain: band_rows must be positive, got {band_rows}")
    call, norms = _Call(), _norms_in_order(layers)
    _check_norms(norms)
    for norm, prefix in norms:
        call.stats[id(norm)] = _statistics(x, prefix, norm, band_rows, call)
    result = {}

    def target(first, last):   # the bands after the first one (which gives the output's layout)
        return _rows(result["out"], first, last) if "out" in result else None

    def write(first, last, band):
        if "out" not in result:
            result["out"] = _output_like(band, _heights(x.shape[2], layers)[-1])
            _rows(result["out"], first, last)._copy_from(band)
    _banded(x, layers, band_rows, call, write, target)
    return result["out"]


def _output_like(band: Tensor, height: int) -> Tensor:
    """The chain's full output, in the band's layout (channels-last stays channels-last)."""
    from ..tensor import empty
    n, c, _, *rest = band.shape
    if layout.is_channels_last(band.shape, band.strides):
        nd = band.ndim
        return empty((n, height, *rest, c), band.dtype, band.device).permute(0, nd - 1, *range(1, nd - 1))
    return empty((n, c, height, *rest), band.dtype, band.device)


__all__ = ["ConvLayer", "GroupNormLayer", "Residual", "conv_chain", "receptive_field", "tiled_conv_chain"]
