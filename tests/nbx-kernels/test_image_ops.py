"""grid_sample and the tiled conv chain on the kernel devices (issue 21): grid_sample against the
float64 oracle in every mode, padding and align_corners, both layouts; the band-by-band chain
bit-equal to the untiled one. Tiny shapes on interp; realistic ones, marked gpu, on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import cost

RNG = np.random.default_rng(11)
MODES = [(mode, padding, align) for mode in ("bilinear", "nearest") for padding in ("zeros", "border", "reflection")
         for align in (False, True)]


def _put(a, device, dtype="float32", channels_last=False):
    a = np.asarray(a)
    host = nbx.as_dtype(dtype).host
    if not channels_last:
        return nbx.asarray(a.astype(host), device=device)
    t = nbx.asarray(np.ascontiguousarray(np.moveaxis(a, 1, -1)).astype(host), device=device)
    return t.permute(0, a.ndim - 1, *range(1, a.ndim - 1))


@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
def test_grid_sample_matches_the_oracle_in_every_mode_padding_and_alignment(device, check, channels_last):
    x = _put(RNG.standard_normal((2, 5, 4, 7)), device, channels_last=channels_last)
    grid = _put(RNG.uniform(-1.3, 1.3, (2, 2, 3, 2)), device)   # points outside [-1, 1] reach the padding
    for mode, padding, align in MODES:
        out = nbx.grid_sample(x, grid, mode, padding, align)
        check(out, nbx.oracle("grid_sample", x, grid, mode, padding, align), device)
        assert (out.strides[1] == 1) == channels_last, "the output keeps the input's layout"


def test_grid_sample_of_a_single_pixel_a_transposed_grid_and_bfloat16(device, check):
    one = _put(RNG.standard_normal((1, 3, 1, 1)), device)
    grid = _put(RNG.uniform(-2, 2, (1, 2, 3, 2)), device)
    for padding in ("zeros", "reflection"):
        for align in (False, True):
            check(nbx.grid_sample(one, grid, "bilinear", padding, align),
                  nbx.oracle("grid_sample", one, grid, "bilinear", padding, align), device)
    x = _put(RNG.standard_normal((1, 2, 6, 5)), device, "bfloat16", channels_last=True)
    strided = _put(RNG.uniform(-1, 1, (1, 4, 3, 2)), device, "bfloat16").permute(0, 2, 1, 3)  # grid read by strides
    out = nbx.grid_sample(x, strided, "bilinear", "border")
    check(out, nbx.oracle("grid_sample", x, strided, "bilinear", "border"), device)
    assert cost.price("grid_sample", x, strided, "bilinear", "border").buffers[0].nbytes == out.size * 2


def test_the_tiled_chain_is_bit_equal_to_the_untiled_chain_on_the_kernels(device):
    """Values of a few bits (integers, relu between layers) make every sum exact, so the check sees
    the halos alone: the interpreter's tl.dot is numpy's BLAS, whose last bits move with a
    position's place in its tile. The CPU test checks random values (tests/nbx-core)."""
    layers = [nbx.ConvLayer(_put(RNG.integers(-2, 3, (2, 2, 3, 1)), device), _put([1, -1], device), 1, (1, 0),
                            activation="relu"),
              nbx.ConvLayer(_put(RNG.integers(-2, 3, (2, 2, 3, 1)), device), None, 2, (2, 0), padding_mode="reflect")]
    field = nbx.receptive_field(layers)
    x = _put(RNG.integers(-2, 3, (1, 2, 4 * field + 3, 2)), device, channels_last=True)
    full = nbx.conv_chain(x, layers).numpy()
    for band in (field, 2 * field, 4 * field, 8 * field):
        np.testing.assert_array_equal(nbx.tiled_conv_chain(x, layers, band).numpy(), full, err_msg=f"band {band}")


def test_a_layer_object_met_twice_in_a_chain_is_checked_again_for_an_input_of_other_channels(device):
    """The bands share each layer's checked convolution (conv's checked_convolution) by layer and input:
    on the kernels nothing after the front-end's check would refuse the second input."""
    from nbx.core.errors import ShapeError
    x = _put(RNG.standard_normal((1, 2, 5, 3)), device)
    same = nbx.ConvLayer(_put(RNG.standard_normal((2, 2, 3, 3)), device), padding=1)
    widen = nbx.ConvLayer(_put(RNG.standard_normal((4, 2, 3, 3)), device), padding=1)
    with pytest.raises(ShapeError, match="takes 2 input channels"):
        nbx.tiled_conv_chain(x, [same, widen, same], 3)


