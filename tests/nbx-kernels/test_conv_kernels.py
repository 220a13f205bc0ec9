"""The conv, pool and resample kernels against the float64 oracle: every path (implicit GEMM,
depthwise, 1 x 1 product, the transposed convolutions' phases, pooling,
interpolate), channels-first and channels-last, odd sizes (1, primes, kernels larger than the
input with padding, strides larger than the kernel). Tiny shapes on interp; larger ones, marked
gpu, on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import NotSupportedError
from nbx.kernels import cost, plans
from nbx.kernels.conv import conv_plan

RNG = np.random.default_rng(3)


def _put(a, device, dtype="float32", channels_last=False):
    a = np.asarray(a)
    host = nbx.as_dtype(dtype).host
    if not channels_last:
        return nbx.asarray(a.astype(host), device=device)
    order = (0, *range(2, a.ndim), 1)
    t = nbx.asarray(np.ascontiguousarray(a.transpose(order)).astype(host), device=device)
    return t.permute(0, a.ndim - 1, *range(1, a.ndim - 1))


CONV_CASES = [  # x shape, weight shape, stride, padding, dilation, groups
    ((2, 4, 5, 3), (6, 2, 3, 3), 1, 1, 1, 2),               # grouped, prime sizes
    ((1, 3, 5, 7), (5, 3, 2, 3), (2, 1), ((1, 0), (2, 1)), (2, 1), 1),   # asymmetric padding, dilation
    ((1, 2, 2, 3), (3, 2, 5, 5), 1, 2, 1, 1),               # kernel larger than the input, padded
    ((1, 2, 7, 7), (3, 2, 2, 2), 3, 0, 1, 1),               # stride larger than the kernel
    ((1, 3, 1, 1), (17, 3, 1, 1), 1, 0, 1, 1),              # one position, 1 x 1
]


@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
@pytest.mark.parametrize("case", CONV_CASES, ids=["grouped", "asym", "big_kernel", "wide_stride", "one_pixel"])
def test_conv2d_matches_the_oracle_in_both_layouts(device, check, case, channels_last):
    xs, ws, stride, padding, dilation, groups = case
    x = _put(RNG.standard_normal(xs), device, channels_last=channels_last)
    w, b = _put(RNG.standard_normal(ws), device), _put(RNG.standard_normal(ws[0]), device)
    out = nbx.conv2d(x, w, b, stride, padding, dilation, groups)
    check(out, nbx.oracle("conv2d", x, w, b, stride, padding, dilation, groups), device)
    if channels_last and out.shape[1] > 1 and out.shape[2] * out.shape[3] > 1:
        assert out.strides[1] == 1, "a channels-last input gives a channels-last output"


@pytest.mark.parametrize("mode", ["reflect", "circular"])
def test_a_padding_mode_keeps_a_channels_last_input_channels_last_and_matches_the_oracle(device, check, mode):
    x = _put(RNG.standard_normal((1, 3, 4, 5)), device, channels_last=True)
    w = _put(RNG.standard_normal((2, 3, 3, 2)), device)
    out = nbx.conv2d(x, w, None, 1, (2, 1), 1, 1, mode)
    check(out, nbx.oracle("conv2d", x, w, None, 1, (2, 1), 1, 1, mode), device)
    assert out.strides[1] == 1, "the padded copy is channels-last, so the output is"


@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
@pytest.mark.parametrize("ws,stride,padding,dilation", [((2, 1, 3, 3), 1, 1, 1), ((4, 1, 7, 7), 3, 3, 1),
                                                        ((2, 1, 3, 3), 1, 2, 2)], ids=["3x3", "7x7_mult2", "dilated"])
def test_depthwise_conv2d_takes_the_window_kernel_and_matches_the_oracle(device, check, ws, stride, padding, dilation,
                                                                          channels_last):
    x = _put(RNG.standard_normal((1, 2, 5, 4)), device, channels_last=channels_last)
    w, b = _put(RNG.standard_normal(ws), device), _put(RNG.standard_normal(ws[0]), device)
    out = nbx.conv2d(x, w, b, stride, padding, dilation, 2)
    check(out, nbx.oracle("conv2d", x, w, b, stride, padding, dilation, 2), device)
    assert conv_plan(x, w, b, (stride,) * 2, ((padding, padding),) * 2, (dilation,) * 2, 2).detail.path == "depthwise"


def test_1x1_channels_last_conv_is_a_product_and_matches_the_oracle(device, check):
    x = _put(RNG.standard_normal((2, 5, 3, 4)), device, channels_last=True)
    w, b = _put(RNG.standard_normal((7, 5, 1, 1)), device), _put(RNG.standard_normal(7), device)
    out = nbx.conv2d(x, w, b)
    check(out, nbx.oracle("conv2d", x, w, b), device)
    assert out.strides[1] == 1
    assert cost.price("conv2d", x, w, b, (1, 1), ((0, 0), (0, 0)), (1, 1), 1).flops == 2 * 2 * 12 * 7 * 5


def test_conv1d_and_conv3d_run_the_same_kernels(device, check):
    x = _put(RNG.standard_normal((2, 4, 11)), device)
    w = _put(RNG.standard_normal((6, 2, 4)), device)
    check(nbx.conv1d(x, w, None, 2, "valid", 2, 2), nbx.oracle("conv1d", x, w, None, 2, "valid", 2, 2), device)
    check(nbx.conv1d(x, w[:, :, :3], None, 1, "same", 1, 2), nbx.oracle("conv1d", x, w[:, :, :3], None, 1, "same",
                                                                          1, 2), device)
    x3 = _put(RNG.standard_normal((1, 2, 3, 4, 5)), device, channels_last=True)
    w3 = _put(RNG.standard_normal((3, 2, 2, 3, 2)), device)
    check(nbx.conv3d(x3, w3, None, 1, 1), nbx.oracle("conv3d", x3, w3, None, 1, 1), device)


def test_bfloat16_conv_rounds_once_from_float32_accumulation(device, check):
    x = _put(RNG.standard_normal((1, 16, 5, 6)), device, "bfloat16", channels_last=True)
    w = _put(RNG.standard_normal((16, 16, 3, 3)) / 12, device, "bfloat16")
    out = nbx.conv2d(x, w, None, 1, 1)
    assert out.dtype == nbx.bfloat16
    check(out, nbx.oracle("conv2d", x, w, None, 1, 1), device)


@pytest.mark.parametrize("channels", [32, 20], ids=["even", "partial_block"])
def test_the_k_loop_walks_every_tap_and_channel_block_of_a_strided_dilated_conv(device, check, channels):
    """interp's block_k is 16: 32 channels are two whole blocks a tap (EVEN_C, no channel mask), 20
    a block and a partial one; the tap and channel counters carried from step to step cross taps
    of both kernel dims, stride 2, dilation 2 and asymmetric padding at every border."""
    x = _put(RNG.standard_normal((1, channels, 6, 5)), device, channels_last=True)
    w = _put(RNG.standard_normal((5, channels, 3, 2)) / channels, device)
    padding = ((2, 1), (1, 2))
    out = nbx.conv2d(x, w, None, 2, padding, 2)
    check(out, nbx.oracle("conv2d", x, w, None, 2, padding, 2), device)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_channels_last_weight_is_read_through_a_descriptor_and_matches_the_oracle(device, check, dtype):
    """Whole channel blocks of a dense channels-last weight: its [O, taps x C] rows come through a
    tensor descriptor (B_DESC); two groups of 5 output channels, so a tile's rows past its group read
    the next group's weights (never stored) or zeros past the last. 128 channels a group: every
    tile's block_k (16 on interp, up to 128 on the H200) divides them (EVEN_C, which B_DESC needs)."""
    x = _put(RNG.standard_normal((1, 256, 5, 6)), device, dtype, channels_last=True)
    w = _put(RNG.standard_normal((10, 128, 3, 3)) / 34, device, dtype, channels_last=True)
    b = _put(RNG.standard_normal(10), device, dtype)
    out = nbx.conv2d(x, w, b, 1, 1, 1, 2)
    check(out, nbx.oracle("conv2d", x, w, b, 1, 1, 1, 2), device)
    assert dict(conv_plan(x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 2).launches[0].meta)["B_DESC"]


