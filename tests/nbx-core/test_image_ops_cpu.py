"""grid_sample's reference pinned to torch's semantics by hand-worked values, and the tiled
(band-by-band) conv chain bit-equal to the untiled chain on the CPU (issue 21)."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, DTypeError, NotSupportedError, ShapeError

RNG = np.random.default_rng(5)


def _grid(points, shape=(1, 1)):
    """A (1, Ho, Wo, 2) float32 grid of (x, y) points."""
    return nbx.asarray(np.asarray(points, np.float32).reshape(1, *shape, 2))


def _row(values):
    """A (1, 1, 1, W) input row."""
    return nbx.asarray(np.asarray(values, np.float32).reshape(1, 1, 1, -1))


def test_grid_sample_unnormalizes_as_torch_with_and_without_align_corners():
    row = _row([10.0, 20.0, 30.0])
    # align_corners=False: x = -1 is the left pixel's outer edge, half of it in the zero padding
    got = nbx.grid_sample(row, _grid([(-1.0, 0.0), (0.0, 0.0), (1.0, 0.0)], (1, 3))).numpy().ravel()
    np.testing.assert_allclose(got, [5.0, 20.0, 15.0])
    got = nbx.grid_sample(row, _grid([(-1.0, 0.0), (0.5, 0.0), (1.0, 0.0)], (1, 3)), align_corners=True).numpy()
    np.testing.assert_allclose(got.ravel(), [10.0, 25.0, 30.0])  # -1 and 1 are the corner pixels' centres


def test_grid_sample_border_and_reflection_padding_follow_torchs_rules():
    row = _row([10.0, 20.0, 30.0])
    outside = _grid([(-1.0, 0.0), (1.5, 0.0)], (1, 2))
    np.testing.assert_allclose(nbx.grid_sample(row, outside, padding_mode="border").numpy().ravel(), [10.0, 30.0])
    # align_corners=True reflects about the corner centres: x = 1.5 is pixel 2.5, reflected to 1.5
    got = nbx.grid_sample(row, outside, padding_mode="reflection", align_corners=True).numpy().ravel()
    np.testing.assert_allclose(got, [10.0, 25.0])
    # align_corners=False reflects about the outer edges (-0.5, 2.5): pixel 3.25 -> 1.75
    got = nbx.grid_sample(row, outside, padding_mode="reflection").numpy().ravel()
    np.testing.assert_allclose(got, [10.0, 27.5])


def test_grid_sample_nearest_rounds_half_to_even_as_nearbyint():
    row = _row([1.0, 2.0, 3.0, 4.0, 5.0])
    # align_corners=True on 5 pixels: x = -0.75 -> 0.5 -> 0, x = -0.25 -> 1.5 -> 2, x = 0.25 -> 2.5 -> 2
    got = nbx.grid_sample(row, _grid([(-0.75, 0.0), (-0.25, 0.0), (0.25, 0.0)], (1, 3)), "nearest",
                          align_corners=True).numpy().ravel()
    np.testing.assert_array_equal(got, [1.0, 3.0, 3.0])


def test_grid_sample_refuses_what_it_does_not_compute_by_name():
    x = nbx.asarray(np.ones((1, 2, 3, 3), np.float32))
    g = nbx.asarray(np.zeros((1, 2, 2, 2), np.float32))
    with pytest.raises(NotSupportedError, match="bicubic"):
        nbx.grid_sample(x, g, "bicubic")
    with pytest.raises(ArgumentError, match="padding_mode 'wrap'"):
        nbx.grid_sample(x, g, padding_mode="wrap")
    with pytest.raises(DTypeError, match="grid is float64"):
        nbx.grid_sample(x, g.to(dtype="float64"))
    with pytest.raises(ShapeError, match="same N"):
        nbx.grid_sample(x, nbx.asarray(np.zeros((2, 2, 2, 2), np.float32)))


def _chain(mode: str, put):
    w = lambda o, i, k: put(RNG.standard_normal((o, i, *k)) / np.sqrt(i * k[0] * k[1]))
    return [nbx.ConvLayer(w(3, 2, (3, 3)), put(RNG.standard_normal(3)), 1, 1, padding_mode=mode, activation="silu"),
            nbx.ConvLayer(w(4, 3, (3, 3)), None, 2, 1, padding_mode=mode),
            nbx.ConvLayer(w(2, 4, (5, 3)), put(RNG.standard_normal(2)), 1, (4, 1), dilation=(2, 1), padding_mode=mode,
                          activation="relu"),
            nbx.ConvLayer(w(2, 2, (2, 1)), None, 2, 0)]


def _put(a, channels_last=False):
    if not channels_last:
        return nbx.asarray(a.astype(np.float32))
    t = nbx.asarray(np.ascontiguousarray(np.moveaxis(a, 1, -1)).astype(np.float32))
    return t.permute(0, a.ndim - 1, *range(1, a.ndim - 1))


@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate"])
def test_the_tiled_chain_is_bit_equal_to_the_untiled_chain_at_band_sizes_of_1_to_8_receptive_fields(
        mode, channels_last):
    layers = _chain(mode, _put)
    field = nbx.receptive_field(layers)
    assert field == 1 + 2 + 2 + 8 * 2 + 1 * 2   # each layer's extent times the strides before it
    x = _put(RNG.standard_normal((2, 2, 2 * 8 * field + 7, 5)), channels_last)   # two bands at 8 fields
    full = nbx.conv_chain(x, layers).numpy()
    for band in (field, 2 * field, 4 * field, 8 * field, 1, 7):
        got = nbx.tiled_conv_chain(x, layers, band)
        assert got.shape == full.shape
        np.testing.assert_array_equal(got.numpy(), full, err_msg=f"band of {band} rows")


def _weight(*shape):
    return _put(RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))


def _assert_tiled_equals_untiled(x, layers, bands):
    full = nbx.conv_chain(x, layers)
    for band in bands:
        got = nbx.tiled_conv_chain(x, layers, band)
        assert got.shape == full.shape and got.strides == full.strides
        np.testing.assert_array_equal(got.numpy(), full.numpy(), err_msg=f"band of {band} rows")


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate"])
def test_a_long_sequences_conv1d_chain_and_a_videos_conv3d_chain_band_bit_equal_along_their_first_dim(mode):
    layers = [nbx.ConvLayer(_weight(3, 2, 7), _put(RNG.standard_normal(3)), 1, 3, padding_mode=mode,
                            activation="silu"),
              nbx.ConvLayer(_weight(4, 3, 3), None, 2, 1, padding_mode=mode),
              nbx.ConvLayer(_weight(2, 4, 5), None, 1, "same", dilation=3, padding_mode=mode)]
    field = nbx.receptive_field(layers)
    assert field == 1 + 6 + 2 + 12 * 2
    _assert_tiled_equals_untiled(_put(RNG.standard_normal((2, 2, 8 * field + 5))), layers,
                                 (field, 2 * field, 4 * field, 8 * field, 1, 3))
    video = [nbx.ConvLayer(_weight(3, 2, 3, 3, 2), None, 1, (1, 1, 0), padding_mode=mode),
             nbx.ConvLayer(_weight(2, 3, 3, 1, 3), None, (2, 1, 1), (1, 0, 1), padding_mode=mode)]
    field = nbx.receptive_field(video)
    _assert_tiled_equals_untiled(_put(RNG.standard_normal((1, 2, 4 * field + 1, 4, 3)), True), video,
                                 (field, 2 * field, 4 * field, 1))


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_upsampling_layers_band_bit_equal_where_a_band_starts_inside_a_stored_row(stride):
    """A VAE decoder's upsampler (nearest x k fused into the conv): a band's first needed row of the
    upsampled image falls anywhere in a stored row, and on or off the stride's grid."""
    layers = [nbx.ConvLayer(_weight(3, 2, 3, 3), _put(RNG.standard_normal(3)), 1, 1, activation="silu"),
              nbx.ConvLayer(_weight(4, 3, 3, 3), None, 1, 1, upsample=2),
              nbx.ConvLayer(_weight(2, 4, 3, 3), None, stride, 1, upsample=3),
              nbx.ConvLayer(_weight(2, 2, 3, 1), None, 1, (1, 0))]
    field = nbx.receptive_field(layers)
    _assert_tiled_equals_untiled(_put(RNG.standard_normal((1, 2, 13, 3))), layers,
                                 (1, 2, 3, 5, field, 2 * field, 4 * field, 8 * field))


