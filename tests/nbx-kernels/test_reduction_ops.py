"""Every reduction kernel agrees with the float64 oracle for every dtype its front-end accepts, and
refuses the others by name on the kernel path too."""
import nbx.core as nbx
import numpy as np
import triton.language as tl
import pytest
from nbx.core.errors import DTypeError
from reduction_samples import on, sample

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]
ACCEPTS = {  # the front-ends' dtype categories
    "sum": "numeric", "prod": "numeric", "mean": "floating", "max": "real", "min": "real",
    "argmax": "real", "argmin": "real", "var": "real_floating", "std": "real_floating",
    "any": "any", "all": "any", "logsumexp": "real_floating", "count_nonzero": "any",
    "vector_norm": "floating", "max_with_indices": "real", "min_with_indices": "real",
}
KINDS = {"any": "bool int uint float", "numeric": "int uint float", "real": "int uint float",
         "floating": "float", "real_floating": "float"}
INDEXED = ("argmax", "argmin", "max_with_indices", "min_with_indices")


def call(op, x, dim=None, keepdim=False, **kw):
    if op == "vector_norm":
        return nbx.vector_norm(x, kw.get("ord", 2), dim, keepdim)
    return getattr(nbx, op)(x, dim=dim, keepdim=keepdim, **kw)


def check_op(op, x, dim, keepdim, device, check, **kw):
    out = call(op, x, dim, keepdim, **kw)
    expected = nbx.oracle(op, x, dim, keepdim, **kw)
    if op in ("max_with_indices", "min_with_indices"):
        check(out.values, expected[0], device)
        check(out.indices, expected[1], device)
        return out
    check(out, expected, device)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(ACCEPTS))
def test_every_reduction_matches_the_oracle_or_refuses_the_dtype(device, op, dtype, check):
    low, high = (0.5, 1.5) if op == "prod" else (-3.0, 3.0)
    x = on(device, sample(dtype, (3, 37), low, high), dtype)
    if nbx.as_dtype(dtype).kind not in KINDS[ACCEPTS[op]]:
        with pytest.raises(DTypeError, match=f"{op} does not accept {dtype}"):
            call(op, x, 1)
        return
    out = check_op(op, x, 1, False, device, check)
    assert (out[0] if op in INDEXED[2:] else out).device == device


@pytest.mark.parametrize("op", ["sum", "mean", "max", "argmax", "var", "logsumexp", "vector_norm", "any"])
def test_non_contiguous_transposed_and_three_dim_layouts(device, op, check):
    base = on(device, sample("float32", (6, 8, 10)), "float32")
    dims = [1] if op == "argmax" else [1, (0, 2), (0, 1)]
    for x in (base[:, ::2, 1:], base.permute(2, 0, 1)):  # a strided slice, a transposed view
        for dim in dims:
            check_op(op, x, dim, True, device, check)
    check_op(op, base.permute(1, 0, 2), 2 if op == "argmax" else (0, 1, 2), False, device, check)


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "argmin", "std", "logsumexp", "count_nonzero",
                                "max_with_indices", "all"])
def test_rows_longer_than_the_block_loop_and_few_rows_split_into_partials(device, op, check):
    cols = 1300 if device.type == "interp" else 151936  # longer than the block (1024 on interp)
    if op == "prod" and device.type != "interp":
        cols = 4096  # pairwise float32 products of 3e4 factors near 1 already drift 3e-5 (numpy's too)
    low, high = (0.999, 1.001) if op == "prod" else (-3.0, 3.0)
    x = on(device, sample("float32", (2, cols), low, high), "float32")
    check_op(op, x, 1, False, device, check)
    check_op(op, x[:, ::3], 1, True, device, check)   # strided columns
    check_op(op, x.T, 0, False, device, check)        # the reduced dim is the strided one
    check_op(op, x, None, False, device, check)       # everything: one row, split


@pytest.mark.parametrize("op", ["sum", "max", "argmin", "var", "logsumexp", "count_nonzero", "max_with_indices"])
def test_reducing_the_leading_dim_of_a_row_major_tensor_reads_along_its_rows(device, op, check):
    for shape in ((200, 40), (700, 3)):  # 40 kept columns in one tile; 3 kept columns, split ranges
        check_op(op, on(device, sample("float32", shape), "float32"), 0, False, device, check)


@pytest.mark.parametrize("op", ["sum", "prod", "mean", "var", "std", "logsumexp", "any", "all",
                                "count_nonzero", "vector_norm"])
def test_empty_reductions_give_the_identity_and_empty_outputs_stay_empty(device, op, check):
    x = on(device, np.zeros((3, 0, 4)), "float32")
    check_op(op, x, 1, False, device, check)                  # (3, 4) of identities (NaN for mean/var)
    assert call(op, x, 2, True).shape == (3, 0, 1)             # nothing to compute


@pytest.mark.parametrize("op", ["sum", "max", "argmax", "var", "logsumexp", "min_with_indices"])
def test_single_elements_and_scalars(device, op, check):
    for shape, dim in (((1,), 0), ((1, 1), 1), ((), None)):
        check_op(op, on(device, sample("float64", shape), "float64"), dim, False, device, check)