@pytest.mark.parametrize("m,n,k,channels_last,spatial", [(8192, 320, 2880, True, 2), (512, 1280, 11520, True, 2),
                                                         (1 << 20, 128, 1152, True, 2), (8192, 512, 3584, False, 1)])
def test_an_h200_conv_key_keeps_at_most_20_candidates_and_no_tile_past_a_warpgroups_registers(m, n, k, channels_last,
                                                                                              spatial):
    """bench_conv's keys (SD UNet 64^2 and 16^2, the VAE at 1024^2, HiFi-GAN's conv1d): what the
    certifier times; 4 warps never hold more than a 128 x 128 x 64 tile (sm_90: 255 registers and
    spills past it), 8 never less than 128 x 128 of work, and every kept one fits shared memory."""
    from nbx.autotune import keys
    from nbx.core import device_files
    from nbx.kernels.conv.tuning import CONV, conv_key
    from nbx.kernels.matmul.tuning import stage_bytes
    facts = device_files.for_arch("sm_90")
    key = keys.form("conv", CONV.key_fields, facts, **conv_key(m, n, k, "bfloat16", channels_last, spatial))
    kept = CONV.candidates(facts, keys.representative(key, CONV.key, facts))[0]
    assert 1 <= len(kept) <= 20
    for s in kept:
        work = s["block_m"] * s["block_n"]
        assert (work * s["block_k"] <= 128 * 128 * 64) if s["num_warps"] == 4 else work >= 128 * 128
        assert s["num_stages"] * stage_bytes(s) <= facts.value("memory.max_shared_memory_per_block")


