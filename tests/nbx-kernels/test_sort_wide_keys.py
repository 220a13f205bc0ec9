"""Sorting 64-bit keys (int64, uint64, float64) on the kernels: two stable sorts of 32-bit words
(sort/wide.py), against numpy's stable sort (the CPU reference), on interp in CI and the GPU."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.ops.sorting import argsort_reference, take_sorted
from nbx.kernels import launch
from nbx.kernels.cost import price

rng = np.random.default_rng(64)


def wide_keys(shape, dtype: str) -> np.ndarray:
    """Keys that differ only in their low word, only in their high word, tie, and hit the extremes."""
    if dtype == "float64":
        a = rng.standard_normal(shape)
        a.flat[:10] = [np.nan, -0.0, 0.0, np.inf, -np.inf, -np.nan, 5e-324, -5e-324, np.nan, 1.0 + 2 ** -52]
        a.flat[10:13] = 1.0  # ties
        return a
    info = np.iinfo(dtype)
    a = rng.integers(int(info.min), int(info.max), shape, dtype=dtype, endpoint=True)
    a.flat[:6] = [info.min, info.max, 0, 1 << 32, (1 << 32) + 1, (1 << 32) - 1]
    a.flat[6:9] = 7  # ties
    return a


@pytest.mark.parametrize("dtype", ["int64", "uint64", "float64"])
def test_64_bit_keys_sort_as_numpys_stable_sort(device, dtype):
    a = wide_keys((3, 29), dtype)  # rows of one program each (interp's max_block_n is 32)
    d = nbx.asarray(a).to(device)
    # one call a dtype (each is ~10 interpreted launches): int64 descending (the complement),
    # uint64 ascending (no transform), float64 (NaN, -0.0, subnormals) along dim 0 (moved last)
    axis, descending = {"int64": (1, True), "uint64": (1, False), "float64": (0, False)}[dtype]
    order = argsort_reference(a, axis, descending)
    values, indices = take_sorted(d, axis, descending)
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, axis))


def test_a_64_bit_row_longer_than_one_program_sorts_descending_with_nans_first_through_the_radix_sort(device):
    n = launch.tiles("sort", device)["max_block_n"] + 5
    a = wide_keys((1, n), "float64")
    order = argsort_reference(a, 1, True)  # NaN is the largest value: first when descending
    got = nbx.argsort(nbx.asarray(a).to(device), axis=1, descending=True).numpy()
    np.testing.assert_array_equal(got, order)
    assert np.isnan(a[0, got[0, :3]]).all()


def test_unique_and_topk_of_64_bit_keys_match_the_cpu(device):
    ids = rng.integers(0, 1 << 40, 20)
    ids[5:9] = ids[0]
    got = nbx.unique_all(nbx.asarray(ids).to(device))
    for g, e in zip(got, nbx.unique_all(nbx.asarray(ids))):
        np.testing.assert_array_equal(g.numpy(), e.numpy())
    x = nbx.asarray(wide_keys((3, 9), "float64")[:, ::-1].copy())
    d = x.to(device)
    for g, e in zip(nbx.topk(d, 3, largest=False), nbx.topk(x, 3, largest=False)):  # kthvalue, median rest on it
        np.testing.assert_array_equal(g.numpy(), e.numpy())


def test_the_cost_of_a_64_bit_sort_counts_both_word_sorts(device):
    d = nbx.asarray(wide_keys((2, 29), "int64")).to(device)
    words = price("sort", nbx.asarray(np.zeros((2, 29), np.uint32)).to(device))
    cost = price("sort", d)
    assert cost.launches > 2 * words.launches and cost.bytes_moved > 2 * words.bytes_moved
    assert any("64-bit" in note for note in cost.notes)


def test_complex_keys_are_still_refused_by_name(device):
    with pytest.raises(nbx.DTypeError):
        nbx.sort(nbx.asarray(np.ones(3, np.complex64)).to(device))


@pytest.mark.gpu
def test_int64_rows_of_vocabulary_size_and_a_million_token_ids_sort_and_unique_as_numpy_on_the_gpu():
    a = rng.integers(-(1 << 62), 1 << 62, (4, 151936))
    a[:, ::7] = 5  # ties across the radix sort's tiles
    order = argsort_reference(a, 1, True)
    np.testing.assert_array_equal(nbx.argsort(nbx.asarray(a).to("cuda"), axis=1, descending=True).numpy(), order)
    ids = rng.integers(0, 151936, 1 << 20)
    got = nbx.unique_counts(nbx.asarray(ids).to("cuda"))
    values, counts = np.unique(ids, return_counts=True)
    np.testing.assert_array_equal(got.values.numpy(), values)
    np.testing.assert_array_equal(got.counts.numpy(), counts)
