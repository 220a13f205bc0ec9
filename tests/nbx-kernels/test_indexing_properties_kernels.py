"""Property tests of advanced indexing on the kernels' devices against numpy's: several integer
arrays (adjacent or separated by slices: numpy's transposition rule), None, negative indices, boolean
masks over leading dims, __setitem__ through the same keys, and out-of-range keys refused by name
with the target unchanged. Few examples: each is a handful of interpreted launches on interp."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import nbx.core as nbx
from nbx.core.errors import IndexingError


@st.composite
def array_and_key(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    base = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    if draw(st.booleans()):
        base = base[tuple(slice(None, None, draw(st.sampled_from([1, -1, 2]))) for _ in shape)]
    index_shape = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=2)))
    key, dim = [], 0
    if draw(st.booleans()):  # a boolean mask over the leading dims
        lead = draw(st.integers(1, base.ndim))
        key.append(np.asarray(draw(st.lists(st.booleans(), min_size=int(np.prod(base.shape[:lead])),
                                            max_size=int(np.prod(base.shape[:lead]))))).reshape(base.shape[:lead]))
        dim = lead
    while dim < base.ndim:
        kind = draw(st.sampled_from(["slice", "int", "none", "array"]))
        size = base.shape[dim]
        if kind == "none":
            key.append(None)
            continue
        if kind == "slice":
            key.append(slice(draw(st.integers(-size, size)), None, draw(st.sampled_from([1, -1]))))
        elif kind == "int":
            key.append(draw(st.integers(-size, size - 1)))
        else:
            n = int(np.prod(index_shape))
            key.append(np.asarray(draw(st.lists(st.integers(-size, size - 1), min_size=n, max_size=n)),
                                  dtype=np.int64).reshape(index_shape))
        dim += 1
    return base, tuple(key)


def on(device, key):
    return tuple(nbx.asarray(k).to(device) if isinstance(k, np.ndarray) else k for k in key)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=array_and_key())
def test_getitem_and_setitem_with_advanced_keys_match_numpy_on_the_device(device, case):
    base, key = case
    t = nbx.asarray(base).to(device)
    try:
        expected = base[key]
    except IndexError:  # a mask's positions and the arrays do not broadcast: a named error too
        with pytest.raises(nbx.NbxError):
            t[on(device, key)]
        return
    got = t[on(device, key)]
    assert got.device == t.device
    np.testing.assert_array_equal(got.numpy(), expected)
    places = np.arange(base.size).reshape(base.shape)[key]
    if np.unique(places).size == places.size:  # no element written twice: numpy's result is defined
        target, values = base.copy(), -np.arange(expected.size, dtype=np.float32).reshape(expected.shape) - 1
        target[key] = values
        t[on(device, key)] = nbx.asarray(values).to(device)
        np.testing.assert_array_equal(t.numpy(), target)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=array_and_key(), extra=st.integers(0, 2))
def test_an_out_of_range_index_is_refused_by_name_and_leaves_the_target_unchanged(device, case, extra):
    base, _ = case
    t = nbx.asarray(base).to(device)
    bad = nbx.asarray(np.array([0, base.shape[0] + extra])).to(device)
    with pytest.raises(IndexingError):
        t[bad].numpy()
    with pytest.raises(IndexingError):
        t[bad] = 1.0
        t.numpy()
    np.testing.assert_array_equal(t.numpy(), base)


@settings(max_examples=150, deadline=None)
@given(case=array_and_key())
def test_the_device_path_of_advanced_keys_matches_numpy_over_many_keys_run_on_the_cpu(case):
    """The path every device but the cpu takes (takes and index_copies over a view), run on cpu
    tensors, where its primitives are numpy's: many keys cheaply; the test above runs it on devices."""
    from nbx.core import indexing
    base, key = case
    assume(any(isinstance(k, np.ndarray) for k in key))   # basic keys are views, on every device
    t = nbx.asarray(base.copy())
    try:
        expected = base[key]
    except IndexError:
        with pytest.raises(nbx.NbxError):
            indexing._device_take(t, on("cpu", key))
        return
    np.testing.assert_array_equal(indexing._device_take(t, on("cpu", key)).numpy(), expected)
    places = np.arange(base.size).reshape(base.shape)[key]
    if np.unique(places).size == places.size:
        target, values = base.copy(), -np.arange(expected.size, dtype=np.float32).reshape(expected.shape) - 1
        target[key] = values
        indexing._device_put(t, on("cpu", key), nbx.asarray(values))
        np.testing.assert_array_equal(t.numpy(), target)


def test_an_empty_list_indexes_as_integers_and_a_0d_integer_array_as_an_int_on_the_device(device):
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = nbx.asarray(base).to(device)
    for key in ([], ([], 0), [[]], np.array(1), (slice(None), np.array(-1))):
        np.testing.assert_array_equal(t[key].numpy(), base[key])
    t[[]] = 5.0
    t[np.array(1)] = 7.0
    expected = base.copy()
    expected[np.array(1)] = 7.0
    np.testing.assert_array_equal(t.numpy(), expected)


def test_a_mask_over_dims_that_merge_is_one_index_array_and_over_dims_that_do_not_is_one_a_dim():
    """x[mask] with a 2-D mask over a tensor whose two dims merge takes one array (one take of the
    merged dim, as a model selects its valid tokens), over a strided view one array a dim; both numpy's."""
    from nbx.core import indexing
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    mask = (base[:, :, 0] % 3) == 1
    merged = indexing._Advanced(nbx.asarray(base), (nbx.asarray(mask),))
    assert len(merged.arrays) == 1 and merged.view.shape == (12, 5)
    swapped = nbx.asarray(base).permute(1, 0, 2)   # strides (5, 20, 1): its first two dims do not merge
    apart = indexing._Advanced(swapped, (nbx.asarray(mask.T),))
    assert len(apart.arrays) == 2
    for t, m, b in ((nbx.asarray(base), mask, base), (swapped, mask.T, base.transpose(1, 0, 2))):
        np.testing.assert_array_equal(indexing._device_take(t, (nbx.asarray(m),)).numpy(), b[m])