TRANSPOSE_1D = [  # x shape, weight shape, stride, padding, output_padding, groups, dilation
    ((1, 3, 5), (3, 2, 3), 1, 1, 0, 1, 1),       # stride 1: one phase of every tap, read backwards
    ((2, 4, 7), (4, 3, 5), 2, 2, 1, 2, 1),       # grouped, K % s != 0 (phases of 3 and 2 taps)
    ((1, 2, 11), (2, 3, 4), 3, 1, 2, 1, 2),      # dilation prime to the stride: its taps permute the residues
    ((1, 2, 6), (2, 2, 3), 4, 1, 1, 1, 2),       # dilation 2 of stride 4: the odd residues have no tap (bias)
    ((1, 3, 13), (3, 2, 16), 8, 4, 0, 1, 1),     # HiFi-GAN's x8 upsampler (k 16, padding 4)
    ((1, 2, 5), (2, 2, 3), 5, 0, 4, 1, 1),       # stride past the kernel: two phases are the bias alone
    ((1, 3, 1), (3, 2, 7), 4, 0, 3, 1, 2),       # one input position
]


def _transpose_weight(a, device, channels_first: bool):
    """(C_in, O / g, K) in torch's layout, or with its input channels at unit stride (no copy then)."""
    if not channels_first:
        return _put(a, device)
    return nbx.asarray(np.ascontiguousarray(a.transpose(1, 2, 0)).astype(np.float32), device=device).permute(2, 0, 1)


@pytest.mark.parametrize("channels_first_weight", [False, True], ids=["torch_weight", "channels_first_weight"])
@pytest.mark.parametrize("case", TRANSPOSE_1D, ids=["s1", "grouped_k5_s2", "s3_d2", "s4_d2", "hifigan", "s5_k3",
                                                    "one_input"])
def test_conv_transpose1d_phases_match_the_oracle(device, check, case, channels_first_weight):
    xs, ws, stride, padding, output_padding, groups, dilation = case
    x = _put(RNG.standard_normal(xs), device)
    w = _transpose_weight(RNG.standard_normal(ws), device, channels_first_weight)
    b = _put(RNG.standard_normal(ws[1] * groups), device)
    out = nbx.conv_transpose1d(x, w, b, stride, padding, output_padding, groups, dilation)
    check(out, nbx.oracle("conv_transpose1d", x, w, b, stride, padding, output_padding, groups, dilation), device)


