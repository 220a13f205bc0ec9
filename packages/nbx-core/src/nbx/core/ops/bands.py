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
band's output rows are written into the full output.

Every output element is then computed from the same input values by the same kernel arithmetic as
in `conv_chain` (the untiled chain), so the two are bit-equal wherever the convolution's
accumulation order does not depend on the launch's size: the CPU and `interp` (one tile for every
size); on a GPU where the band's launches and the whole image's are served one setting. Peak
memory: the output, the input, and one band's activations of every layer.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError, NotSupportedError, ShapeError
from ..tensor import Tensor
from .conv import conv1d, conv2d, conv3d, conv_out_size, conv_padding, spatial_tuple

BAND_PADDING_MODES = ("zeros", "reflect", "replicate")
CONVS = {1: conv1d, 2: conv2d, 3: conv3d}


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

    def rows(self):
        """(kernel, stride, dilation, (low, high) padding along the banded dim, the other spatial dims'
        (low, high) paddings)."""
        n, kernel = self.rank, tuple(self.weight.shape[2:])
        stride, dilation = spatial_tuple(self.stride, n, "stride"), spatial_tuple(self.dilation, n, "dilation")
        pads = conv_padding(self.padding, n, kernel, stride, dilation)
        return kernel[0], stride[0], dilation[0], pads[0], pads[1:]

    def __call__(self, x: Tensor, padding=None, padding_mode=None) -> Tensor:
        return CONVS[self.rank](x, self.weight, self.bias, self.stride, self.padding if padding is None else padding,
                                self.dilation, self.groups, padding_mode or self.padding_mode,
                                activation=self.activation, upsample=self.upsample)


def conv_chain(x: Tensor, layers) -> Tensor:
    """The layers applied in turn to the whole image."""
    for layer in layers:
        x = layer(x)
    return x