@pytest.mark.parametrize("path", ["gemm", "depthwise", "product"])
def test_a_checked_convolution_stores_into_a_strided_view_what_conv2d_returns(device, path):
    """The bands' last convolution writes the output's rows itself (into=): by the kernel's store
    strides (implicit GEMM, depthwise) or by a copy (the 1 x 1 product), the rows around untouched."""
    from nbx.core.ops.conv import checked_convolution
    channels_last = path == "product"
    x = _put(RNG.standard_normal((2, 4, 6, 3)), device, channels_last=channels_last)
    shape = {"gemm": (3, 4, 3, 3), "depthwise": (4, 1, 3, 3), "product": (5, 4, 1, 1)}[path]
    w, pads = _put(RNG.standard_normal(shape), device), ((1, 0), (1, 1)) if path != "product" else ((0, 0), (0, 0))
    groups = 4 if path == "depthwise" else 1
    run = checked_convolution(x, w, None, 1, pads, 1, groups, "silu")
    want = nbx.conv2d(x, w, None, 1, pads, groups=groups, activation="silu")
    whole = nbx.zeros((2, want.shape[1], want.shape[2] + 3, 3), dtype="float32", device=device)
    into = whole.narrow(2, 1, want.shape[2])
    assert run(x, pads, into) is into
    np.testing.assert_array_equal(into.numpy(), want.numpy())
    np.testing.assert_array_equal(whole.numpy()[:, :, [0, -2, -1]], 0)
    args = (x, w, None, (1, 1), pads, (1, 1), groups, "silu", None, 1)
    plain, priced = cost.price("conv2d", *args), cost.price("conv2d", *args, into=into)
    if path == "product":   # the product's rows, then one copy into the view
        assert priced.launches == plain.launches + 1 and priced.bytes_moved == plain.bytes_moved + 2 * into.nbytes
    else:
        assert plain.outputs == want.size * 4 and priced.outputs == 0 and priced.launches == plain.launches


def test_a_conv1d_chain_and_an_upsampling_conv2d_chain_band_bit_equal_on_the_kernels(device):
    """Integer values, as above: the sums are exact, so the check sees the halos and the rows an
    upsampling layer computes before a band's first needed row and drops (every band size and
    edge: the CPU tests in tests/nbx-core; interp launches cost ~0.2 s each)."""
    ints = lambda *shape: _put(RNG.integers(-2, 3, shape), device)
    sequence = [nbx.ConvLayer(ints(2, 2, 5), ints(2), 1, 2, activation="relu"),
                nbx.ConvLayer(ints(2, 2, 3), None, 2, 1, padding_mode="replicate")]
    field = nbx.receptive_field(sequence)
    x = ints(1, 2, 2 * field + 3)
    full = nbx.conv_chain(x, sequence).numpy()
    for band in (field, 2 * field):
        np.testing.assert_array_equal(nbx.tiled_conv_chain(x, sequence, band).numpy(), full, err_msg=f"band {band}")
    image = [nbx.ConvLayer(ints(2, 2, 3, 1), None, 2, (1, 0), upsample=3, activation="relu")]
    x = _put(RNG.integers(-2, 3, (1, 2, 5, 2)), device, channels_last=True)
    full = nbx.conv_chain(x, image).numpy()
    np.testing.assert_array_equal(nbx.tiled_conv_chain(x, image, 3).numpy(), full, err_msg="bands of 3 rows")


def test_a_group_norm_in_a_residual_block_bands_to_the_oracle_on_the_kernels(device, check):
    """A norm's whole-input statistics (a banded pass) applied band by band inside a residual block,
    in float32 on the kernels against the float64 untiled chain on the CPU (every layer kind, more
    bands: tests/nbx-core; interp's implicit GEMM costs ~0.5 s a launch)."""
    def chain(put):
        rng = np.random.default_rng(7)
        w = lambda *shape: put(rng.standard_normal(shape) / 3)
        norm = nbx.GroupNormLayer(2, put(rng.standard_normal(4)), put(rng.standard_normal(4)), 1e-5, "silu")
        return [nbx.ConvLayer(w(4, 2, 3, 1), None, 1, (1, 0)), nbx.Residual((norm, nbx.ConvLayer(w(4, 4, 3, 1), None, 1,
                                                                                                   (1, 0))))]
    a = RNG.standard_normal((1, 2, 6, 2)) + 3
    expected = nbx.conv_chain(nbx.asarray(a), chain(lambda v: nbx.asarray(np.asarray(v, np.float64)))).numpy()
    got = nbx.tiled_conv_chain(_put(a, device, channels_last=True), chain(lambda v: _put(v, device)), 3)
    check(got, expected, device)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