@pytest.mark.parametrize("length,kernel,stride,pad,dilation,output_padding",
                         [(1, 1, 1, 0, 1, 0), (7, 5, 2, 2, 1, 1), (4, 16, 8, 4, 1, 0), (3, 3, 5, 1, 1, 4),
                          (6, 4, 6, 0, 4, 3), (2, 3, 4, 3, 3, 2), (5, 7, 3, 5, 2, 1)])
def test_every_output_position_is_in_one_phase_and_every_tap_in_one(length, kernel, stride, pad, dilation,
                                                                      output_padding):
    """The phases of a dim partition the outputs (o0 + stride u) and the taps (k0 + step j), and a
    phase's output u reads input u - lo + j dilation at tap j: the input the transposed convolution
    pairs with that output and tap (i stride + k dilation - pad = o)."""
    from nbx.core.ops.conv import transpose_out_size
    from nbx.kernels.conv import phases
    out_size = transpose_out_size(length, pad, kernel, stride, dilation, output_padding)
    outputs, taps = [], []
    for p in phases(out_size, kernel, stride, pad, dilation):
        outputs += [p.o0 + stride * u for u in range(p.count)]
        taps += [p.k0 + p.step * j for j in range(p.taps)]
        for u in range(p.count):
            for j in range(p.taps):
                o, k, i = p.o0 + stride * u, p.k0 + p.step * j, u - p.lo + j * p.dilation
                assert i * stride + k * dilation - pad == o
    assert sorted(outputs) == list(range(out_size))
    reached = {k for k in range(kernel) if any((k * dilation - pad - o) % stride == 0 for o in range(out_size))}
    assert sorted(taps) == sorted(reached)


@pytest.mark.parametrize("channels_first_weight", [False, True], ids=["copied", "read_in_place"])
def test_the_hifigan_upsampler_is_one_conv_launch_a_phase_with_no_intermediate(device, monkeypatch,
                                                                              channels_first_weight):
    """Stride 8, k 16: eight launches of the implicit GEMM, each asking the conv key of its own GEMM
    (M = L output positions, N = the output channels, K = the input channels x 2 taps); the declared
    buffers are the output and, for a weight of torch's layout, its dense copy (one more launch)."""
    import nbx.kernels.conv as conv
    from nbx.kernels.conv.kernel import conv_gemm_kernel
    plans.reset()
    asked = []
    served = conv.conv_setting
    monkeypatch.setattr(conv, "conv_setting", lambda device, m, n, k, dtype, cl, spatial:
                        asked.append((m, n, k, spatial)) or served(device, m, n, k, dtype, cl, spatial))
    length, c_in, o = 9, 16, 8
    x = _put(RNG.standard_normal((1, c_in, length)), device)
    w = _transpose_weight(RNG.standard_normal((c_in, o, 16)), device, channels_first_weight)
    plan = conv.transpose_plan(x, w, None, (8,), (4,), (0,), 1, (1,))
    assert [one.kernel for one in plan.launches] == [conv_gemm_kernel] * 8 and not plan.workspace
    assert asked == [(length, o, c_in * 2, "1t")] * 8   # the phases' own spatial label
    priced = cost.price("conv_transpose1d", x, w, None, (8,), (4,), (0,), 1, (1,))
    names = {buf.name: buf.nbytes for buf in priced.buffers}
    out_bytes = o * 8 * length * 4
    assert names == ({"out": out_bytes} if channels_first_weight else {"out": out_bytes, "w_contiguous": w.size * 4})
    assert priced.launches == 8 + (not channels_first_weight)
    assert priced.flops == 2 * length * c_in * o * 16


