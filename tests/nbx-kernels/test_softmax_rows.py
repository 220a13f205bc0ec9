"""softmax, log_softmax and scaled/masked softmax kernels against the float64 oracle.

On interp max_block_n is 1024, so rows of 1500 take the split (online) path; on the GPU the same
tests also run rows of a vocabulary's length."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import DTypeError, ShapeError
from nbx.kernels import launch
from nbx.kernels.cost import price
from nbx.kernels.softmax import plan
from nbx.kernels.rows import LOOPED, ONE_PASS, SPLIT

# shapes here are chosen from the device file's tiles to take each path: serve those tiles
pytestmark = pytest.mark.usefixtures("device_file_settings")

rng = np.random.default_rng(7)
DTYPES = ["float32", "float16", "bfloat16", "float64"]


def on(device, array, dtype="float32"):
    return nbx.asarray(array, dtype=dtype).to(device)


def long_row(device) -> int:
    """A row longer than the device's max_block_n: the looped or the split path."""
    return launch.tiles("softmax", device)["max_block_n"] + 476


def fill_rows(device) -> int:
    """Rows of long_row enough to fill the device: each row is walked by its own program."""
    reduction = launch.tiles("reduction", device)
    return reduction["programs"] * reduction["num_warps"] // launch.tiles("softmax", device)["num_warps"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_short_looped_and_split_rows_match_the_oracle_for_every_float_dtype(device, op, dtype, check):
    taken = set()
    for shape in [(5, 37), (fill_rows(device), long_row(device)), (3, long_row(device))]:
        x = on(device, rng.standard_normal(shape) * 4, dtype)
        out = getattr(nbx, op)(x, dim=-1)
        assert out.dtype is nbx.as_dtype(dtype) and out.shape == shape and out.device == device
        check(out, nbx.oracle(op, x, -1), device)
        taken.add(plan(x, 1).path)
    assert taken == {ONE_PASS, LOOPED, SPLIT}


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_any_dim_is_reduced_through_strides_of_transposed_sliced_and_reversed_inputs(device, op, check):
    base = on(device, rng.standard_normal((6, 40, 9)) * 3)
    cases = [(base, 1), (base, 0), (base.permute(2, 0, 1), 2), (base[:, ::3, 1:], 1), (base[::-1, :, ::2], -1),
             (on(device, rng.standard_normal((long_row(device), 6))), 0)]
    for x, dim in cases:
        check(getattr(nbx, op)(x, dim), nbx.oracle(op, x, dim), device)


def test_zero_rows_empty_rows_and_a_single_element(device, check):
    for shape, dim in [((0, 7), 1), ((7, 0), 1), ((3, 0, 2), 0), ((1,), 0), ((), 0), ((4, 1), 1)]:
        x = on(device, rng.standard_normal(shape))
        out = nbx.softmax(x, dim)
        assert out.shape == shape
        check(out, nbx.oracle("softmax", x, dim), device)
        check(nbx.log_softmax(x, dim), nbx.oracle("log_softmax", x, dim), device)


