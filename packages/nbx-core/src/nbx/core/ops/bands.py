"""A chain of 2-D convolutions run band by band along the height, so that a tall image's
activations never exist whole: `tiled_conv_chain(x, layers, band_rows)`.

Each band is `band_rows` rows of the chain's output. Walking the chain backwards gives, per layer,
the rows of its input the band needs (its halo: kernel extent, dilation, stride and padding of
every layer after it); those rows are computed from the rows the layer before needs, and so on
down to the input. Only the true image edges are padded: a zero-padded layer takes the part of
its (low, high) padding that falls outside the image as explicit padding of the band; a reflect or
replicate layer pads the band with `pad` (the band then holds the real rows the reflection
reads) and crops it to the rows needed. Each band's output rows are written into the full output.

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
from .conv import conv2d, conv_out_size, conv_padding, spatial_tuple

BAND_PADDING_MODES = ("zeros", "reflect", "replicate")


@dataclass(frozen=True)
class ConvLayer:
    """One conv2d of a chain, with conv2d's arguments (and its fused activation)."""
    weight: Tensor
    bias: Tensor | None = None
    stride: int | tuple = 1
    padding: int | tuple | str = 0
    dilation: int | tuple = 1
    groups: int = 1
    padding_mode: str = "zeros"
    activation: str | None = None

    def rows(self):
        """(kernel, stride, dilation, (low, high) padding along the height, (low, high) padding along the width)."""
        kernel = tuple(self.weight.shape[2:])
        stride, dilation = spatial_tuple(self.stride, 2, "stride"), spatial_tuple(self.dilation, 2, "dilation")
        pads = conv_padding(self.padding, 2, kernel, stride, dilation)
        return kernel[0], stride[0], dilation[0], pads[0], pads[1]

    def __call__(self, x: Tensor, padding=None, padding_mode=None) -> Tensor:
        return conv2d(x, self.weight, self.bias, self.stride, self.padding if padding is None else padding,
                      self.dilation, self.groups, padding_mode or self.padding_mode, activation=self.activation)


def conv_chain(x: Tensor, layers) -> Tensor:
    """The layers applied in turn to the whole image."""
    for layer in layers:
        x = layer(x)
    return x


def receptive_field(layers) -> int:
    """The input rows one output row of the chain depends on."""
    field, step = 1, 1
    for layer in layers:
        k, s, d, _, _ = layer.rows()
        field += d * (k - 1) * step
        step *= s
    return field


def _heights(height: int, layers) -> list[int]:
    """The height of the chain's input and of each layer's output."""
    heights = [height]
    for layer in layers:
        k, s, d, (lo, hi), _ = layer.rows()
        heights.append(conv_out_size(heights[-1], lo, hi, k, s, d))
        if heights[-1] < 1:
            raise ShapeError(f"tiled_conv_chain: a layer leaves no rows of the {height}-row input")
    return heights


def _plan_band(first: int, last: int, layers, heights):
    """Per layer (from the input up): (rows held [lo, hi) of its input, rows needed [lo, hi) of its
    padded input in image coordinates); the band is the chain's output rows [first, last)."""
    steps = []
    for index in range(len(layers) - 1, -1, -1):
        k, s, d, (pad_lo, _), _ = layers[index].rows()
        size = heights[index]
        need = (first * s - pad_lo, (last - 1) * s - pad_lo + d * (k - 1) + 1)
        held = [max(need[0], 0), min(need[1], size)]
        if layers[index].padding_mode != "zeros":  # the rows a reflection of the padding reads
            if need[0] < 0:
                held[1] = max(held[1], min(size, -need[0] + 1))
            if need[1] > size:
                held[0] = min(held[0], max(0, size - 1 - (need[1] - size)))
        steps.append((tuple(held), need))
        first, last = held
    return steps[::-1]


def _band_layer(layer: ConvLayer, band: Tensor, held, need, width_pads) -> Tensor:
    top, bottom = held[0] - need[0], need[1] - held[1]   # > 0 only at the image's edges
    if layer.padding_mode == "zeros":
        start, stop = max(need[0], held[0]) - held[0], min(need[1], held[1]) - held[0]
        return layer(band[:, :, start:stop], padding=((max(top, 0), max(bottom, 0)), width_pads))
    from .datamove import pad
    padded = pad(band, [*width_pads, max(top, 0), max(bottom, 0)], mode=layer.padding_mode)
    origin = held[0] - max(top, 0)   # the image row of the padded band's first row
    return layer(padded[:, :, need[0] - origin:need[1] - origin], padding=0, padding_mode="zeros")


def _check_layers(x: Tensor, layers) -> list[ConvLayer]:
    layers = list(layers)
    if not layers or not all(isinstance(layer, ConvLayer) for layer in layers):
        raise ArgumentError("tiled_conv_chain takes a non-empty sequence of ConvLayer")
    if not isinstance(x, Tensor) or x.ndim != 4:
        raise ShapeError("tiled_conv_chain takes an (N, C, H, W) input tensor")
    for layer in layers:
        if layer.padding_mode not in BAND_PADDING_MODES:
            raise NotSupportedError(f"tiled_conv_chain: padding_mode {layer.padding_mode!r} is not banded (a "
                                    f"circular pad reads the far edge); it bands {BAND_PADDING_MODES}")
    return layers


def tiled_conv_chain(x: Tensor, layers, band_rows: int) -> Tensor:
    """conv_chain(x, layers), computed band_rows output rows at a time (see the module's text)."""
    layers = _check_layers(x, layers)
    band_rows = int(band_rows)
    if band_rows < 1:
        raise ArgumentError(f"tiled_conv_chain: band_rows must be positive, got {band_rows}")
    heights = _heights(x.shape[2], layers)
    width_pads = [layer.rows()[4] for layer in layers]
    out = None
    for first in range(0, heights[-1], band_rows):
        last = min(first + band_rows, heights[-1])
        steps = _plan_band(first, last, layers, heights)
        band = x[:, :, steps[0][0][0]:steps[0][0][1]]
        for layer, (held, need), next_held, pads in zip(layers, steps, [s[0] for s in steps[1:]] + [(first, last)],
                                                         width_pads):
            band = _band_layer(layer, band, held, need, pads)
            assert band.shape[2] == next_held[1] - next_held[0], "a band's rows follow its plan"
        if out is None:
            out = _output_like(band, heights[-1])
        out[:, :, first:last] = band
    return out


def _output_like(band: Tensor, height: int) -> Tensor:
    """The chain's full output, in the band's layout (channels-last stays channels-last)."""
    from ..tensor import empty
    n, c, _, w = band.shape
    if c > 1 and band.strides[1] == 1 and band.shape[2] * w > 1:
        return empty((n, height, w, c), band.dtype, band.device).permute(0, 3, 1, 2)
    return empty((n, c, height, w), band.dtype, band.device)


__all__ = ["ConvLayer", "conv_chain", "receptive_field", "tiled_conv_chain"]
