"""take's row programs (several short rows, or a slice of a long one, a program) and the atomic sum
and mean scatter, for every dtype they serve, against the float64 oracle (the `check` fixture)."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import plans
from nbx.kernels.gather import row_tile

rng = np.random.default_rng(41)

ATOMIC_DTYPES = ["float32", "float64", "bfloat16", "float16", "float8_e4m3fn", "int32", "int64", "int8", "uint8",
                 "int16", "uint16", "uint32", "uint64", "bool"]


def values_of(shape, dtype):
    if dtype == "bool":
        return rng.standard_normal(shape) > 0
    if nbx.as_dtype(dtype).kind in ("int", "uint"):
        return rng.integers(0, 5, shape)
    return rng.standard_normal(shape)


@pytest.mark.parametrize("dtype, inner", [("uint8", 40), ("float16", 1), ("int32", 3), ("float64", 3),
                                          ("complex128", 1)])
def test_take_moves_rows_of_any_width_bit_for_bit_through_every_word_size(device, dtype, inner):
    a = nbx.asarray(values_of((2, 9, inner), dtype if dtype != "complex128" else "float64")).to(dtype=dtype)
    ids = rng.integers(-9, 9, (5,))
    got = nbx.take(a.to(device), nbx.asarray(ids).to(device), axis=1)
    np.testing.assert_array_equal(got.numpy(), np.take(a.numpy(), ids, axis=1))
    strided = nbx.take(a.to(device)[:, ::2], nbx.asarray(ids % 5).to(device), axis=1)  # a view: copied first
    np.testing.assert_array_equal(strided.numpy(), np.take(a.numpy()[:, ::2], ids % 5, axis=1))


def test_a_take_program_covers_several_short_rows_or_a_slice_of_a_long_one():
    assert row_tile(1, 16) == (16, 1)
    assert row_tile(5, 16) == (2, 8)
    assert row_tile(4096, 4096) == (1, 4096)
    assert row_tile(151936, 4096) == (1, 4096)
    assert row_tile(64, 1024) == (16, 64)


@pytest.mark.parametrize("dtype, reduce", [(d, "sum") for d in ATOMIC_DTYPES] +
                         [(d, "mean") for d in ("float32", "bfloat16", "int8")])
def test_the_atomic_scatter_sums_and_averages_duplicates_for_every_dtype(device, dtype, reduce, check):
    x = nbx.asarray(values_of((7, 5), dtype)).to(dtype=dtype)
    idx = nbx.asarray(rng.integers(-7, 7, (12, 5)))
    src = nbx.asarray(values_of((12, 5), dtype)).to(dtype=dtype)
    for include_self in (True, False):
        got = nbx.scatter(x.to(device), 0, idx.to(device), src.to(device), reduce=reduce, include_self=include_self)
        check(got, nbx.oracle("scatter", x, 0, idx, src, reduce, include_self), device)
    narrow = nbx.asarray(rng.integers(0, 7, (4, 2)))  # an index narrower than x: the axis-last path
    got = nbx.scatter(x.to(device), 0, narrow.to(device), src[:4, :2].to(device), reduce=reduce)
    check(got, nbx.oracle("scatter", x, 0, narrow, src[:4, :2], reduce, True), device)


def _expanded(rows, shape, dim):
    """The scatter index index_add(x, dim, rows, ...) stands for: rows along dim, expanded."""
    view = [1] * len(shape)
    view[dim] = len(rows)
    return nbx.asarray(np.ascontiguousarray(np.broadcast_to(np.reshape(rows, view), shape)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_index_add_and_accumulating_index_put_read_an_expanded_index_without_materializing_it(device, dtype, check):
    x = nbx.asarray(values_of((6, 4, 3), dtype)).to(dtype=dtype)
    rows = np.array([5, 0, 5, -1, 2])
    src = nbx.asarray(values_of((5, 4, 3), dtype)).to(dtype=dtype)
    expected = nbx.oracle("scatter", x, 0, _expanded(rows, (5, 4, 3), 0), src, "sum", True)
    check(nbx.index_add(x.to(device), 0, nbx.asarray(rows).to(device), src.to(device)), expected, device)
    check(nbx.index_put(x.to(device), (nbx.asarray(rows).to(device),), src.to(device), accumulate=True),
          expected, device)
    middle = nbx.asarray(values_of((6, 5, 3), dtype)).to(dtype=dtype)
    cols = np.array([3, 3, 0, 1, 2])
    check(nbx.index_add(x.to(device), 1, nbx.asarray(cols).to(device), middle.to(device)),
          nbx.oracle("scatter", x, 1, _expanded(cols, (6, 5, 3), 1), middle, "sum", True), device)


def test_an_index_of_one_entry_a_row_is_loaded_and_checked_once_a_row_by_the_atomic_scatter(device):
    from nbx.kernels.gather import _scatter_add_plan
    dev = nbx.as_device(device)
    row = _scatter_add_plan((1, 32768, 1024), 8192, (8192, 1, 0), (8388608, 1024, 1), nbx.float32, False, True, dev)
    full = _scatter_add_plan((1, 4096, 64), 1024, (65536, 64, 1), (65536, 64, 1), nbx.float32, False, True, dev)
    assert row.launches[0].meta["ROW_INDEX"] and not full.launches[0].meta["ROW_INDEX"]


def test_the_benchmarks_scatter_add_of_expanded_contiguous_int64_rows_matches_the_oracle(device, check):
    """tools/bench/bench_datamove.py's case ([4096, 64] f32 <- 1024 rows) scaled down: rows of int64
    ids expanded along the columns then made contiguous, dim 0, reduce="sum"."""
    before = plans.cached_count("scatter_add")
    target = nbx.zeros(64, 16).to(device)
    rows = nbx.asarray(np.ascontiguousarray(np.broadcast_to(rng.integers(0, 64, (32, 1)), (32, 16))))
    src = nbx.asarray(rng.standard_normal((32, 16)).astype(np.float32))
    got = nbx.scatter(target, 0, rows.to(device), src.to(device), reduce="sum")
    check(got, nbx.oracle("scatter", nbx.zeros(64, 16), 0, rows, src, "sum", True), device)
    assert plans.cached_count("scatter_add") >= before + (before == 0)  # the atomic path served it


@pytest.mark.gpu
def test_vocabulary_sized_embedding_and_index_put_on_the_gpu(check):
    device = nbx.as_device("cuda")
    weight = nbx.randn(151936, 512, generator=nbx.Generator(seed=3)).to(dtype=nbx.bfloat16)
    ids = nbx.asarray(rng.integers(0, 151936, (8192,)))
    np.testing.assert_array_equal(nbx.embedding(ids.to(device), weight.to(device)).numpy(),
                                  nbx.embedding(ids, weight).numpy())
    table = nbx.randn(32768, 256, generator=nbx.Generator(seed=5))
    rows = nbx.asarray(rng.integers(0, 32768, (8192,)))
    vals = nbx.randn(8192, 256, generator=nbx.Generator(seed=6))
    check(nbx.index_put(table.to(device), (rows.to(device),), vals.to(device), accumulate=True),
          nbx.oracle("scatter", table, 0, _expanded(rows.numpy(), (8192, 256), 0), vals, "sum", True), device)


@pytest.mark.parametrize("word", ["uint8", "uint16", "uint32", "uint64"])
def test_the_remap_copys_screen_workload_is_made_for_every_word_and_copies_bit_for_bit(device, word):
    """The bench's scatter-add failed with OverflowError on the H200: its axis-last transpose of int64
    indices (8-byte words) screened the datamove_transpose tunable, whose workload took its bits
    modulo 2**64, a Python int numpy refuses. Made for every word (the GPU screens; interp does not)."""
    from nbx.kernels.copies import tuning
    for transposed, mapped in ((True, False), (False, True), (False, False)):
        load = tuning.workload({"n": 96, "inner": 8, "dtype": nbx.as_dtype(word), "mapped": mapped,
                                "transposed": transposed}, device)
        load.launch(None)
        np.testing.assert_array_equal(load.output_rows(slice(0, 12)), load.reference_rows(slice(0, 12)))
