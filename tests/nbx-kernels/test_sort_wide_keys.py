"""Sorting 64-bit keys (int64, uint64, float64) on the kernels: two stable sorts of 32-bit words
(sort/wide.py), against numpy's stable sort (the CPU reference), on interp in CI and the GPU."""
import weakref

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.ops.sorting import argsort_reference, take_sorted
from nbx.kernels import launch
from nbx.kernels.cost import price

rng = np.random.default_rng(64)


def live_bytes(device, monkeypatch) -> dict:
    """The bytes live on device's backend and their peak, kept up to date by every allocation and
    every free (a weakref finalizer on each storage); interp's allocations are the plans' own."""
    from nbx.core.device import get_backend
    one = nbx.asarray(np.array([0])).to(device)
    nbx.take_along_axis(one, one, axis=0)  # the device's bounds record, made by its first checked gather
    backend, state = get_backend(device.type), {"live": 0, "peak": 0}
    allocate = backend.allocate

    def tracked(nbytes, where):
        storage = allocate(nbytes, where)
        state["live"] += nbytes
        state["peak"] = max(state["peak"], state["live"])
        weakref.finalize(storage, lambda: state.__setitem__("live", state["live"] - nbytes))
        return storage
    monkeypatch.setattr(backend, "allocate", tracked)
    return state


def peak_of(state, call):
    """The peak bytes call() allocated beyond those live before it, and its result."""
    before = state["peak"] = state["live"]
    result = call()
    return state["peak"] - before, result


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
def test_64_bit_keys_sort_as_numpys_stable_sort_allocating_the_declared_peak(device, dtype, monkeypatch):
    a = wide_keys((3, 29), dtype)  # rows of one program each (interp's max_block_n is 32)
    d = nbx.asarray(a).to(device)
    # one call a dtype (each is ~10 interpreted launches): int64 descending (the complement),
    # uint64 ascending (no transform), float64 (NaN, -0.0, subnormals) along dim 0 (moved last)
    axis, descending = {"int64": (1, True), "uint64": (1, False), "float64": (0, False)}[dtype]
    order = argsort_reference(a, axis, descending)
    state = live_bytes(device, monkeypatch)
    peak, (values, indices) = peak_of(state, lambda: take_sorted(d, axis, descending))
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, axis))
    if device.type == "interp":  # the GPU's pool measures it in test_..._the_pools_measured_peak_on_the_gpu
        assert peak == price("sort", d, axis, descending).allocated


def test_a_64_bit_row_longer_than_one_program_sorts_descending_with_nans_first_through_the_radix_sort(
        device, monkeypatch):
    n = launch.tiles("sort", device)["max_block_n"] + 5
    a = wide_keys((1, n), "float64")
    order = argsort_reference(a, 1, True)  # NaN is the largest value: first when descending
    d = nbx.asarray(a).to(device)
    state = live_bytes(device, monkeypatch)
    peak, (values, got) = peak_of(state, lambda: nbx.topk(d, n, largest=True))  # k = the row: the full sort
    np.testing.assert_array_equal(got.numpy(), order)
    assert np.isnan(a[0, got.numpy()[0, :3]]).all()
    if device.type == "interp":
        assert peak == price("topk", d, n).allocated


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


@pytest.mark.gpu
def test_the_declared_allocation_of_64_bit_sorts_is_the_pools_measured_peak_on_the_gpu():
    from test_kernel_costs import measured  # tests/gpu's pool measurement
    for dtype, shape, k in (("int64", (64, 4096), None), ("float64", (8, 151936), 50)):
        d = nbx.asarray(wide_keys(shape, dtype)).to("cuda")
        declared = price("sort", d) if k is None else price("topk", d, k)
        peak, _ = measured(lambda: nbx.sort(d) if k is None else nbx.topk(d, k))
        assert declared.allocated == peak, (dtype, shape, k)