@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
def test_conv_transpose2d_and_3d_match_the_oracle(device, check, channels_last):
    x = _put(RNG.standard_normal((1, 4, 2, 3)), device, channels_last=channels_last)
    w = _put(RNG.standard_normal((4, 3, 3, 2)), device)
    out = nbx.conv_transpose2d(x, w, None, (2, 3), 1, (1, 0), 2, (1, 2))
    check(out, nbx.oracle("conv_transpose2d", x, w, None, (2, 3), 1, (1, 0), 2, (1, 2)), device)
    x3, w3 = _put(RNG.standard_normal((1, 2, 2, 2, 1)), device), _put(RNG.standard_normal((2, 2, 2, 1, 2)), device)
    check(nbx.conv_transpose3d(x3, w3, None, 2), nbx.oracle("conv_transpose3d", x3, w3, None, 2), device)
    # stride past the kernel and padding in 2-D: phases of no tap along one dim write the bias alone
    w2, b2 = _put(RNG.standard_normal((4, 2, 1, 2)), device), _put(RNG.standard_normal(2), device)
    check(nbx.conv_transpose2d(x, w2, b2, (3, 2), (0, 1), (2, 1)),
          nbx.oracle("conv_transpose2d", x, w2, b2, (3, 2), (0, 1), (2, 1)), device)


@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
def test_pooling_matches_the_oracle_with_indices_ceil_mode_and_divisors(device, check, channels_last):
    x = _put(RNG.standard_normal((1, 3, 5, 4)), device, channels_last=channels_last)
    out, idx = nbx.max_pool2d(x, 3, 2, 1, (1, 2), True, return_indices=True)
    expected, expected_idx = nbx.oracle("max_pool2d", x, 3, 2, 1, (1, 2), True)
    assert out.shape == (1, 3, 3, 2)
    check(out, expected, device)
    np.testing.assert_array_equal(idx.numpy(), expected_idx)
    for args in ((3, 2, 1, True, False, None), ((2, 3), 3, 0, False, True, 5)):
        check(nbx.avg_pool2d(x, *args), nbx.oracle("avg_pool2d", x, *args), device)
    check(nbx.adaptive_avg_pool2d(x, (3, 2)), nbx.oracle("adaptive_avg_pool2d", x, (3, 2)), device)
    out, idx = nbx.adaptive_max_pool2d(x, (2, None), return_indices=True)
    expected, expected_idx = nbx.oracle("adaptive_max_pool2d", x, (2, None))
    check(out, expected, device)
    np.testing.assert_array_equal(idx.numpy(), expected_idx)


def test_1d_pooling_and_global_average_pooling(device, check):
    x = _put(RNG.standard_normal((2, 3, 11)), device)
    check(nbx.max_pool1d(x, 4, 3, 2, ceil_mode=True), nbx.oracle("max_pool1d", x, 4, 3, 2, 1, True)[0], device)
    check(nbx.avg_pool1d(x, 3), nbx.oracle("avg_pool1d", x, 3), device)
    check(nbx.adaptive_avg_pool1d(x, 1), nbx.oracle("adaptive_avg_pool1d", x, 1), device)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_global_average_pool_of_a_channels_last_input_is_the_reductions_mean_and_priced_as_it(device, check, dtype):
    x = _put(RNG.standard_normal((3, 40, 7, 5)), device, dtype, channels_last=True)
    out = nbx.adaptive_avg_pool2d(x, 1)
    assert out.shape == (3, 40, 1, 1) and out.dtype == x.dtype
    check(out, nbx.oracle("adaptive_avg_pool2d", x, 1), device)
    priced = cost.price("adaptive_avg_pool2d", x, (1, 1))
    assert priced == cost.price("mean", x, dim=(2, 3), keepdim=True)
    assert [b.nbytes for b in priced.buffers if b.lifetime == "result"] == [out.nbytes]


@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
@pytest.mark.parametrize("mode,kw", [("nearest", {"scale_factor": 1.7}), ("nearest-exact", {"size": (5, 11)}),
                                     ("bilinear", {"scale_factor": (2, 0.6)}),
                                     ("bilinear", {"size": (9, 2), "align_corners": True}),
                                     ("bicubic", {"size": (7, 5)}), ("area", {"size": (2, 3)})],
                         ids=["nearest", "nearest_exact", "bilinear", "bilinear_aligned", "bicubic", "area"])
def test_interpolate_matches_the_oracle(device, check, mode, kw, channels_last):
    x = _put(RNG.standard_normal((1, 3, 4, 5)), device, channels_last=channels_last)
    out = nbx.interpolate(x, mode=mode, **kw)
    check(out, nbx.oracle("interpolate", x, mode=mode, **kw), device)


