"""Data movement, indexing and sorting front-ends on the CPU against numpy, and their refusals."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, DTypeError, IndexingError, ShapeError

rng = np.random.default_rng(17)
A = rng.standard_normal((3, 4, 5)).astype(np.float32)


def T(a):
    return nbx.asarray(a)


def same(out, expected):
    np.testing.assert_array_equal(out.numpy(), np.asarray(expected))


def test_concat_stack_and_their_promotion_follow_numpy():
    same(nbx.concat([T(A), T(A[:, :1])], axis=1), np.concatenate([A, A[:, :1]], axis=1))
    same(nbx.concat([T(A), T(A)], axis=None), np.concatenate([A.ravel(), A.ravel()]))
    same(nbx.cat([T(A), T(A)], -1), np.concatenate([A, A], -1))
    same(nbx.stack([T(A), T(A)], axis=-1), np.stack([A, A], -1))
    assert nbx.concat([nbx.ones(2, dtype=nbx.int8), nbx.ones(2, dtype=nbx.int32)]).dtype is nbx.int32
    assert nbx.concat([nbx.ones(2, dtype=nbx.int8), nbx.ones(2, dtype=nbx.float32)]).dtype is nbx.float32
    with pytest.raises(nbx.PromotionError):
        nbx.concat([nbx.ones(2, dtype=nbx.uint64), nbx.ones(2, dtype=nbx.int64)])
    with pytest.raises(ShapeError):
        nbx.concat([T(A), T(A[:, :, :2])], axis=1)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_of_every_mode_with_crops_matches_numpy(mode):
    got = nbx.pad(T(A), (2, -1, 1, 3), mode=mode)
    cropped = A[:, :, :-1]
    npmode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    same(got, np.pad(cropped, [(0, 0), (1, 3), (2, 0)], mode=npmode))
    same(nbx.pad(T(A), (1, 1), value=7.0), np.pad(A, [(0, 0), (0, 0), (1, 1)], constant_values=7))


def test_pad_refuses_what_torch_refuses():
    with pytest.raises(ShapeError):
        nbx.pad(T(A), (5, 0), mode="reflect")
    with pytest.raises(ArgumentError):
        nbx.pad(T(A), (1, 1), mode="mirror")
    with pytest.raises(ShapeError):
        nbx.pad(T(A), (1,))


def test_flip_roll_repeat_tile_tril_triu_follow_numpy():
    same(nbx.flip(T(A), axis=(0, 2)), np.flip(A, (0, 2)))
    same(nbx.flip(T(A)), np.flip(A))
    same(nbx.roll(T(A), (1, -2), axis=(0, 2)), np.roll(A, (1, -2), (0, 2)))
    same(nbx.roll(T(A), 7), np.roll(A, 7))
    same(nbx.repeat(T(A), 2, axis=1), np.repeat(A, 2, 1))
    same(nbx.repeat(T(A), T(np.array([0, 2, 1])), axis=0), np.repeat(A, [0, 2, 1], 0))
    same(nbx.repeat_interleave(T(A), 3), np.repeat(A, 3))
    same(nbx.tile(T(A), (2, 1, 1, 2)), np.tile(A, (2, 1, 1, 2)))
    same(nbx.tril(T(A), k=1), np.tril(A, 1))
    same(nbx.triu(T(A), k=-1), np.triu(A, -1))
    same(nbx.diff(T(A), axis=1, n=2, prepend=T(A[:, :1])), np.diff(A, 2, axis=1, prepend=A[:, :1]))
    for indexing in ("xy", "ij"):
        got = nbx.meshgrid(T(np.arange(2)), T(np.arange(3)), T(np.arange(4)), indexing=indexing)
        for g, e in zip(got, np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing=indexing)):
            same(g, e)


def test_take_index_select_and_embedding_with_negative_ids():
    ids = np.array([[0, -1], [2, 1]])
    same(nbx.take(T(A), T(ids), axis=1), np.take(A, ids, axis=1))
    same(nbx.take(T(A), T(np.array([7, -3]))), np.take(A, [7, -3]))
    same(nbx.index_select(T(A), 2, T(np.array([4, 0]))), A[:, :, [4, 0]])
    w = A.reshape(12, 5)
    same(nbx.embedding(T(ids), T(w), padding_idx=0), w[ids % 12])


def test_take_along_axis_and_gather_follow_numpy_and_torch():
    idx = rng.integers(-4, 4, (3, 6, 5))
    same(nbx.take_along_axis(T(A), T(idx), axis=1), np.take_along_axis(A, idx % 4, 1))
    same(nbx.take_along_axis(T(A), T(idx[:1]), axis=1), np.take_along_axis(A, np.broadcast_to(idx[:1] % 4, (3, 6, 5)), 1))
    small = rng.integers(0, 4, (2, 3, 4))
    same(nbx.gather(T(A), 1, T(small)), np.take_along_axis(A[:2, :, :4], small, 1))


def test_out_of_range_indices_and_wrong_index_dtypes_are_refused_by_name():
    for call in (lambda: nbx.take(T(A), T(np.array([3])), axis=0),
                 lambda: nbx.take(T(A), T(np.array([-4])), axis=0),
                 lambda: nbx.gather(T(A), 0, T(np.full((1, 1, 1), 9))),
                 lambda: nbx.scatter(T(A), 0, T(np.full((1, 1, 1), 3)), 1.0)):
        with pytest.raises(IndexingError):
            call()
    with pytest.raises(DTypeError):
        nbx.take(T(A), T(np.array([0.0])), axis=0)
    with pytest.raises(DTypeError):
        nbx.take(T(A), T(np.array([True])), axis=0)


@pytest.mark.parametrize("reduce", [None, "sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reductions_agree_with_a_loop_over_the_updates(reduce, include_self):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([[0, 1, 0], [0, 3, 0], [2, 1, 0]])
    src = rng.standard_normal((3, 3)).astype(np.float32)
    expected = x.astype(np.float64).copy()
    updates: dict = {}
    for i in range(3):
        for j in range(3):
            updates.setdefault((idx[i, j], j), []).append(float(src[i, j]))
    for place, vals in updates.items():
        pool = ([expected[place]] if include_self or reduce is None else []) + vals
        expected[place] = {None: lambda v: v[-1], "sum": sum, "prod": np.prod, "mean": np.mean,
                           "amax": max, "amin": min}[reduce](pool)
    got = nbx.scatter(T(x), 0, T(idx), T(src), reduce=reduce, include_self=include_self)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_index_add_copy_and_put_are_out_of_place_and_sum_duplicates():
    x = np.zeros((4, 2), np.float32)
    src = np.arange(6, dtype=np.float32).reshape(3, 2)
    got = nbx.index_add(T(x), 0, T(np.array([1, 1, 3])), T(src), alpha=2)
    expected = x.copy()
    np.add.at(expected, [1, 1, 3], 2 * src)
    same(got, expected)
    same(nbx.index_copy(T(x), 0, T(np.array([3, 0, 2])), T(src)), np.array([[2, 3], [0, 0], [4, 5], [0, 1]]))
    put = nbx.index_put(T(x), (T(np.array([0, 0])), T(np.array([1, 1]))), T(np.array([1.0, 2.0], np.float32)),
                        accumulate=True)
    assert put.numpy()[0, 1] == 3.0 and x[0, 1] == 0.0


def test_masks_nonzero_argwhere_and_one_argument_where():
    m = A > 0.3
    same(nbx.masked_fill(T(A), T(m), -5.0), np.where(m, -5, A))
    same(nbx.masked_fill(T(A), T(m[0, 0]), 1.0), np.where(m[0, 0], 1, A))
    same(nbx.masked_select(T(A), T(m)), A[m])
    src = np.arange(A.size, dtype=np.float32)
    expected = A.copy()
    expected[m] = src[: m.sum()]
    same(nbx.masked_scatter(T(A), T(m), T(src)), expected)
    for got, e in zip(nbx.nonzero(T(m)), np.nonzero(m)):
        same(got, e)
    for got, e in zip(nbx.where(T(m)), np.nonzero(m)):
        same(got, e)
    same(nbx.argwhere(T(m)), np.argwhere(m))
    assert nbx.argwhere(T(np.zeros((2, 3), bool))).shape == (0, 2)


def test_searchsorted_and_bucketize_on_sides_rows_sorters_and_unsorted_sequences():
    seq = np.sort(rng.standard_normal(9)).astype(np.float32)
    v = rng.standard_normal((2, 4)).astype(np.float32)
    for side in ("left", "right"):
        same(nbx.searchsorted(T(seq), T(v), side=side), np.searchsorted(seq, v, side))
    same(nbx.bucketize(T(v), T(seq), right=True), np.searchsorted(seq, v, "right"))
    perm = rng.permutation(9)
    shuffled = seq[perm]
    same(nbx.searchsorted(T(shuffled), T(v), sorter=T(np.argsort(shuffled))), np.searchsorted(seq, v))
    rows = np.sort(rng.standard_normal((2, 5)), axis=1)
    same(nbx.searchsorted(T(rows), T(v)), np.stack([np.searchsorted(r, w) for r, w in zip(rows, v)]))
    with pytest.raises(ArgumentError, match="not sorted"):
        nbx.searchsorted(T(shuffled), T(v))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16", "uint8"])
def test_sort_and_argsort_are_stable_in_both_directions_with_nans_largest(dtype):
    a = rng.integers(0, 5, (4, 9)).astype(np.float32)
    if dtype in ("float32", "bfloat16"):
        a[0, 3] = a[2, 1] = np.nan
    x = nbx.asarray(a).to(dtype=dtype)
    for axis in (0, 1):
        order = np.argsort(a, axis=axis, kind="stable")
        same(nbx.argsort(x, axis=axis), order)
        same(nbx.sort(x, axis=axis).to(dtype=nbx.float32), np.take_along_axis(a, order, axis))
        flipped = np.flip(a, axis)
        desc = a.shape[axis] - 1 - np.flip(np.argsort(flipped, axis=axis, kind="stable"), axis)
        same(nbx.argsort(x, axis=axis, descending=True), desc)


def test_topk_kthvalue_median_quantile_and_their_refusals():
    a = rng.standard_normal((3, 11)).astype(np.float32)
    values, indices = nbx.topk(T(a), 4)
    order = np.argsort(-a, axis=1, kind="stable")[:, :4]
    same(indices, order)
    same(values, np.take_along_axis(a, order, 1))
    small = nbx.topk(T(a), 3, dim=0, largest=False)
    same(small.indices, np.argsort(a, 0, kind="stable"))
    kth = nbx.kthvalue(T(a), 5, dim=1)
    same(kth.values, np.sort(a, 1)[:, 4])
    same(nbx.median(T(a), dim=1).values, np.sort(a, 1)[:, 5])
    np.testing.assert_allclose(nbx.quantile(T(a), 0.3, dim=1).numpy(), np.quantile(a, 0.3, axis=1), rtol=1e-6)
    with pytest.raises(ShapeError):
        nbx.topk(T(a), 12)


def test_unique_family_is_sorted_counts_and_inverts():
    a = rng.integers(0, 4, (3, 5))
    result = nbx.unique_all(T(a))
    values, first, inverse, counts = np.unique(a.ravel(), return_index=True, return_inverse=True, return_counts=True)
    same(result.values, values)
    same(result.indices, first)
    same(result.inverse_indices, inverse.reshape(a.shape))
    same(result.counts, counts)
    same(nbx.unique_values(T(a)), values)
    assert len(nbx.unique_values(T(np.array([np.nan, np.nan])))) == 2  # every NaN its own value