def test_minus_infinity_elements_get_zero_and_rows_of_minus_infinity_are_nan(device, check):
    for rows, n in ((3, 9), (3, long_row(device)), (fill_rows(device), long_row(device))):
        a = rng.standard_normal((rows, n))
        a[0, ::2] = -np.inf
        a[1, :] = -np.inf
        a[2, : n // 2] = -np.inf  # a whole piece of the split row is -inf
        x = on(device, a)
        out = nbx.softmax(x, -1).numpy()
        assert np.isnan(out[1]).all() and (out[0, ::2] == 0).all() and (out[2, : n // 2] == 0).all()
        check(nbx.softmax(x, -1), nbx.oracle("softmax", x, -1), device)
        check(nbx.log_softmax(x, -1), nbx.oracle("log_softmax", x, -1), device)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_softmax_with_bool_and_additive_masks_broadcast_to_x_matches_the_oracle(device, dtype, check):
    for lead, n in ((2, 21), (2, long_row(device)), (fill_rows(device), long_row(device))):
        x = on(device, rng.standard_normal((lead, 3, n)), dtype)
        keep = on(device, rng.random((3, n)) > 0.3, "bool")                     # broadcast over dim 0
        bias = on(device, np.where(rng.random((lead, 1, n)) > 0.5, 0.0, -1e4), dtype)  # broadcast over dim 1
        for mask in (None, keep, bias):
            out = nbx.scaled_masked_softmax(x, 0.1, mask, dim=-1)
            check(out, nbx.oracle("scaled_masked_softmax", x, 0.1, None if mask is None else mask.broadcast_to(x.shape), -1), device)


def test_a_causal_mask_over_a_non_last_dim_and_fully_masked_rows(device, check):
    x = on(device, rng.standard_normal((5, 5, 2)))
    causal = on(device, np.tril(np.ones((5, 5), bool))[:, :, None], "bool")
    out = nbx.scaled_masked_softmax(x, 2.0, causal, dim=0)
    check(out, nbx.oracle("scaled_masked_softmax", x, 2.0, causal.broadcast_to(x.shape), 0), device)
    none_kept = on(device, np.zeros((5, 5, 2), bool), "bool")
    assert np.isnan(nbx.scaled_masked_softmax(x, 1.0, none_kept, dim=1).numpy()).all()


def test_long_rows_give_the_same_bits_every_run(device):
    for rows in (2, fill_rows(device)):
        x = on(device, rng.standard_normal((rows, long_row(device))), "bfloat16")
        first = nbx.softmax(x, -1).numpy()
        for _ in range(2):
            np.testing.assert_array_equal(nbx.softmax(x, -1).numpy(), first)


def test_the_declared_cost_counts_the_output_the_partials_and_a_second_read(device):
    short = on(device, np.zeros((4, 100)))
    cost = price("softmax", short, -1)
    assert cost.allocated == 4 * 100 * 4 and cost.bytes_moved == 2 * short.nbytes and cost.launches == 1
    n = long_row(device)
    long = on(device, np.zeros((2, n)), "float16")
    assert plan(long, 1).path == SPLIT
    chunks = plan(long, 1).tile.chunks
    cost = price("log_softmax", long, dim=1)
    partials = 2 * 2 * chunks * 4  # max and sum per row and piece, fp32
    assert cost.outputs == long.nbytes and cost.allocated == long.nbytes + partials
    assert cost.bytes_moved == 3 * long.nbytes + partials * (1 + chunks) and cost.launches == 2
    many = on(device, np.zeros((fill_rows(device), n)), "float16")
    cost = price("softmax", many, -1)  # looped: no partials, x read twice
    assert cost.allocated == many.nbytes and cost.bytes_moved == 3 * many.nbytes and cost.launches == 1


def test_a_layout_whose_row_dims_do_not_collapse_is_read_through_a_declared_copy(device, check):
    base = on(device, rng.standard_normal((5, 8, 5, 3, 7)))
    x = base[::2, ::2, ::2]  # four row dims that do not merge (the last two merge for the copy)
    cost = price("softmax", x, 4)
    assert any(b.name == "x_contiguous" for b in cost.buffers)
    check(nbx.softmax(x, 4), nbx.oracle("softmax", x, 4), device)


def test_vocabulary_sized_rows(device, check):
    """32 rows of a 152k vocabulary (split over programs) and 4096-long rows; small on interp."""
    shapes = [(32, 151936), (64, 4096), (8, 262144)] if device.type == "cuda" else [(2, 3000)]
    for shape in shapes:
        for dtype in ("float32", "bfloat16"):
            x = on(device, rng.standard_normal(shape) * 5, dtype)
            check(nbx.softmax(x, -1), nbx.oracle("softmax", x, -1), device)
            check(nbx.log_softmax(x, -1), nbx.oracle("log_softmax", x, -1), device)


def test_refusals_name_the_dtype_and_the_shape(device):
    with pytest.raises(DTypeError, match="softmax does not accept int32"):
        nbx.softmax(on(device, np.ones((2, 3)), "int32"))
    x = on(device, np.ones((2, 3)))
    with pytest.raises(DTypeError, match="a mask is bool"):
        nbx.scaled_masked_softmax(x, 1.0, on(device, np.ones(3), "int64"))
    with pytest.raises(ShapeError, match=r"mask of shape \(2,\) does not broadcast"):
        nbx.scaled_masked_softmax(x, 1.0, on(device, np.ones(2), "bool"))