def test_linear_and_trilinear_interpolate(device, check):
    x = _put(RNG.standard_normal((1, 2, 5)), device)
    check(nbx.interpolate(x, size=8, mode="linear"), nbx.oracle("interpolate", x, 8, mode="linear"), device)
    x3 = _put(RNG.standard_normal((1, 2, 2, 3, 2)), device)
    check(nbx.interpolate(x3, scale_factor=2, mode="trilinear"),
          nbx.oracle("interpolate", x3, None, 2, "trilinear"), device)


def test_what_no_kernel_computes_is_refused_by_name(device):
    x = nbx.asarray(np.ones((1, 1, 4, 4)), device=device)  # float64
    with pytest.raises(NotSupportedError, match="float64"):
        nbx.conv2d(x, nbx.asarray(np.ones((1, 1, 3, 3)), device=device))
    with pytest.raises(NotSupportedError, match="float64"):
        nbx.fft.rfft(nbx.asarray(np.ones(8), device=device))


def test_a_repeated_convolution_reuses_its_plan(device):
    plans.reset()
    x = _put(RNG.standard_normal((1, 2, 4, 4)), device)
    w = _put(RNG.standard_normal((3, 2, 3, 3)), device)
    nbx.conv2d(x, w, padding=1)
    nbx.conv2d(x, w, padding=1)
    assert plans.cached_count("conv") == 1


# ---- on the GPU: the shapes of the models ---------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 320, 32, 32), (1, 128, 128, 128), (1, 512, 64, 64)])
def test_unet_and_vae_3x3_convolutions_in_bfloat16_channels_last(shape, check):
    device = nbx.as_device("cuda")
    x = _put(RNG.standard_normal(shape), device, "bfloat16", channels_last=True)
    w = _put(RNG.standard_normal((shape[1], shape[1], 3, 3)) / np.sqrt(9 * shape[1]), device, "bfloat16")
    b = _put(RNG.standard_normal(shape[1]), device, "bfloat16")
    check(nbx.conv2d(x, w, b, 1, 1), nbx.oracle("conv2d", x, w, b, 1, 1), device)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,out_channels", [((2, 320, 64, 64), 640), ((2, 1280, 32, 32), 1280)])
def test_bench_conv_1x1_convolutions_with_a_bias_run_within_shared_memory_on_the_gpu(shape, out_channels, check):
    """nbx.linear with a bias [N]: its served tile asked 245,784 bytes of the H200's 232,448 on 2026-12-01."""
    device = nbx.as_device("cuda")
    x = _put(RNG.standard_normal(shape), device, "bfloat16", channels_last=True)
    w = _put(RNG.standard_normal((out_channels, shape[1], 1, 1)) / np.sqrt(shape[1]), device, "bfloat16",
             channels_last=True)
    b = _put(RNG.standard_normal(out_channels), device, "bfloat16")
    check(nbx.conv2d(x, w, b), nbx.oracle("conv2d", x, w, b), device)


@pytest.mark.gpu
def test_hifigan_conv1d_and_its_upsampler_and_depthwise_7x7_on_the_gpu(check):
    device = nbx.as_device("cuda")
    x = _put(RNG.standard_normal((1, 512, 2048)), device, "bfloat16")
    w = _put(RNG.standard_normal((512, 256, 16)) / 64, device, "bfloat16")
    check(nbx.conv_transpose1d(x, w, None, 8, 4), nbx.oracle("conv_transpose1d", x, w, None, 8, 4), device)
    w1 = _put(RNG.standard_normal((512, 512, 7)) / 60, device, "bfloat16")
    check(nbx.conv1d(x, w1, None, 1, 3), nbx.oracle("conv1d", x, w1, None, 1, 3), device)
    xd = _put(RNG.standard_normal((2, 384, 56, 56)), device, "bfloat16", channels_last=True)
    wd = _put(RNG.standard_normal((384, 1, 7, 7)) / 7, device, "bfloat16")
    check(nbx.conv2d(xd, wd, None, 1, 3, 1, 384), nbx.oracle("conv2d", xd, wd, None, 1, 3, 1, 384), device)