def receptive_field(layers) -> int:
    """The input rows one output row of the chain depends on (at most, for upsampling layers: r
    consecutive upsampled rows fall in at most ceil((r - 1) / k) + 1 stored rows)."""
    rows = 1
    for layer in reversed(list(layers)):
        k, s, d, _, _ = layer.rows()
        rows = (rows - 1) * s + d * (k - 1) + 1
        rows = -(-(rows - 1) // layer.upsample) + 1
    return rows


def _heights(height: int, layers) -> list[int]:
    """The height of the chain's input and of each layer's output."""
    heights = [height]
    for layer in layers:
        k, s, d, (lo, hi), _ = layer.rows()
        heights.append(conv_out_size(heights[-1] * layer.upsample, lo, hi, k, s, d))
        if heights[-1] < 1:
            raise ShapeError(f"tiled_conv_chain: a layer leaves no rows of the {height}-row input")
    return heights


def _plan_band(first: int, last: int, layers, heights):
    """Per layer (from the input up): (rows held [lo, hi) of its input, rows needed [lo, hi) of its
    padded (upsampled) input in image coordinates); the band is the chain's output rows [first, last)."""
    steps = []
    for index in range(len(layers) - 1, -1, -1):
        k, s, d, (pad_lo, _), _ = layers[index].rows()
        up, size = layers[index].upsample, heights[index]
        need = (first * s - pad_lo, (last - 1) * s - pad_lo + d * (k - 1) + 1)
        held = [max(need[0], 0) // up, -(-min(need[1], size * up) // up)]
        if layers[index].padding_mode != "zeros":  # the rows a reflection of the padding reads
            if need[0] < 0:
                held[1] = max(held[1], min(size, -need[0] + 1))
            if need[1] > size:
                held[0] = min(held[0], max(0, size - 1 - (need[1] - size)))
        steps.append((tuple(held), need))
        first, last = held
    return steps[::-1]


def _band_layer(layer: ConvLayer, band: Tensor, held, need, other_pads) -> Tensor:
    if layer.upsample > 1:
        return _upsampled_band_layer(layer, band, held, need, other_pads)
    top, bottom = held[0] - need[0], need[1] - held[1]   # > 0 only at the image's edges
    if layer.padding_mode == "zeros":
        start, stop = max(need[0], held[0]) - held[0], min(need[1], held[1]) - held[0]
        return layer(band[:, :, start:stop], padding=((max(top, 0), max(bottom, 0)), *other_pads))
    from .datamove import pad
    widths = [a for pair in reversed(other_pads) for a in pair]   # pad's order: the last dim first
    padded = pad(band, [*widths, max(top, 0), max(bottom, 0)], mode=layer.padding_mode)
    origin = held[0] - max(top, 0)   # the image row of the padded band's first row
    return layer(padded[:, :, need[0] - origin:need[1] - origin], padding=0, padding_mode="zeros")


def _upsampled_band_layer(layer: ConvLayer, band: Tensor, held, need, other_pads) -> Tensor:
    """The band's output rows of an upsampling layer (zero padding): the stored rows held upsample
    to image rows [held[0] k, held[1] k), which may start before the rows needed; extra zero rows
    at the top put the needed start on the stride's grid, and the output rows before it are dropped."""
    k, s, d, _, _ = layer.rows()
    up_start, up_end = held[0] * layer.upsample, held[1] * layer.upsample
    top, bottom = max(0, -need[0]), max(0, need[1] - up_end)
    skip = need[0] - (up_start - top)              # upsampled rows held before the first one needed
    extra = -skip % s
    out = layer(band, padding=((top + extra, bottom), *other_pads))
    first, count = (skip + extra) // s, (need[1] - need[0] - d * (k - 1) - 1) // s + 1
    return out[:, :, first:first + count]


def _check_layers(x: Tensor, layers) -> list[ConvLayer]:
    layers = list(layers)
    if not layers or not all(isinstance(layer, ConvLayer) for layer in layers):
        raise ArgumentError("tiled_conv_chain takes a non-empty sequence of ConvLayer")
    if not isinstance(x, Tensor) or x.ndim not in (3, 4, 5):
        raise ShapeError("tiled_conv_chain takes an (N, C, L), (N, C, H, W) or (N, C, D, H, W) input tensor")
    for layer in layers:
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


def tiled_conv_chain(x: Tensor, layers, band_rows: int) -> Tensor:
    """conv_chain(x, layers), computed band_rows output rows at a time (see the module's text)."""
    layers = _check_layers(x, layers)
    band_rows = int(band_rows)
    if band_rows < 1:
        raise ArgumentError(f"tiled_conv_chain: band_rows must be positive, got {band_rows}")
    heights = _heights(x.shape[2], layers)
    other_pads = [layer.rows()[4] for layer in layers]
    out = None
    for first in range(0, heights[-1], band_rows):
        last = min(first + band_rows, heights[-1])
        steps = _plan_band(first, last, layers, heights)
        band = x[:, :, steps[0][0][0]:steps[0][0][1]]
        for layer, (held, need), next_held, pads in zip(layers, steps, [s[0] for s in steps[1:]] + [(first, last)],
                                                         other_pads):
            band = _band_layer(layer, band, held, need, pads)
            assert band.shape[2] == next_held[1] - next_held[0], "a band's rows follow its plan"
        if out is None:
            out = _output_like(band, heights[-1])
        out[:, :, first:last] = band
    return out


def _output_like(band: Tensor, height: int) -> Tensor:
    """The chain's full output, in the band's layout (channels-last stays channels-last)."""
    from ..tensor import empty
    n, c, _, *rest = band.shape
    if c > 1 and band.strides[1] == 1 and band.size // (n * c) > 1:
        nd = band.ndim
        return empty((n, height, *rest, c), band.dtype, band.device).permute(0, nd - 1, *range(1, nd - 1))
    return empty((n, c, height, *rest), band.dtype, band.device)


__all__ = ["ConvLayer", "conv_chain", "receptive_field", "tiled_conv_chain"]