def test_max_propagates_nan_and_argmax_returns_the_first_nan_also_across_partials(device, check):
    a = sample("float32", (2, 2100))
    a[0, 2060] = a[0, 2090] = np.nan  # in the second column range of a split row (on interp)
    a[1, 5] = np.nan
    x = on(device, a, "float32")
    assert np.isnan(nbx.max(x, dim=1).numpy()).all()
    assert nbx.argmax(x, dim=1).numpy().tolist() == [2060, 5]
    assert nbx.argmin(x, dim=1).numpy().tolist() == [2060, 5]
    assert np.isnan(nbx.logsumexp(x, dim=1).numpy()).all()
    check_op("min_with_indices", x, 1, False, device, check)


@pytest.mark.parametrize("int64_lanes", [False, True])
def test_index_lanes_of_either_width_give_the_first_extreme_across_partials(device, monkeypatch, int64_lanes):
    from nbx.kernels.reduction import launches
    if int64_lanes:  # every launch keeps int64 lane indices, as a reduced dim of 2**31 elements would
        monkeypatch.setattr(launches, "INDEX32_LIMIT", 0)
    assert launches.index_lanes(5)["INDEX"] == (tl.int64 if int64_lanes else tl.int32)
    a = np.tile(np.arange(2100, dtype=np.float32) % 97, (3, 1))
    a[1, 2099] = a[2, 1500] = 500.0
    a[2, 2050] = 500.0  # a tie in a later column range: the first index wins
    x = on(device, a, "float32")
    assert nbx.argmax(x, dim=1).numpy().tolist() == [96, 2099, 1500]
    assert nbx.argmin(x, dim=1).numpy().tolist() == [0, 0, 0]
    values, index = nbx.max_with_indices(x, dim=1)
    assert index.numpy().tolist() == [96, 2099, 1500] and values.numpy().tolist() == [96.0, 500.0, 500.0]


def test_ties_give_the_first_index_and_infinities_are_ordinary_extremes(device):
    a = np.array([[1.0, 5.0, 5.0, -np.inf], [-np.inf, -np.inf, -np.inf, -np.inf]], np.float32)
    x = on(device, a, "float32")
    assert nbx.argmax(x, dim=1).numpy().tolist() == [1, 0]
    assert nbx.argmin(x, dim=1).numpy().tolist() == [3, 0]
    assert nbx.logsumexp(x, dim=1).numpy()[1] == -np.inf
    assert nbx.logsumexp(on(device, [np.inf, 1.0], "float32"), dim=0).item() == np.inf


def test_integer_sums_accumulate_in_int64_exactly(device):
    big = np.array([[2**40 + 7, -(2**39) + 3, 2**41 + 1] * 700], np.int64)
    assert nbx.sum(on(device, big, "int64"), dim=1).item() == int(big.sum())
    small = np.full((2, 3000), 100, np.int8)
    out = nbx.sum(on(device, small, "int8"))
    assert out.dtype is nbx.int64 and out.item() == 600000
    out = nbx.sum(on(device, np.full(3000, 250, np.uint8), "uint8"), dim=0)
    assert out.dtype is nbx.uint64 and out.item() == 750000


def test_sum_and_mean_take_an_output_dtype_and_std_a_correction(device, check):
    x = on(device, sample("float16", (4, 300)), "float16")
    out = nbx.sum(x, dim=1, dtype=nbx.float32)
    assert out.dtype is nbx.float32
    check(out, nbx.oracle("sum", x, 1, False, dtype=nbx.float32), device)
    check_op("std", x, 1, False, device, check, correction=1)
    check_op("var", on(device, sample("float32", (2, 1)), "float32"), 1, False, device, check, correction=1)
    ints = on(device, sample("int32", (3, 20)), "int32")
    check(nbx.sum(ints, dim=0, dtype=nbx.float64), nbx.oracle("sum", ints, 0, False, dtype=nbx.float64), device)


@pytest.mark.parametrize("ord", [2, 1, float("inf"), float("-inf"), 0, 3, -1.5])
def test_vector_norms_of_every_order_over_half_and_double(device, ord, check):
    for dtype in ("bfloat16", "float64"):
        x = on(device, sample(dtype, (3, 1500)), dtype)
        check_op("vector_norm", x, 1, False, device, check, ord=ord)


def test_the_same_input_gives_the_same_bits_on_every_run(device):
    x = on(device, sample("float32", (3, 1500), -1e4, 1e4), "float32")
    for op in ("sum", "var", "logsumexp", "argmax"):
        for dim in (1, None):
            first = call(op, x, dim).numpy()
            assert first.tobytes() == call(op, x, dim).numpy().tobytes(), (op, dim)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "int16", "uint32", "uint64"])
def test_float8_and_the_other_integer_widths(device, dtype, check):
    x = on(device, sample("float64", (3, 50), 0.0, 8.0), dtype)
    ops = ["sum", "max", "min", "argmax", "max_with_indices"]
    ops += ["mean", "logsumexp", "var", "vector_norm"] if "float" in dtype else ["count_nonzero"]
    for op in ops:
        check_op(op, x, 1, False, device, check)
