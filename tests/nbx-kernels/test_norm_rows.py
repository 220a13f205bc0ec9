"""Layer, RMS, group and batch norm and the fused residual add + RMS norm against the float64 oracle.

On interp max_block_n is 1024, so rows of 1500 take the looped (two-walk) path."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import DTypeError, ShapeError
from nbx.kernels import launch
from nbx.kernels.cost import price
from nbx.kernels.norm import plan
from nbx.kernels.rows import LOOPED, ONE_PASS, SPLIT

# shapes here are chosen from the device file's tiles to take each path: serve those tiles
pytestmark = pytest.mark.usefixtures("device_file_settings")

rng = np.random.default_rng(3)
DTYPES = ["float32", "float16", "bfloat16", "float64"]


def on(device, array, dtype="float32"):
    return nbx.asarray(array, dtype=dtype).to(device)


def long_row(device) -> int:
    return launch.tiles("norm", device)["max_block_n"] + 476


def fill_rows(device) -> int:
    """Rows of long_row enough to fill the device: each row is walked by its own program."""
    reduction = launch.tiles("reduction", device)
    return reduction["programs"] * reduction["num_warps"] // launch.tiles("norm", device)["num_warps"]


def paths(device):
    """Shapes that take the one-pass, looped and split paths."""
    return [(6, 37), (fill_rows(device), long_row(device)), (3, long_row(device))]


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_and_rms_norm_match_the_oracle_on_short_looped_and_split_rows(device, dtype, check):
    taken = set()
    for shape in paths(device):
        n = shape[-1]
        x = on(device, rng.standard_normal(shape) * 3 + 2, dtype)
        w = on(device, rng.standard_normal(n), dtype)
        b = on(device, rng.standard_normal(n), "float32")   # a parameter of another dtype
        out = nbx.layer_norm(x, (n,), w, b, eps=1e-5)
        assert out.dtype is x.dtype and out.shape == shape
        check(out, nbx.oracle("layer_norm", x, (n,), w, b, 1e-5), device)
        check(nbx.rms_norm(x, n, w, eps=1e-6), nbx.oracle("rms_norm", x, (n,), w, 1e-6), device)
        check(nbx.rms_norm(x, n), nbx.oracle("rms_norm", x, (n,)), device)
        taken.add(plan({"x": x}, {}, 1).path)
    assert taken == {ONE_PASS, LOOPED, SPLIT}


def test_norms_over_two_trailing_dims_of_transposed_and_sliced_inputs(device, check):
    base = on(device, rng.standard_normal((4, 6, 10)))
    w = on(device, rng.standard_normal((6, 10)))
    for x in (base, base[::2], base[:, :, ::2], base.permute(2, 1, 0)):
        shape = tuple(x.shape[1:])
        weight = w if shape == (6, 10) else None
        check(nbx.layer_norm(x, shape, weight), nbx.oracle("layer_norm", x, shape, weight), device)
        check(nbx.rms_norm(x, shape, weight, 1e-5), nbx.oracle("rms_norm", x, shape, weight, 1e-5), device)


@pytest.mark.parametrize("dtype", DTYPES)
def test_group_norm_matches_the_oracle_with_short_and_long_group_rows(device, dtype, check):
    cases = [((2, 6, 5, 7), 3), ((1, 4, long_row(device) // 2 + 1), 2), ((fill_rows(device), 2, long_row(device)), 1),
             ((3, 4), 4)]
    for shape, groups in cases:
        x = on(device, rng.standard_normal(shape) + 1, dtype)
        w = on(device, rng.standard_normal(shape[1]), dtype)
        b = on(device, rng.standard_normal(shape[1]), dtype)
        check(nbx.group_norm(x, groups, w, b), nbx.oracle("group_norm", x, groups, w, b), device)
    x = on(device, rng.standard_normal((2, 6, 3, 4)), dtype).permute(0, 1, 3, 2)  # positions not contiguous
    check(nbx.group_norm(x, 2), nbx.oracle("group_norm", x, 2), device)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_uses_running_statistics_per_channel_for_any_layout(device, dtype, check):
    c = 5
    mean, var = on(device, rng.standard_normal(c), dtype), on(device, rng.uniform(0.5, 2, c), "float32")
    w, b = on(device, rng.standard_normal(c), dtype), on(device, rng.standard_normal(c), dtype)
    nhwc = on(device, rng.standard_normal((2, 3, 4, c)), dtype).permute(0, 3, 1, 2)
    for x in (on(device, rng.standard_normal((7, c)), dtype), on(device, rng.standard_normal((2, c, 3, 4)), dtype), nhwc):
        check(nbx.batch_norm(x, mean, var, w, b, 1e-3), nbx.oracle("batch_norm", x, mean, var, w, b, 1e-3), device)
    x = on(device, rng.standard_normal((3, c, long_row(device))), dtype)
    check(nbx.batch_norm(x, mean, var), nbx.oracle("batch_norm", x, mean, var), device)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_writes_the_rounded_sum_and_its_norm(device, dtype, check):
    for shape in paths(device) + [(2, 3, 33)]:
        x = on(device, rng.standard_normal(shape), dtype)
        r = on(device, rng.standard_normal(shape) * 2, dtype)
        w = on(device, rng.standard_normal(shape[-1]), dtype)
        normed, residual = nbx.add_rms_norm(x, r, w, eps=1e-6)
        # bit for bit the unfused add on the same device (one rounding of the fp32 sum)
        np.testing.assert_array_equal(residual.numpy(), nbx.add(x, r).numpy())
        expected_normed, expected_residual = nbx.oracle("add_rms_norm", x, r, w, 1e-6)
        check(residual, expected_residual, device)
        check(normed, expected_normed, device)
    x = on(device, rng.standard_normal((4, 8)), dtype)
    r = on(device, rng.standard_normal((8, 4)), dtype).T  # a transposed residual
    check(nbx.add_rms_norm(x, r)[0], nbx.oracle("add_rms_norm", x, r)[0], device)


def test_zero_rows_and_single_elements(device, check):
    for shape in [(0, 8), (3, 1), (1,)]:
        x = on(device, rng.standard_normal(shape))
        n = shape[-1]
        check(nbx.layer_norm(x, n), nbx.oracle("layer_norm", x, (n,)), device)
        check(nbx.rms_norm(x, n), nbx.oracle("rms_norm", x, (n,)), device)
        normed, residual = nbx.add_rms_norm(x, x)
        check(normed, nbx.oracle("add_rms_norm", x, x)[0], device)
    empty = on(device, np.zeros((0, 4, 3)))
    assert nbx.group_norm(empty, 2).shape == (0, 4, 3)
    assert nbx.batch_norm(empty, on(device, np.zeros(4)), on(device, np.ones(4))).shape == (0, 4, 3)


def test_the_same_input_gives_the_same_bits_every_run_on_the_looped_path(device):
    x = on(device, rng.standard_normal((3, long_row(device))), "bfloat16")
    first = nbx.layer_norm(x, x.shape[-1]).numpy()
    np.testing.assert_array_equal(nbx.layer_norm(x, x.shape[-1]).numpy(), first)


def test_the_declared_cost_counts_outputs_second_walks_and_copies(device):
    x = on(device, np.zeros((4, 100)), "float16")
    w = on(device, np.zeros(100), "float32")
    cost = price("rms_norm", x, 100, w)
    assert cost.allocated == x.nbytes and cost.bytes_moved == 2 * x.nbytes + w.nbytes
    cost = price("add_rms_norm", x, x, w)
    assert cost.allocated == 2 * x.nbytes and cost.bytes_moved == 4 * x.nbytes + w.nbytes
    many = on(device, np.zeros((fill_rows(device), long_row(device))))
    assert plan({"x": many}, {}, 1).path == LOOPED  # each row walked twice by its program
    assert price("layer_norm", many, many.shape[-1]).bytes_moved == 3 * many.nbytes
    few = on(device, np.zeros((2, long_row(device))))
    p = plan({"x": few}, {}, 1)
    assert p.path == SPLIT
    partials = 2 * 2 * p.tile.chunks * 4
    cost = price("layer_norm", few, few.shape[-1])
    assert cost.allocated == few.nbytes + partials and cost.launches == 2
    assert cost.bytes_moved == 3 * few.nbytes + partials * (1 + p.tile.chunks)
    cost = price("add_rms_norm", few, few)  # x and residual read once, the new residual read back
    assert cost.bytes_moved == 5 * few.nbytes + partials * (1 + p.tile.chunks)
    strided = on(device, np.zeros((4, 6, 10))).permute(0, 2, 1)  # trailing dims that do not merge
    cost = price("layer_norm", strided, (10, 6))
    assert [b.name for b in cost.buffers] == ["out", "x_contiguous"]
    assert cost.allocated == 2 * strided.nbytes


def test_realistic_hidden_sizes(device, check):
    """Rows of 4096 and 8192 (one pass on the GPU); small on interp."""
    shapes = [(512, 4096), (256, 8192), (4, 20000)] if device.type == "cuda" else [(3, 300)]
    for shape in shapes:
        for dtype in ("float32", "bfloat16"):
            x = on(device, rng.standard_normal(shape), dtype)
            r = on(device, rng.standard_normal(shape), dtype)
            w = on(device, rng.standard_normal(shape[-1]), dtype)
            check(nbx.layer_norm(x, shape[-1], w, w), nbx.oracle("layer_norm", x, (shape[-1],), w, w), device)
            check(nbx.add_rms_norm(x, r, w)[0], nbx.oracle("add_rms_norm", x, r, w)[0], device)


def test_refusals_name_the_shape_and_the_dtype(device):
    x = on(device, np.ones((2, 6, 4)))
    with pytest.raises(ShapeError, match=r"normalized_shape \(6,\) does not match the trailing dims"):
        nbx.layer_norm(x, 6)
    with pytest.raises(ShapeError, match=r"layer_norm: weight has shape \(6,\), expected \(4,\)"):
        nbx.layer_norm(x, 4, on(device, np.ones(6)))
    with pytest.raises(ShapeError, match="num_groups 4 does not divide the 6 channels"):
        nbx.group_norm(x, 4)
    with pytest.raises(DTypeError, match=r"rms_norm \(x\) does not accept int32"):
        nbx.rms_norm(on(device, np.ones((2, 4)), "int32"), 4)
    with pytest.raises(DTypeError, match=r"batch_norm \(running_var\) does not accept int64"):
        nbx.batch_norm(x, on(device, np.zeros(6)), on(device, np.ones(6), "int64"))
    with pytest.raises(DTypeError, match="residual is float16, x is float32"):
        nbx.add_rms_norm(x, on(device, np.ones((2, 6, 4)), "float16"))


# ---- channels-last group and instance norm, GroupNorm -> SiLU (issue 21) --------------------------

def channels_last(device, array, dtype="float32"):
    """array (N, C, *S) as a channels-last tensor: an (N, *S, C) buffer viewed as (N, C, *S)."""
    t = on(device, np.ascontiguousarray(np.moveaxis(array, 1, -1)), dtype)
    return t.permute(0, array.ndim - 1, *range(1, array.ndim - 1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_channels_last_group_norm_with_silu_is_read_in_place_on_short_looped_and_split_rows(device, dtype, check):
    long = long_row(device)
    cases = [((2, 6, 3, 5), 3, ONE_PASS), ((fill_rows(device), 4, long // 2 + 3), 1, LOOPED),
             ((1, 8, long // 4 + 5), 2, SPLIT), ((1, 6, 4, 4), 6, ONE_PASS)]
    for shape, groups, path in cases:
        a = rng.standard_normal(shape) * 2 + 1
        x = channels_last(device, a, dtype)
        w, b = on(device, rng.standard_normal(shape[1]), dtype), on(device, rng.standard_normal(shape[1]), dtype)
        p = plan({"x": x}, {"weight": w, "bias": b}, 1, groups)
        assert p.copies == () and p.path == path, (shape, p.copies, p.path)
        for activation in (None, "silu"):
            out = nbx.group_norm(x, groups, w, b, activation=activation)
            check(out, nbx.oracle("group_norm", x, groups, w, b, 1e-5, activation), device)
            assert out.strides[1] == 1, "a channels-last input gives a channels-last output"
    x = on(device, rng.standard_normal((2, 6, 3, 4)), dtype)
    check(nbx.group_norm(x, 2, activation="silu"), nbx.oracle("group_norm", x, 2, None, None, 1e-5, "silu"), device)


@pytest.mark.parametrize("layout", ["cf", "cl"])
def test_instance_norm_uses_each_channels_statistics_or_the_running_ones(device, layout, check):
    a = rng.standard_normal((2, 5, 3, 7)) * 3 - 1
    x = channels_last(device, a) if layout == "cl" else on(device, a)
    w, b = on(device, rng.standard_normal(5)), on(device, rng.standard_normal(5))
    mean, var = on(device, rng.standard_normal(5)), on(device, rng.random(5) + 0.5)
    out = nbx.instance_norm(x, weight=w, bias=b)
    check(out, nbx.oracle("instance_norm", x, None, None, w, b), device)
    assert (out.strides[1] == 1) == (layout == "cl")
    assert plan({"x": x}, {"weight": w, "bias": b}, 1, 5).copies == ()
    check(nbx.instance_norm(x, mean, var, w, b, use_input_stats=False, eps=1e-3),
          nbx.oracle("instance_norm", x, mean, var, w, b, False, 0.1, 1e-3), device)
    assert price("instance_norm", x, None, None, w, b).bytes_moved == price("group_norm", x, 5, w, b).bytes_moved


def test_instance_norm_refuses_what_inference_cannot_do(device):
    from nbx.core.errors import ArgumentError, NotSupportedError
    x = on(device, np.ones((2, 3, 4)))
    stats = on(device, np.ones(3))
    with pytest.raises(NotSupportedError, match="would be updated"):
        nbx.instance_norm(x, stats, stats)
    with pytest.raises(ArgumentError, match="give both"):
        nbx.instance_norm(x, stats, None, use_input_stats=False)
    with pytest.raises(ShapeError, match="more than 1 spatial element"):
        nbx.instance_norm(on(device, np.ones((2, 3, 1))))
    with pytest.raises(ArgumentError, match="activation is one of"):
        nbx.group_norm(x, 3, activation="tanh")


@pytest.mark.gpu
def test_sd_vae_group_norm_silu_in_bfloat16_channels_last(check):
    """The SD VAE decoder's GroupNorm(32) -> SiLU at [1, 512, 128, 128], read channels-last in place."""
    device = nbx.as_device("cuda")
    for shape in ((1, 512, 128, 128), (1, 128, 512, 512), (2, 320, 64, 64)):
        x = channels_last(device, rng.standard_normal(shape, dtype=np.float32), "bfloat16")
        w = on(device, rng.standard_normal(shape[1]), "bfloat16")
        b = on(device, rng.standard_normal(shape[1]), "bfloat16")
        assert plan({"x": x}, {"weight": w, "bias": b}, 1, 32).copies == ()
        check(nbx.group_norm(x, 32, w, b, 1e-6, activation="silu"),
              nbx.oracle("group_norm", x, 32, w, b, 1e-6, "silu"), device)
