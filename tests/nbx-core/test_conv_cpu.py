"""The CPU references of convolution, pooling, resampling and the FFT family: torch's semantics
pinned by values worked out by hand, identities between the ops, and the named refusals."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, DTypeError, NotSupportedError, ShapeError


def _t(a, dtype=np.float64):
    return nbx.asarray(np.asarray(a, dtype))


RNG = np.random.default_rng(7)


def test_conv2d_reference_equals_a_loop_over_every_tap_with_stride_padding_dilation_and_groups():
    x, w = RNG.standard_normal((2, 4, 5, 6)), RNG.standard_normal((6, 2, 2, 3))
    stride, pad, dil, groups = (2, 1), (1, 2), (1, 2), 2
    out = nbx.conv2d(_t(x), _t(w), None, stride, pad, dil, groups).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))
    expected = np.zeros(out.shape)
    for n, o, i, j in np.ndindex(*out.shape):
        g = o // 3
        for c, a, b in np.ndindex(2, 2, 3):
            expected[n, o, i, j] += xp[n, g * 2 + c, i * 2 + a, j + b * 2] * w[o, c, a, b]
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_conv_transpose_is_the_adjoint_of_conv(n):
    x = RNG.standard_normal((2, 4) + (7, 6, 5)[:n])
    w = RNG.standard_normal((6, 2) + (3, 2, 3)[:n])
    stride, padding, dilation = (2, 1, 3)[:n], (1, 0, 1)[:n], (1, 2, 1)[:n]
    y = getattr(nbx, f"conv{n}d")(_t(x), _t(w), None, stride, padding, dilation, 2).numpy()
    g = RNG.standard_normal(y.shape)
    # the output_padding that gives back x's size
    out_pad = tuple(x.shape[2 + d] - ((y.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] *
                                      (w.shape[2 + d] - 1) + 1) for d in range(n))
    xt = getattr(nbx, f"conv_transpose{n}d")(_t(g), _t(w), None, stride, padding, out_pad, 2, dilation).numpy()
    assert xt.shape == x.shape
    assert np.vdot(y, g) == pytest.approx(np.vdot(x, xt), rel=1e-10)


def test_same_padding_puts_the_odd_element_on_the_high_side_as_torch():
    x, w = _t(np.arange(5.0).reshape(1, 1, 5)), _t(np.ones((1, 1, 4)))
    # total padding 3: one before, two after
    np.testing.assert_allclose(nbx.conv1d(x, w, padding="same").numpy().ravel(), [3, 6, 10, 9, 7])


def test_padding_modes_pad_the_input_before_the_convolution():
    x, w = _t(np.arange(4.0).reshape(1, 1, 4)), _t(np.ones((1, 1, 3)))
    np.testing.assert_allclose(nbx.conv1d(x, w, padding=1, padding_mode="reflect").numpy().ravel(), [2, 3, 6, 7])
    np.testing.assert_allclose(nbx.conv1d(x, w, padding=1, padding_mode="circular").numpy().ravel(), [4, 3, 6, 5])


def test_unbatched_input_gives_an_unbatched_output():
    assert nbx.conv2d(_t(np.ones((2, 4, 4))), _t(np.ones((3, 2, 3, 3)))).shape == (3, 2, 2)
    assert nbx.max_pool2d(_t(np.ones((2, 4, 4))), 2).shape == (2, 2, 2)


def test_impossible_convolutions_are_refused_by_name():
    x = _t(np.ones((1, 4, 5, 5)))
    with pytest.raises(ShapeError, match="groups 3 must divide"):
        nbx.conv2d(x, _t(np.ones((3, 1, 3, 3))), groups=3)
    with pytest.raises(ShapeError, match="larger than the padded input"):
        nbx.conv2d(x, _t(np.ones((2, 4, 7, 7))))
    with pytest.raises(ArgumentError, match="not supported for strided"):
        nbx.conv2d(x, _t(np.ones((2, 4, 3, 3))), stride=2, padding="same")
    with pytest.raises(ArgumentError, match="output_padding"):
        nbx.conv_transpose2d(x, _t(np.ones((4, 2, 3, 3))), stride=2, output_padding=2)
    with pytest.raises(DTypeError, match="must match"):
        nbx.conv2d(x, nbx.asarray(np.ones((2, 4, 3, 3), np.float32)))
    with pytest.raises(ShapeError, match="reflect pad"):
        nbx.conv1d(_t(np.ones((1, 1, 2))), _t(np.ones((1, 1, 5))), padding=2, padding_mode="reflect")


def test_pooling_follows_torchs_ceil_mode_padding_and_divisor_rules():
    x = _t(np.arange(1.0, 6.0).reshape(1, 1, 5))
    assert nbx.max_pool1d(x, 2, 2).shape == (1, 1, 2)
    out, idx = nbx.max_pool1d(x, 2, 2, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(out.numpy().ravel(), [2, 4, 5])
    np.testing.assert_array_equal(idx.numpy().ravel(), [1, 3, 4])
    np.testing.assert_allclose(nbx.avg_pool1d(x, 2, 2, ceil_mode=True).numpy().ravel(), [1.5, 3.5, 5.0])
    y = _t(np.array([1.0, 2.0, 3.0]).reshape(1, 1, 3))
    np.testing.assert_allclose(nbx.avg_pool1d(y, 3, 1, 1).numpy().ravel(), [1, 2, 5 / 3])
    np.testing.assert_allclose(nbx.avg_pool1d(y, 3, 1, 1, count_include_pad=False).numpy().ravel(), [1.5, 2, 2.5])
    np.testing.assert_allclose(nbx.avg_pool1d(y, 3, 1, 1, divisor_override=2).numpy().ravel(), [1.5, 3, 2.5])
    np.testing.assert_allclose(nbx.adaptive_avg_pool1d(x, 3).numpy().ravel(), [1.5, 3, 4.5])
    out, idx = nbx.adaptive_max_pool1d(x, 3, return_indices=True)
    np.testing.assert_array_equal(idx.numpy().ravel(), [1, 3, 4])
    with pytest.raises(ArgumentError, match="at most half"):
        nbx.max_pool1d(x, 2, padding=2)


def test_max_pool_lets_nan_win_and_indexes_the_flattened_plane():
    a = np.arange(16.0).reshape(1, 1, 4, 4)
    a[0, 0, 0, 1] = np.nan
    out, idx = nbx.max_pool2d(_t(a), 2, return_indices=True)
    assert np.isnan(out.numpy()[0, 0, 0, 0]) and idx.numpy()[0, 0, 0, 0] == 1
    assert idx.numpy()[0, 0, 1, 1] == 15 and idx.dtype == nbx.int64


def test_interpolate_places_sources_as_torch():
    x = _t(np.array([1.0, 2.0, 3.0]).reshape(1, 1, 3))
    np.testing.assert_array_equal(nbx.interpolate(x, size=5).numpy().ravel(), [1, 1, 2, 2, 3])
    np.testing.assert_array_equal(nbx.interpolate(x, size=5, mode="nearest-exact").numpy().ravel(), [1, 1, 2, 3, 3])
    y = _t(np.array([0.0, 1.0]).reshape(1, 1, 2))
    np.testing.assert_allclose(nbx.interpolate(y, size=4, mode="linear").numpy().ravel(), [0, 0.25, 0.75, 1])
    np.testing.assert_allclose(nbx.interpolate(y, size=4, mode="linear", align_corners=True).numpy().ravel(),
                               [0, 1 / 3, 2 / 3, 1])
    # a scale factor maps through 1 / scale_factor, not in / out
    z = _t(np.arange(5.0).reshape(1, 1, 5))
    assert nbx.interpolate(z, scale_factor=1.5).shape == (1, 1, 7)
    np.testing.assert_array_equal(nbx.interpolate(z, scale_factor=1.5).numpy().ravel(), [0, 0, 1, 2, 2, 3, 4])
    np.testing.assert_allclose(nbx.interpolate(_t(np.ones((1, 2, 3, 4))), size=(5, 7), mode="bicubic").numpy(), 1.0)
    np.testing.assert_allclose(nbx.interpolate(z, size=2, mode="area").numpy().ravel(), [1, 3])
    with pytest.raises(ArgumentError, match="align_corners"):
        nbx.interpolate(z, size=3, align_corners=True)
    with pytest.raises(ShapeError, match="bilinear"):
        nbx.interpolate(z, size=3, mode="bilinear")
    with pytest.raises(ArgumentError, match="recompute_scale_factor is not meaningful with an explicit size"):
        nbx.interpolate(z, size=3, recompute_scale_factor=True)
    with pytest.raises(NotSupportedError, match="antialias"):
        nbx.interpolate(_t(np.ones((1, 1, 4, 4))), size=2, mode="bilinear", antialias=True)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_fft_family_matches_numpy_and_inverts(norm):
    a = RNG.standard_normal((3, 10)).astype(np.float32)
    x = nbx.asarray(a)
    spec = nbx.fft.rfft(x, norm=norm)
    assert spec.dtype == nbx.complex64 and spec.shape == (3, 6)
    np.testing.assert_allclose(spec.numpy(), np.fft.rfft(a, norm=norm), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nbx.fft.irfft(spec, n=10, norm=norm).numpy(), a, rtol=1e-5, atol=1e-5)
    full = nbx.fft.fft(x, n=13, norm=norm)
    np.testing.assert_allclose(nbx.fft.ifft(full, norm=norm).numpy()[:, :10], a, atol=1e-5)
    two = nbx.fft.fft2(nbx.asarray(a.astype(np.float64)), norm=norm)
    assert two.dtype == nbx.complex128
    np.testing.assert_allclose(two.numpy(), np.fft.fft2(a.astype(np.float64), norm=norm), atol=1e-10)
    np.testing.assert_allclose(nbx.fft.irfft2(nbx.fft.rfft2(x, norm=norm), s=(3, 10), norm=norm).numpy(), a,
                               atol=1e-5)


def test_fftfreq_and_the_shifts_place_the_bins_as_numpy_for_odd_and_even_lengths():
    np.testing.assert_array_equal(nbx.fft.fftfreq(7, 0.5).numpy(), np.fft.fftfreq(7, 0.5).astype(np.float32))
    assert nbx.fft.fftfreq(8, dtype="float64").dtype == nbx.float64
    a = (RNG.standard_normal((3, 4, 5)) + 1j * RNG.standard_normal((3, 4, 5))).astype(np.complex64)
    x = nbx.asarray(a)
    for dim in (None, 1, (0, -1)):
        shifted = nbx.fft.fftshift(x, dim)
        np.testing.assert_array_equal(shifted.numpy(), np.fft.fftshift(a, dim))
        np.testing.assert_array_equal(nbx.fft.ifftshift(shifted, dim).numpy(), a)   # odd dims: not fftshift again


def test_fft_refusals_are_named():
    with pytest.raises(DTypeError, match="real input"):
        nbx.fft.rfft(nbx.asarray(np.ones(4, np.complex64)))
    with pytest.raises(ArgumentError, match="norm"):
        nbx.fft.fft(nbx.asarray(np.ones(4)), norm="sideways")


def test_stft_frames_windows_and_istft_gives_the_signal_back():
    a = RNG.standard_normal((2, 1000)).astype(np.float32)
    window = nbx.hann_window(64)
    spec = nbx.stft(nbx.asarray(a), 64, 16, window=window, return_complex=True)
    assert spec.shape == (2, 33, 1 + 1000 // 16) and spec.dtype == nbx.complex64
    padded = np.pad(a[0].astype(np.float64), 32, mode="reflect")
    frame = padded[16 * 5:16 * 5 + 64] * window.numpy()
    np.testing.assert_allclose(spec.numpy()[0, :, 5], np.fft.rfft(frame), rtol=1e-4, atol=1e-4)
    back = nbx.istft(spec, 64, 16, window=window, length=1000)
    np.testing.assert_allclose(back.numpy(), a, atol=1e-5)
    np.testing.assert_allclose(nbx.hamming_window(5, periodic=False).numpy(), np.hamming(5), atol=1e-7)
    with pytest.raises(ArgumentError, match="NOLA"):
        nbx.istft(spec, 64, 64, window=nbx.hann_window(64, periodic=False), center=False)


def test_mel_filterbank_triangles_peak_at_one_and_slaney_normalizes_their_area():
    fb = nbx.melscale_fbanks(201, 0.0, 8000.0, 40, 16000).numpy()
    assert fb.shape == (201, 40) and fb.min() >= 0 and fb.max() <= 1 + 1e-6
    assert np.all(fb.max(axis=0) > 0.5)
    slaney = nbx.melscale_fbanks(201, 0.0, 8000.0, 40, 16000, norm="slaney", mel_scale="slaney").numpy()
    assert slaney.shape == (201, 40) and np.all(slaney.sum(axis=0) > 0)


def test_a_fused_activation_and_residual_equal_the_unfused_ops():
    x, w, b = _t(RNG.standard_normal((2, 3, 5, 4))), _t(RNG.standard_normal((4, 3, 3, 3))), _t(RNG.standard_normal(4))
    residual = _t(RNG.standard_normal((2, 4, 5, 4)))
    fused = nbx.conv2d(x, w, b, padding=1, activation="relu", residual=residual).numpy()
    plain = nbx.conv2d(x, w, b, padding=1).numpy()
    np.testing.assert_allclose(fused, np.maximum(plain, 0) + residual.numpy(), rtol=1e-12)
    with pytest.raises(ShapeError, match="residual has shape"):
        nbx.conv2d(x, w, b, residual=residual)
    with pytest.raises(ArgumentError, match="activation"):
        nbx.conv2d(x, w, b, activation="swish")
