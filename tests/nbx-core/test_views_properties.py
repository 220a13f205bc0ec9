"""Views, strides and basic indexing agree with numpy on random shapes, and never copy."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbx.core as nbx
from nbx.core.errors import IndexingError, ShapeError, ViewError

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


def make(shape):
    base = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    return base, nbx.asarray(base)


def shares_memory(view, base):
    return view.storage is base.storage


def index_for(shape):
    """A basic index: ints, slices with any step and bounds, None and one Ellipsis."""
    def one(size):
        ints = st.integers(-size, size - 1) if size else st.nothing()
        bound = st.none() | st.integers(-size - 3, size + 3)
        step = st.none() | st.integers(-4, 4).filter(lambda s: s != 0)
        return ints | st.builds(slice, bound, bound, step)
    items = st.tuples(*[one(s) for s in shape])
    return items.flatmap(lambda t: st.tuples(
        st.just(t), st.integers(0, len(t)), st.booleans(), st.integers(0, len(t)))).map(_decorate)


def _decorate(args):
    items, none_at, use_ellipsis, cut = args
    items = list(items)
    if use_ellipsis:
        items = items[:cut] + [Ellipsis]
    items.insert(min(none_at, len(items)), None)
    return tuple(items)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), shape=shapes)
def test_basic_indexing_matches_numpy_and_returns_a_view(data, shape):
    base, t = make(shape)
    key = data.draw(index_for(shape))
    expected = base[key]
    got = t[key]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected)
    assert shares_memory(got, t)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5))
def test_setitem_through_a_strided_view_writes_where_numpy_writes(data, shape):
    base, t = make(shape)
    key = data.draw(index_for(shape))
    expected = base.copy()
    expected[key] = -7
    t[key] = -7
    np.testing.assert_array_equal(t.numpy(), expected)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
def test_view_succeeds_exactly_when_numpy_can_reshape_without_copying(data, shape):
    base, t = make(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    step = data.draw(st.integers(1, 2))
    np_src = base.transpose(perm)[..., ::step]
    src = t.permute(perm)[..., ::step]
    new_shape = data.draw(st.sampled_from([(-1,), (np_src.size,), np_src.shape[::-1], (1,) + np_src.shape]))
    if int(np.prod([s for s in new_shape if s != -1])) not in (np_src.size,) and -1 not in new_shape:
        return
    reshaped = np_src.reshape(new_shape)
    numpy_views = np.shares_memory(reshaped, np_src) or np_src.size <= 1
    if numpy_views:
        got = src.view(new_shape)
        assert shares_memory(got, t)
        np.testing.assert_array_equal(got.numpy(), reshaped)
    else:
        with pytest.raises(ViewError, match="would need a copy; use reshape"):
            src.view(new_shape)
    np.testing.assert_array_equal(src.reshape(new_shape).numpy(), reshaped)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=5))
def test_permute_transpose_and_matrix_transpose_match_numpy(data, shape):
    base, t = make(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    np.testing.assert_array_equal(t.permute(perm).numpy(), base.transpose(perm))
    np.testing.assert_array_equal(t.mT.numpy(), np.swapaxes(base, -1, -2))
    a, b = data.draw(st.integers(0, len(shape) - 1)), data.draw(st.integers(0, len(shape) - 1))
    np.testing.assert_array_equal(t.transpose(a, b).numpy(), np.swapaxes(base, a, b))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=2, max_dims=3, min_side=0, max_side=5))
def test_diagonal_matches_numpy_for_any_offset(data, shape):
    base, t = make(shape)
    offset = data.draw(st.integers(-6, 6))
    np.testing.assert_array_equal(t.diagonal(offset, 0, 1).numpy(), np.diagonal(base, offset, 0, 1))


@settings(max_examples=100, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), data=st.data())
def test_expand_gives_stride_zero_and_broadcasts_like_numpy(shape, data):
    base, t = make(shape)
    target = data.draw(hnp.broadcastable_shapes(shape, min_dims=len(shape), max_dims=len(shape) + 2)
                       .map(lambda s: np.broadcast_shapes(s, shape)))
    got = t.expand(*target)
    np.testing.assert_array_equal(got.numpy(), np.broadcast_to(base, target))
    lead = len(target) - len(shape)
    assert all(got.strides[i] == 0 for i in range(lead))


def test_squeeze_unsqueeze_flatten_unflatten_and_narrow_are_views():
    base, t = make((2, 1, 3, 4))
    assert t.squeeze().shape == (2, 3, 4) and t.squeeze(1).shape == (2, 3, 4)
    assert t.unsqueeze(-1).shape == (2, 1, 3, 4, 1) and t.unsqueeze(0).shape == (1, 2, 1, 3, 4)
    assert t.flatten(1).shape == (2, 12) and shares_memory(t.flatten(1), t)
    assert t.flatten(1).unflatten(1, (3, -1)).shape == (2, 3, 4)
    np.testing.assert_array_equal(t.narrow(3, 1, 2).numpy(), base[:, :, :, 1:3])
    with pytest.raises(ShapeError, match="not of size 1"):
        t.squeeze(0)
    with pytest.raises(IndexingError, match="outside size 4"):
        t.narrow(3, 3, 2)


def test_split_chunk_and_unbind_cover_the_tensor_in_order():
    base, t = make((7, 3))
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in t.split(3)]), base)
    assert [p.shape[0] for p in t.split(3)] == [3, 3, 1]
    assert [p.shape[0] for p in t.split([2, 5])] == [2, 5]
    assert [p.shape[0] for p in t.chunk(3)] == [3, 3, 1]
    assert [p.shape for p in t.unbind(1)] == [(7,)] * 3
    with pytest.raises(ShapeError, match="do not add up"):
        t.split([2, 2])


def test_out_of_bounds_and_malformed_indices_are_refused_by_name():
    _, t = make((3, 4))
    with pytest.raises(IndexingError, match="index 3 is out of bounds for dim 0 of size 3"):
        t[3]
    with pytest.raises(IndexingError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(IndexingError, match="at most one Ellipsis"):
        t[..., ...]
    with pytest.raises(ShapeError, match="-1 is invalid|invalid for 12 elements"):
        t.view(5, -1)


def test_integer_array_and_mask_indexing_gather_on_the_cpu():
    base, t = make((4, 5))
    idx = nbx.asarray([3, 0, 3])
    np.testing.assert_array_equal(t[idx].numpy(), base[[3, 0, 3]])
    np.testing.assert_array_equal(t[t > 7].numpy(), base[base > 7])
    np.testing.assert_array_equal(t[:, [1, 4]].numpy(), base[:, [1, 4]])
    t[t > 15] = 0
    base[base > 15] = 0
    np.testing.assert_array_equal(t.numpy(), base)


def test_contiguous_copies_only_what_is_not_dense():
    _, t = make((3, 4))
    assert t.contiguous() is t
    flipped = t[:, ::-1]
    assert not flipped.is_contiguous()
    dense = flipped.contiguous()
    assert dense.is_contiguous() and dense.storage is not t.storage
    np.testing.assert_array_equal(dense.numpy(), flipped.numpy())


def test_a_zero_copy_numpy_wrap_sees_writes_both_ways():
    a = np.zeros((2, 3), np.float32)
    t = nbx.from_numpy(a)
    t[1, 2] = 5
    assert a[1, 2] == 5
    a[0, 0] = 3
    assert t[0, 0].item() == 3
    neg = nbx.from_numpy(a[::-1, ::-2])
    np.testing.assert_array_equal(neg.numpy(), a[::-1, ::-2])