@pytest.mark.parametrize("ws,groups,channels_last", [((3, 4, 3, 3), 1, False), ((4, 1, 3, 3), 4, True),
                                                     ((5, 4, 1, 1), 1, True)], ids=["gemm", "depthwise", "product"])
def test_activation_and_residual_are_fused_into_the_store(device, check, ws, groups, channels_last):
    x = _put(RNG.standard_normal((1, 4, 3, 5)), device, channels_last=channels_last)
    w, b = _put(RNG.standard_normal(ws), device), _put(RNG.standard_normal(ws[0]), device)
    padding = ws[2] // 2
    residual = _put(RNG.standard_normal((1, ws[0], 3, 5)), device, channels_last=not channels_last)
    out = nbx.conv2d(x, w, b, 1, padding, 1, groups, activation="silu", residual=residual)
    check(out, nbx.oracle("conv2d", x, w, b, 1, padding, 1, groups, activation="silu", residual=residual), device)


# ---- upsample fused into the convolution's input load (issue 21) ---------------------------------

@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
def test_conv2d_with_upsample_is_bit_equal_to_interpolate_then_conv2d(device, check, channels_last):
    x = _put(RNG.standard_normal((1, 3, 3, 4)), device, channels_last=channels_last)
    w, b = _put(RNG.standard_normal((4, 3, 3, 3)), device), _put(RNG.standard_normal(4), device)
    for stride, padding in ((1, 1), (2, 0)):
        fused = nbx.conv2d(x, w, b, stride, padding, upsample=2, activation="silu")
        plain = nbx.conv2d(nbx.interpolate(x, scale_factor=2), w, b, stride, padding, activation="silu")
        np.testing.assert_array_equal(fused.numpy(), plain.numpy())
        check(fused, nbx.oracle("conv2d", x, w, b, stride, padding, activation="silu", upsample=2), device)
    assert cost.price("conv2d", x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, None, None, 2).flops == \
        2 * 6 * 8 * 4 * 3 * 9
    x1, w1 = _put(RNG.standard_normal((1, 2, 5)), device), _put(RNG.standard_normal((3, 2, 3)), device)
    np.testing.assert_array_equal(nbx.conv1d(x1, w1, None, 1, 1, upsample=3).numpy(),
                                  nbx.conv1d(nbx.interpolate(x1, scale_factor=3), w1, None, 1, 1).numpy())


def test_conv2d_upsample_refuses_what_the_implicit_gemm_does_not_fuse(device):
    x = _put(RNG.standard_normal((1, 2, 3, 3)), device)
    with pytest.raises(NotSupportedError, match="upsample this one first"):
        nbx.conv2d(x, _put(RNG.standard_normal((2, 1, 3, 3)), device), None, 1, 1, 1, 2, upsample=2)
    with pytest.raises(NotSupportedError, match="larger than 1 x 1"):
        nbx.conv2d(x, _put(RNG.standard_normal((4, 2, 1, 1)), device), upsample=2)
    from nbx.core.errors import ArgumentError
    with pytest.raises(ArgumentError, match="positive integer factor"):
        nbx.conv2d(x, _put(RNG.standard_normal((4, 2, 3, 3)), device), upsample=1.5)


@pytest.mark.gpu
def test_a_unet_upsample_block_fused_is_bit_equal_to_interpolate_then_conv_on_the_gpu(check):
    device = nbx.as_device("cuda")
    x = _put(RNG.standard_normal((2, 640, 32, 32)), device, "bfloat16", channels_last=True)
    w = _put(RNG.standard_normal((640, 640, 3, 3)) / np.sqrt(9 * 640), device, "bfloat16")
    b = _put(RNG.standard_normal(640), device, "bfloat16")
    fused = nbx.conv2d(x, w, b, 1, 1, upsample=2)
    np.testing.assert_array_equal(fused.numpy(), nbx.conv2d(nbx.interpolate(x, scale_factor=2), w, b, 1, 1).numpy())
    check(fused, nbx.oracle("conv2d", x, w, b, 1, 1, upsample=2), device)
