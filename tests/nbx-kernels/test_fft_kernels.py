"""The FFT kernels (nbx.kernels.fft) against the float64 oracle: Stockham passes of power-of-two and
smooth lengths, Bluestein for the others (17, 37), every norm mode, real and complex64 inputs,
padding and cropping by n, transforms over dims other than the last, stft and istft. Tiny shapes
on interp; the benchmark's shapes, marked gpu, on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import NotSupportedError
from nbx.kernels import cost, plans
from nbx.kernels.fft import radices, transform_plan

RNG = np.random.default_rng(21)
LENGTHS = [1, 2, 7, 16, 60, 256, 17, 37]   # 7 and 60: odd radices; 17 and 37: Bluestein


def _complex(shape, device):
    values = (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(np.complex64)
    return nbx.asarray(values, device=device)


def _real(shape, device, dtype="float32"):
    return nbx.asarray(RNG.standard_normal(shape).astype(nbx.as_dtype(dtype).host), device=device)


@pytest.mark.parametrize("n", LENGTHS)
def test_fft_and_ifft_of_complex64_rows_match_the_oracle(device, check, n):
    x = _complex((3, n), device)
    check(nbx.fft.fft(x), nbx.oracle("fftn", x, (n,), (1,), "backward"), device)
    check(nbx.fft.ifft(x), nbx.oracle("ifftn", x, (n,), (1,), "backward"), device)


@pytest.mark.parametrize("n", LENGTHS)
def test_rfft_and_irfft_of_real_rows_match_the_oracle(device, check, n):
    x = _real((3, n), device)
    spectrum = nbx.fft.rfft(x)
    assert spectrum.dtype == nbx.complex64 and spectrum.shape == (3, n // 2 + 1)
    check(spectrum, nbx.oracle("rfftn", x, (n,), (1,), "backward"), device)
    check(nbx.fft.irfft(spectrum, n=n), nbx.oracle("irfftn", spectrum, (n,), (1,), "backward"), device)


@pytest.mark.parametrize("norm", ["ortho", "forward"])
def test_every_norm_mode_scales_as_numpy_does(device, check, norm):
    x = _complex((2, 16), device)   # Stockham: the last pass scales
    check(nbx.fft.fft(x, norm=norm), nbx.oracle("fftn", x, (16,), (1,), norm), device)
    check(nbx.fft.ifft(x, norm=norm), nbx.oracle("ifftn", x, (16,), (1,), norm), device)
    half = _complex((2, 9), device)   # Bluestein (17 points): the scale folds in 1 / M
    check(nbx.fft.irfft(half, n=17, norm=norm), nbx.oracle("irfftn", half, (17,), (1,), norm), device)


def test_smaller_radices_and_several_programs_a_pass_agree_with_the_oracle(device, check):
    from nbx.kernels.fft import launch_transform
    x = _complex((1, 256), device)
    for setting in ({"radix": 4, "block_j": 16, "num_warps": 4}, {"radix": 8, "block_j": 8, "num_warps": 4}):
        check(launch_transform(x, 256, "fft", "backward", setting=setting),
              nbx.oracle("fftn", x, (256,), (1,), "backward"), device)


def test_n_pads_and_crops_the_signal_and_the_half_spectrum(device, check):
    x = _complex((2, 12), device)
    for n in (16, 8):
        check(nbx.fft.fft(x, n=n), nbx.oracle("fftn", x, (n,), (1,), "backward"), device)
    half = _complex((2, 9), device)   # 9 bins: irfft of 16 reads them all, of 10 the first 6, of 40 pads
    for n in (16, 10, 24):
        check(nbx.fft.irfft(half, n=n), nbx.oracle("irfftn", half, (n,), (1,), "backward"), device)


def test_two_dimensional_transforms_and_dims_other_than_the_last(device, check):
    x = _complex((2, 6, 8), device)
    check(nbx.fft.fft2(x), nbx.oracle("fftn", x, (6, 8), (1, 2), "backward"), device)
    check(nbx.fft.ifft2(x, norm="ortho"), nbx.oracle("ifftn", x, (6, 8), (1, 2), "ortho"), device)
    check(nbx.fft.fft(x, dim=0), nbx.oracle("fftn", x, (2,), (0,), "backward"), device)
    r = _real((3, 5, 8), device).permute(2, 0, 1)   # not contiguous: read through a copy
    spectrum = nbx.fft.rfft2(r)
    check(spectrum, nbx.oracle("rfftn", r, (3, 5), (1, 2), "backward"), device)
    check(nbx.fft.irfft2(spectrum, s=(3, 5)), nbx.oracle("irfftn", spectrum, (3, 5), (1, 2), "backward"), device)


def test_fftshift_of_a_spectrum_and_ifftshift_back_run_on_the_device(device):
    x = _complex((3, 5), device)
    spectrum = nbx.fft.fft(x)
    shifted = nbx.fft.fftshift(spectrum)
    np.testing.assert_array_equal(shifted.numpy(), np.fft.fftshift(spectrum.numpy()))
    np.testing.assert_array_equal(nbx.fft.ifftshift(shifted, dim=(0, 1)).numpy(), spectrum.numpy())


def test_half_precision_signals_transform_in_float32(device, check):
    x = _real((2, 32), device, "float16")
    out = nbx.fft.rfft(x)
    assert out.dtype == nbx.complex64
    check(out, nbx.oracle("rfftn", x, (32,), (1,), "backward"), device)
    check(nbx.fft.fft(x), nbx.oracle("fftn", x, (32,), (1,), "backward"), device)   # every bin of a real row


def test_float64_and_complex128_are_refused_by_name_on_kernel_devices(device):
    with pytest.raises(NotSupportedError, match="complex128"):
        nbx.fft.fft(nbx.asarray(np.ones(8, np.complex128), device=device))
    with pytest.raises(NotSupportedError, match="float64"):
        nbx.fft.rfft(nbx.asarray(np.ones(8), device=device))


TILE = {"fused": 1, "radix": 4, "block_j": 16, "num_warps": 4, "tf32x3": 0, "tile_rows": 2}


@pytest.mark.parametrize("tf32x3", [0, 1])
def test_a_row_tile_transforms_each_row_in_one_program_with_two_dft_products(device, check, tf32x3):
    from nbx.kernels.fft import launch_transform
    tile = {**TILE, "tf32x3": tf32x3}
    x = _complex((3, 64), device)   # 4 x 16 (padded to 16 x 16): 3 rows over 2 programs, the last redone
    check(launch_transform(x, 64, "ifft", "ortho", setting=tile), nbx.oracle("ifftn", x, (64,), (1,), "ortho"), device)
    r = _real((3, 400), device)     # Whisper's n_fft: 25 x 16, padded to 32 x 16
    check(launch_transform(r, 400, "fft", "backward", setting=tile), nbx.oracle("fftn", r, (400,), (1,), "backward"),
          device)
    spectrum = launch_transform(r, 400, "rfft", "forward", setting=tile)   # 200 bins by the product, the Nyquist bin
    check(spectrum, nbx.oracle("rfftn", r, (400,), (1,), "forward"), device)
    check(launch_transform(spectrum, 400, "irfft", "forward", setting=tile),
          nbx.oracle("irfftn", spectrum, (400,), (1,), "forward"), device)
    plan = transform_plan(3, 400, nbx.float32, 400, "rfft", "backward", device, tile)
    assert plan.detail.path == "fused" and len(plan.launches) == 1 and plan.launches[0].meta["ROWS"] == 2


def test_a_program_takes_its_row_groups_in_turn_the_next_read_before_this_ones_products(device, check):
    from nbx.kernels.fft import launch_transform
    tile = {**TILE, "tf32x3": 1, "tile_steps": 4}   # 9 rows: groups of 2, 4 a program; the second program's past the end
    r = _real((9, 400), device)
    plan = transform_plan(9, 400, nbx.float32, 400, "rfft", "backward", device, tile)
    assert plan.launches[0].meta["STEPS"] == 4 and plan.launches[0].grid == (2,)
    spectrum = launch_transform(r, 400, "rfft", "backward", setting=tile)
    check(spectrum, nbx.oracle("rfftn", r, (400,), (1,), "backward"), device)
    check(launch_transform(spectrum, 400, "irfft", "backward", setting=tile),
          nbx.oracle("irfftn", spectrum, (400,), (1,), "backward"), device)
    z = _complex((9, 64), device)
    check(launch_transform(z, 64, "fft", "ortho", setting=tile), nbx.oracle("fftn", z, (64,), (1,), "ortho"), device)


def test_a_row_tile_pads_crops_and_serves_the_half_length_of_a_longer_real_row(device, check):
    from nbx.kernels.fft import launch_transform
    r = _real((2, 12), device)
    for n in (16, 8):   # the row zero-padded, then cropped
        check(launch_transform(r, n, "rfft", "backward", setting=TILE), nbx.oracle("rfftn", r, (n,), (1,), "backward"),
              device)
    half = _complex((2, 9), device)   # irfft of 16 reads 9 bins, of 10 the first 6, of 24 pads
    for n in (16, 10, 24):
        check(launch_transform(half, n, "irfft", "backward", setting=TILE),
              nbx.oracle("irfftn", half, (n,), (1,), "backward"), device)
    long = _real((1, 4096), device)   # 64 x 64 is past TILE_AREA: the 2048-point complex tile (a real row as pairs)
    wide = {**TILE, "radix": 16, "block_j": 64}   # + the post-pass, 1024 bins a program
    plan = transform_plan(1, 4096, nbx.float32, 4096, "rfft", "backward", device, wide)
    assert plan.detail.path == "fused" and plan.launches[0].meta["LOAD"] == 4 and len(plan.launches) == 2
    check(launch_transform(long, 4096, "rfft", "backward", setting=wide),
          nbx.oracle("rfftn", long, (4096,), (1,), "backward"), device)


def test_column_passes_before_a_row_tile_store_the_bins_of_a_longer_row_in_order(device, check, monkeypatch):
    import nbx.kernels.fft as fft
    from nbx.kernels.fft import launch_transform
    monkeypatch.setattr(fft, "TILE_MAX", 2)       # tiny tiles: 32 points take one column pass, 512 two
    monkeypatch.setattr(fft, "FUSED_UP_TO", 4)
    monkeypatch.setattr(fft, "COLUMNS_UP_TO", 4 * 32 * 32)
    plans.reset()
    tile = {**TILE, "tile_rows": 64}              # the sub-rows of 2 points: 64 a program
    try:
        z = _complex((2, 32), device)
        check(launch_transform(z, 32, "ifft", "ortho", setting=tile), nbx.oracle("ifftn", z, (32,), (1,), "ortho"), device)
        r = _real((1, 1024), device)              # rfft's 512-point half: 16 x 16 columns, then rows of 2
        plan = transform_plan(1, 1024, nbx.float32, 1024, "rfft", "backward", device, tile)
        assert plan.detail.path == "columns" and plan.detail.radices[:2] == (16, 16) and len(plan.launches) == 4
        check(launch_transform(r, 1024, "rfft", "backward", setting=tile),   # the inverse: ifft above, gpu tests
              nbx.oracle("rfftn", r, (1024,), (1,), "backward"), device)
    finally:
        plans.reset()


def test_rows_factor_into_tiles_of_the_least_padded_work():
    from nbx.kernels.fft import tile_factors
    assert tile_factors(1024, True) == (16, 64) and tile_factors(2048, False) == (32, 64)
    assert tile_factors(4096, False) is None        # 64 x 64: past TILE_AREA (its registers spill)
    assert tile_factors(400, True) == (25, 16)     # N2 even for a real row
    assert tile_factors(67, False) is None
    assert tile_factors(7, True) is None and tile_factors(7, False) == (1, 7)
    from nbx.kernels.fft import column_radices
    assert column_radices(2048) is None and column_radices(3 * 4096) is None and column_radices(1 << 22) is None
    assert column_radices(4096) == (16,) and column_radices(1 << 16) == (32,)   # 16 x 256, 32 x 2048
    assert column_radices(1 << 17) == (16, 16)                                  # 16 x 16 x 512
    assert column_radices(1 << 19) == (16, 16) and column_radices(1 << 20) == (32, 32)


def test_lengths_factor_into_the_passes_radices_or_take_bluestein():
    assert radices(1, 16) == (1,)
    assert radices(1 << 20, 16) == (16, 16, 16, 16, 16)
    assert radices(1 << 10, 8) == (8, 8, 8, 2)
    assert radices(400, 16) == (16, 5, 5)          # Whisper's n_fft: three passes
    assert radices(60, 4) == (4, 15)
    assert radices(17, 16) is None and radices(2 * 37, 16) is None


def test_a_repeated_transform_reuses_its_plan_and_its_cost_is_the_plans(device):
    plans.reset()
    x = _real((3, 37), device)
    nbx.fft.rfft(x)
    nbx.fft.rfft(x)
    assert plans.cached_count("fft") == 1
    plan = transform_plan(3, 37, nbx.float32, 37, "rfft", "backward", device)
    assert plan.detail.path == "bluestein"
    declared = cost.price("rfftn", x, (37,), (1,), "backward")
    assert declared.launches == len(plan.launches) and declared.outputs == 3 * 19 * 8


def test_a_repeated_transform_of_one_signature_runs_its_prepared_launches(device, check):
    from nbx.core import spec
    plans.reset()
    x = _real((2, 3, 64), device)
    nbx.fft.rfft(x)
    again = nbx.fft.rfft(x)   # the spec's fast path: the plan's prepared launches over x's storage
    assert again.shape == (2, 3, 33) and again.dtype == nbx.complex64
    check(again, nbx.oracle("rfftn", x, (64,), (2,), "backward"), device)
    back = [nbx.fft.irfft(again, n=64) for _ in range(2)][1]
    assert back.shape == (2, 3, 64) and back.dtype == nbx.float32
    check(back, nbx.oracle("irfftn", again, (64,), (2,), "backward"), device)
    assert {key[0].name for key in spec._FAST} >= {"rfftn", "irfftn"} and plans.cached_count("fft") == 2


def test_an_even_real_transform_runs_half_its_length_as_complex_pairs(device):
    from nbx.kernels.fft.kernel import half_spectrum_kernel, real_spectrum_kernel
    forward = transform_plan(3, 256, nbx.float32, 256, "rfft", "backward", device)
    assert forward.launches[0].args[4] == 128 and forward.launches[-1].kernel is real_spectrum_kernel
    inverse = transform_plan(3, 129, nbx.complex64, 256, "irfft", "backward", device)
    assert inverse.launches[0].kernel is half_spectrum_kernel and inverse.launches[-1].args[4] == 128


@pytest.mark.parametrize("window,win,center,mode", [("hann", 16, True, "reflect"), ("hamming", 12, True, "constant"),
                                                    (None, 16, False, "reflect")])
def test_stft_frames_windows_and_transforms_as_the_oracle(device, check, window, win, center, mode):
    x = _real((2, 67), device)
    w = None if window is None else getattr(nbx, f"{window}_window")(win, device=device)
    out = nbx.stft(x, 16, hop_length=5, win_length=win, window=w, center=center, pad_mode=mode,
                   return_complex=True)
    check(out, nbx.oracle("stft", x, 16, 5, win, w, center, mode), device)
    declared = cost.price("stft", x, 16, 5, win, w, center, mode, False, True)
    assert declared.outputs == out.nbytes and declared.launches >= 2


def test_stft_reads_its_frames_in_place_through_the_row_tile_and_windows_them_as_it_loads(device, check, monkeypatch):
    import nbx.kernels.fft as fft
    looked_up = []
    monkeypatch.setattr(fft, "fft_setting", lambda device, n, rows: looked_up.append(n) or TILE)   # the row tile
    plans.reset()                                                                                   # at every key
    try:
        x = _real((1, 67), device)
        w = nbx.hann_window(12, device=device)          # centred in n_fft 16
        out = nbx.stft(x, 16, hop_length=5, win_length=12, window=w, return_complex=True)
        check(out, nbx.oracle("stft", x, 16, 5, 12, w, True, "reflect"), device)
        served = len(looked_up)
        check(nbx.stft(x, 16, hop_length=5, win_length=12, window=w, return_complex=True), out.numpy(), device)
        assert served == 1 and len(looked_up) == served   # the setting resolved once, by the plan: not a call
        declared = cost.price("stft", x, 16, 5, 12, w, True, "reflect", False, True)
        assert declared.outputs == out.nbytes and declared.launches == 2   # the padding, the tile
        bare = nbx.stft(x[0], 16, hop_length=4, center=False, return_complex=True)   # no window: no product
        check(bare, nbx.oracle("stft", x[0], 16, 4, None, None, False), device)
    finally:
        plans.reset()


def test_stft_of_a_complex_signal_and_istft_invert_each_other(device, check):
    x = _complex((1, 48), device)
    w = nbx.hann_window(16, device=device)
    spec = nbx.stft(x, 16, hop_length=4, window=w, onesided=False, return_complex=True)
    check(spec, nbx.oracle("stft", x, 16, 4, None, w, True, "reflect", False, False), device)
    back = nbx.istft(spec, 16, hop_length=4, window=w, onesided=False, return_complex=True, length=48)
    check(back, x.numpy(), device)


def test_istft_of_a_onesided_spectrogram_matches_the_oracle(device, check):
    x = _real((1, 40), device)
    w = nbx.hann_window(20, device=device)
    spec = nbx.stft(x, 20, hop_length=6, window=w, return_complex=True, normalized=True)
    back = nbx.istft(spec, 20, hop_length=6, window=w, normalized=True)
    check(back, nbx.oracle("istft", spec, 20, 6, None, w, True, True), device)
    assert cost.price("istft", spec, 20, 6, 20, w, True, True, True, None, False).outputs == back.nbytes
    check(nbx.istft(spec, 20, hop_length=6, window=w, normalized=True, length=46),   # past the frames: zeros
          nbx.oracle("istft", spec, 20, 6, None, w, True, True, None, 46), device)


# ---- on the GPU: the benchmark's shapes ----------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n", [1 << 10, 1 << 14, 1 << 20, 1000, 4099])
def test_long_rfft_and_irfft_on_the_gpu(n, check):
    device = nbx.as_device("cuda")
    x = _real((4, n), device)
    spectrum = nbx.fft.rfft(x)
    check(spectrum, nbx.oracle("rfftn", x, (n,), (1,), "backward"), device)
    check(nbx.fft.irfft(spectrum, n=n), nbx.oracle("irfftn", spectrum, (n,), (1,), "backward"), device)


@pytest.mark.gpu
def test_whisper_stft_on_the_gpu(check):
    device = nbx.as_device("cuda")
    x = _real((1, 30 * 16000), device)
    w = nbx.hann_window(400, device=device)
    check(nbx.stft(x, 400, 160, window=w, return_complex=True), nbx.oracle("stft", x, 400, 160, None, w), device)


@pytest.mark.gpu
@pytest.mark.parametrize("tf32x3", [0, 1])
def test_whisper_stft_reads_its_frames_in_place_on_the_gpu(tf32x3, check, monkeypatch):
    import nbx.kernels.fft as fft
    device = nbx.as_device("cuda")
    tile = {**TILE, "num_warps": 8, "tf32x3": tf32x3, "tile_rows": 8}
    monkeypatch.setattr(fft, "fft_setting", lambda device, n, rows: tile)
    plans.reset()
    try:
        x = _real((1, 30 * 16000), device)
        w = nbx.hann_window(400, device=device)
        check(nbx.stft(x, 400, 160, window=w, return_complex=True), nbx.oracle("stft", x, 400, 160, None, w), device)
        assert cost.price("stft", x, 400, 160, 400, w, True, "reflect", False, True).launches == 2
    finally:
        plans.reset()


@pytest.mark.gpu
@pytest.mark.parametrize("tf32x3", [0, 1])
@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("n", [400, 1024, 4096, 8192, 1 << 14, 1 << 17, 1 << 20])
def test_row_tiles_compile_and_agree_on_the_gpu(n, warps, tf32x3, check):
    from nbx.kernels.fft import launch_transform
    device = nbx.as_device("cuda")
    tile = {"fused": 1, "radix": 4, "block_j": 16 if warps == 4 else 128, "num_warps": warps, "tf32x3": tf32x3,
            "tile_rows": 8 if warps == 4 else 4, "tile_steps": 1 if warps == 4 else 4}
    x = _real((37 if n <= 8192 else 3, n), device)   # 37 rows: the last program redoes the last row
    spectrum = launch_transform(x, n, "rfft", "backward", setting=tile)   # 4096: the 2048-point half as a tile; past it column passes
    check(spectrum, nbx.oracle("rfftn", x, (n,), (1,), "backward"), device)
    check(launch_transform(spectrum, n, "irfft", "backward", setting=tile),
          nbx.oracle("irfftn", spectrum, (n,), (1,), "backward"), device)
    if n <= 4096:
        z = _complex((37, n), device)
        check(launch_transform(z, n, "fft", "ortho", setting=tile), nbx.oracle("fftn", z, (n,), (1,), "ortho"), device)