def _decoder_stage(put, seed: int = 7) -> list:
    """A VAE decoder's stage in small: conv, a ResNet block whose channels change (GroupNorm -> SiLU ->
    conv twice, a 1 x 1 shortcut), an upsampling conv, a block of one norm, GroupNorm -> SiLU, conv."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: put(rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
    norm = lambda c, g: nbx.GroupNormLayer(g, put(rng.standard_normal(c)), put(rng.standard_normal(c)), 1e-5, "silu")
    block = nbx.Residual((norm(4, 2), nbx.ConvLayer(w(6, 4, 3, 3), None, 1, 1), norm(6, 3),
                          nbx.ConvLayer(w(6, 6, 3, 3), None, 1, 1)), nbx.ConvLayer(w(6, 4, 1, 1)))
    return [nbx.ConvLayer(w(4, 2, 3, 3), None, 1, 1), block, nbx.ConvLayer(w(6, 6, 3, 3), None, 1, 1, upsample=2),
            nbx.Residual((norm(6, 2), nbx.ConvLayer(w(6, 6, 3, 3), None, 1, 1))), norm(6, 3),
            nbx.ConvLayer(w(3, 6, 3, 3), None, 1, 1)]


def test_a_decoder_stage_of_group_norms_and_residual_blocks_bands_to_the_untiled_chain():
    """A norm's statistics are its whole input's (a banded pass gathers them): a mean far from zero
    would show a band's own statistics at once. Summed in another order, so agreement, not bits."""
    put = lambda a: nbx.asarray(np.asarray(a, np.float64))
    layers = _decoder_stage(put)
    x = put(RNG.standard_normal((2, 2, 11, 5)) + 3)
    full = nbx.conv_chain(x, layers).numpy()
    field = nbx.receptive_field(layers)
    for band in (1, 3, field, 4 * field):
        np.testing.assert_allclose(nbx.tiled_conv_chain(x, layers, band).numpy(), full, rtol=1e-10, atol=1e-12,
                                   err_msg=f"band of {band} rows")