def test_grid_sample_at_a_warping_shape_on_the_gpu(check, dtype, channels_last):
    device = nbx.as_device("cuda")
    x = _put(RNG.standard_normal((2, 64, 128, 128), dtype=np.float32), device, dtype, channels_last)
    grid = _put(RNG.uniform(-1.1, 1.1, (2, 96, 96, 2)), device, dtype)
    for mode, padding, align in MODES:
        check(nbx.grid_sample(x, grid, mode, padding, align), nbx.oracle("grid_sample", x, grid, mode, padding, align),
              device)


@pytest.mark.gpu
def test_the_tiled_chain_of_a_vae_decoder_stage_is_bit_equal_on_the_gpu():
    """Two 3 x 3 bfloat16 convolutions (stride 1 and 2) of 64 channels over a 1024-row image, in
    bands of 1, 2, 4 and 8 receptive fields; the values (dyadic, a few bits) make every float32 sum
    exact, whatever tile the certificates serve a band."""
    device = nbx.as_device("cuda")
    def weight():
        return _put(RNG.integers(-1, 2, (64, 64, 3, 3)) * 0.125, device, "bfloat16")
    layers = [nbx.ConvLayer(weight(), None, 1, 1, activation="relu"),
              nbx.ConvLayer(weight(), None, 2, 1, padding_mode="reflect")]
    x = _put(RNG.integers(-1, 2, (1, 64, 1024, 64)), device, "bfloat16", channels_last=True)
    full = nbx.conv_chain(x, layers).numpy()
    field = nbx.receptive_field(layers)
    for band in (field, 2 * field, 4 * field, 8 * field):
        np.testing.assert_array_equal(nbx.tiled_conv_chain(x, layers, band).numpy(), full, err_msg=f"band {band}")


@pytest.mark.gpu
def test_the_tiled_chains_of_a_vocoders_sequence_and_a_decoders_upsampler_are_bit_equal_on_the_gpu():
    """A 65536-sample conv1d chain (k = 7, dilation 1 and 3) and an upsampling conv2d chain (nearest
    x 2 fused, then a 3 x 3), bfloat16, 64 channels; {-1, 0, 1} inputs and weights of 1/8 keep every
    float32 sum exact (multiples of 1/64 of magnitude below 2^13), so any served tile agrees bit for bit."""
    device = nbx.as_device("cuda")
    def weight(*kernel):
        return _put(RNG.integers(-1, 2, (64, 64, *kernel)) * 0.125, device, "bfloat16")
    sequence = [nbx.ConvLayer(weight(7), None, 1, 3, activation="relu"),
                nbx.ConvLayer(weight(7), None, 1, "same", dilation=3)]
    x = _put(RNG.integers(-1, 2, (1, 64, 65536)), device, "bfloat16")
    image = [nbx.ConvLayer(weight(3, 3), None, 1, 1, upsample=2), nbx.ConvLayer(weight(3, 3), None, 1, 1)]
    y = _put(RNG.integers(-1, 2, (1, 64, 256, 64)), device, "bfloat16", channels_last=True)
    for layers, data, bands in ((sequence, x, (1, 2, 4, 8)), (image, y, (1, 3, 8))):
        full = nbx.conv_chain(data, layers).numpy()
        field = nbx.receptive_field(layers)
        for band in bands:
            got = nbx.tiled_conv_chain(data, layers, band * field).numpy()
            np.testing.assert_array_equal(got, full, err_msg=f"band of {band} receptive fields")


@pytest.mark.gpu
def test_a_vae_decoder_stage_of_norms_residual_blocks_and_an_upsampler_bands_on_the_gpu(check):
    """A decoder stage at 128 channels (float32, channels-last, 256 rows upsampled to 512) in bands of
    64 output rows against the untiled chain on the GPU: the norms' banded statistics agree with
    the whole image's to float32's tolerance."""
    device = nbx.as_device("cuda")
    put = lambda a: _put(a, device)
    w = lambda *shape: put(RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
    norm = lambda c: nbx.GroupNormLayer(32, put(RNG.standard_normal(c)), put(RNG.standard_normal(c)), 1e-6, "silu")
    block = nbx.Residual((norm(128), nbx.ConvLayer(w(128, 128, 3, 3), None, 1, 1), norm(128),
                          nbx.ConvLayer(w(128, 128, 3, 3), None, 1, 1)))
    upsampler = nbx.ConvLayer(w(128, 128, 3, 3), None, 1, 1, upsample=2)
    layers = [nbx.ConvLayer(w(128, 64, 3, 3), None, 1, 1), block, upsampler, norm(128),
              nbx.ConvLayer(w(3, 128, 3, 3), None, 1, 1)]
    x = _put(RNG.standard_normal((1, 64, 256, 64)) + 1, device, channels_last=True)
    full = nbx.conv_chain(x, layers).numpy().astype(np.float64)
    check(nbx.tiled_conv_chain(x, layers, 64), full, device)
