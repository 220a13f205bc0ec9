"""Property tests: advanced indexing agrees with numpy's, on random shapes, strides and keys."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import nbx.core as nbx
from nbx.core import indexing
from nbx.core.errors import IndexingError


@st.composite
def array_and_key(draw, with_array=True):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    base = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    if draw(st.booleans()):
        base = base[tuple(slice(None, None, draw(st.sampled_from([1, -1, 2]))) for _ in shape)]
    key, dim, placed = [], 0, False
    while dim < base.ndim:
        kind = draw(st.sampled_from(["slice", "int", "none", "array"] if with_array and not placed
                                    else ["slice", "int", "none"]))
        size = base.shape[dim]
        if kind == "none":
            key.append(None)
            continue
        if kind == "slice":
            key.append(slice(draw(st.integers(-size, size)), draw(st.integers(-size, size)),
                             draw(st.sampled_from([1, 2, -1]))))
        elif kind == "int":
            key.append(draw(st.integers(-size, size - 1)))
        else:
            shape_i = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=2)))
            key.append(np.asarray(draw(st.lists(st.integers(-size, size - 1), min_size=int(np.prod(shape_i)),
                                                max_size=int(np.prod(shape_i))))).reshape(shape_i).astype(np.int64))
            placed = True
        dim += 1
    return base, tuple(key)


@settings(max_examples=80, deadline=None)
@given(array_and_key())
def test_getitem_with_one_integer_array_among_basic_indices_matches_numpy(case):
    base, key = case
    t = nbx.asarray(base)
    expected = base[key]
    got = t[tuple(nbx.asarray(k) if isinstance(k, np.ndarray) else k for k in key)]
    np.testing.assert_array_equal(got.numpy(), expected)
    if any(isinstance(k, np.ndarray) for k in key):  # the take path every device but the cpu uses
        taken = indexing._device_take(t, tuple(nbx.asarray(k) if isinstance(k, np.ndarray) else k for k in key))
        assert taken.shape == expected.shape
        np.testing.assert_array_equal(taken.numpy(), expected)


@settings(max_examples=30, deadline=None)
@given(array_and_key(with_array=False), st.data())
def test_boolean_masks_and_out_of_range_indices_follow_numpy(case, data):
    base, _ = case
    t = nbx.asarray(base)
    mask = np.asarray(data.draw(st.lists(st.booleans(), min_size=base.shape[0], max_size=base.shape[0])))
    np.testing.assert_array_equal(t[nbx.asarray(mask)].numpy(), base[mask])
    bad = base.shape[0] + data.draw(st.integers(0, 3))
    with pytest.raises(IndexingError):
        t[nbx.asarray([bad])]
    with pytest.raises(IndexingError):
        nbx.take(t, nbx.asarray([-bad - 1]), axis=0)