def test_the_tiled_chain_refuses_a_circular_layer_and_empty_chains():
    x = _put(RNG.standard_normal((1, 2, 9, 4)))
    w = _put(RNG.standard_normal((2, 2, 3, 3)))
    with pytest.raises(NotSupportedError, match="circular"):
        nbx.tiled_conv_chain(x, [nbx.ConvLayer(w, padding=1, padding_mode="circular")], 4)
    with pytest.raises(ArgumentError, match="a Residual's shortcut is None or a 1 x 1"):
        nbx.tiled_conv_chain(x, [nbx.Residual((nbx.ConvLayer(w, padding=1),), nbx.ConvLayer(w, padding=1))], 4)
    with pytest.raises(ArgumentError, match="a GroupNormLayer object appears twice"):
        norm = nbx.GroupNormLayer(2)
        nbx.tiled_conv_chain(x, [norm, nbx.ConvLayer(w, padding=1), norm], 4)
    with pytest.raises(ShapeError, match="a Residual's body changes the 9 rows"):
        nbx.tiled_conv_chain(x, [nbx.Residual((nbx.ConvLayer(w),))], 4)
    with pytest.raises(ArgumentError, match="non-empty sequence of ConvLayer"):
        nbx.tiled_conv_chain(x, [], 4)
    with pytest.raises(ArgumentError, match="band_rows must be positive"):
        nbx.tiled_conv_chain(x, [nbx.ConvLayer(w)], 0)
    with pytest.raises(ShapeError, match="one chain is of one rank"):
        nbx.tiled_conv_chain(x, [nbx.ConvLayer(_put(RNG.standard_normal((2, 2, 3))))], 4)
    with pytest.raises(NotSupportedError, match="upsampling layer with padding_mode 'reflect'"):
        nbx.tiled_conv_chain(x, [nbx.ConvLayer(w, padding=1, padding_mode="reflect", upsample=2)], 4)


def test_the_tiled_chain_refuses_a_layer_as_conv2d_does_and_bands_a_layer_object_met_three_times():
    """The bands share one checked convolution a layer and input (conv's checked_convolution)."""
    x = _put(RNG.standard_normal((1, 2, 9, 4)))
    same = nbx.ConvLayer(_weight(2, 2, 3, 3), padding=1)
    _assert_tiled_equals_untiled(x, [same, same, same], (1, 4))
    with pytest.raises(ArgumentError, match="activation is one of"):
        nbx.tiled_conv_chain(x, [nbx.ConvLayer(_weight(2, 2, 3, 3), padding=1, activation="swish")], 4)
    with pytest.raises(DTypeError, match="weight is float64"):
        nbx.tiled_conv_chain(x, [nbx.ConvLayer(nbx.asarray(np.ones((2, 2, 1, 1))))], 4)


def test_a_checked_convolution_convolves_any_band_as_conv2d_and_refuses_what_conv2d_refuses():
    from nbx.core.ops.conv import checked_convolution
    x, w, b = _put(RNG.standard_normal((2, 3, 7, 5))), _weight(4, 3, 3, 2), _put(RNG.standard_normal(4))
    run = checked_convolution(x, w, b, (2, 1), ((1, 0), (0, 1)), 1, 1, "silu", 2)
    for start, stop, pads in ((0, 7, ((1, 0), (0, 1))), (2, 5, ((0, 0), (0, 1))), (3, 4, ((2, 1), (0, 1)))):
        band = x.narrow(2, start, stop - start)
        want = nbx.conv2d(band, w, b, (2, 1), pads, activation="silu", upsample=2)
        np.testing.assert_array_equal(run(band, pads).numpy(), want.numpy(), err_msg=f"rows [{start}, {stop})")
    with pytest.raises(ShapeError, match="batched input"):
        checked_convolution(x[0], w, b, 1, 0, 1, 1)
    with pytest.raises(ShapeError, match="groups 2 must divide"):
        checked_convolution(x, w, b, 1, 0, 1, 2)
