"""diagonal, diag_embed, Tensor.unfold, unfold / fold (im2col / col2im), pixel_shuffle / unshuffle and
repeat_interleave's one-argument form, scatter_add and scatter_reduce (torch's spellings) on the CPU,
against float64 loops over their definitions."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, ShapeError
from window_references import col2im, diag_embed, im2col, pixel_shuffle

rng = np.random.default_rng(17)


def test_diagonal_is_a_view_of_any_two_dims_and_diag_embed_inverts_it():
    a = rng.standard_normal((3, 4, 5))
    x = nbx.asarray(a)
    d = nbx.diagonal(x, offset=-1, dim1=2, dim2=0)
    np.testing.assert_array_equal(d.numpy(), np.diagonal(a, -1, 2, 0))
    assert d.storage is x.storage
    v = rng.standard_normal((2, 3)).astype(np.float32)
    for offset, dim1, dim2 in ((0, -2, -1), (2, 0, 2), (-1, 2, 0), (1, 1, 0)):
        out = nbx.diag_embed(nbx.asarray(v), offset, dim1, dim2)
        np.testing.assert_array_equal(out.numpy(), diag_embed(v, offset, dim1, dim2))
        np.testing.assert_array_equal(nbx.diagonal(out, offset, dim1, dim2).numpy(), v)
    with pytest.raises(ShapeError):
        nbx.diag_embed(nbx.asarray(v), 0, 1, -2)


def test_tensor_unfold_is_a_view_of_sliding_windows_as_torch_makes_them():
    a = np.arange(2 * 11, dtype=np.float32).reshape(2, 11)
    x = nbx.asarray(a)
    w = x.unfold(1, 4, 3)
    assert w.storage is x.storage and w.shape == (2, 3, 4)
    np.testing.assert_array_equal(w.numpy(), np.lib.stride_tricks.sliding_window_view(a, 4, axis=1)[:, ::3])
    np.testing.assert_array_equal(x.unfold(0, 2, 1).numpy(), a.T[None])  # [1, 11, 2]: out[0, j, k] = a[k, j]
    with pytest.raises(ShapeError):
        x.unfold(1, 12, 1)
    with pytest.raises(ShapeError):
        x.unfold(1, 2, 0)


@pytest.mark.parametrize("kernel, dilation, padding, stride", [
    ((2, 3), (1, 1), (0, 0), (1, 1)), ((3, 2), (2, 1), (1, 2), (2, 3)), ((1, 1), (1, 1), (0, 0), (1, 1))])
def test_unfold_and_fold_are_im2col_and_col2im_with_overlaps_summed(kernel, dilation, padding, stride):
    a = rng.standard_normal((2, 3, 7, 6))
    cols = nbx.unfold(nbx.asarray(a), kernel, dilation, padding, stride)
    expected = im2col(a, kernel, dilation, padding, stride)
    np.testing.assert_array_equal(cols.numpy(), expected)
    c = rng.standard_normal(expected.shape)
    out = nbx.fold(nbx.asarray(c), (7, 6), kernel, dilation, padding, stride)
    np.testing.assert_allclose(out.numpy(), col2im(c, (7, 6), kernel, dilation, padding, stride), rtol=1e-13)
    unbatched = nbx.unfold(nbx.asarray(a[0]), kernel, dilation, padding, stride)
    np.testing.assert_array_equal(unbatched.numpy(), expected[0])
    np.testing.assert_allclose(nbx.fold(nbx.asarray(c[1]), (7, 6), kernel, dilation, padding, stride).numpy(),
                               col2im(c, (7, 6), kernel, dilation, padding, stride)[1], rtol=1e-13)


def test_unfold_and_fold_refuse_windows_that_do_not_fit_and_columns_of_the_wrong_shape():
    x = nbx.asarray(np.zeros((1, 2, 3, 3), np.float32))
    with pytest.raises(ShapeError):
        nbx.unfold(x, 4)
    with pytest.raises(ArgumentError):
        nbx.unfold(x, 2, stride=0)
    with pytest.raises(ShapeError):
        nbx.fold(nbx.asarray(np.zeros((1, 8, 5), np.float32)), (3, 3), 2)


def test_pixel_shuffle_and_unshuffle_follow_the_definition_and_invert_each_other():
    a = rng.standard_normal((2, 1, 18, 2, 3)).astype(np.float32)
    out = nbx.pixel_shuffle(nbx.asarray(a), 3)
    np.testing.assert_array_equal(out.numpy(), pixel_shuffle(a, 3))
    np.testing.assert_array_equal(nbx.pixel_unshuffle(out, 3).numpy(), a)
    with pytest.raises(ShapeError):
        nbx.pixel_shuffle(nbx.asarray(a), 4)
    with pytest.raises(ShapeError):
        nbx.pixel_unshuffle(out, 4)


def test_repeat_interleave_of_counts_alone_repeats_their_positions():
    counts = nbx.asarray(np.array([2, 0, 3, 1]))
    np.testing.assert_array_equal(nbx.repeat_interleave(counts).numpy(), np.repeat(np.arange(4), [2, 0, 3, 1]))
    with pytest.raises(ShapeError):
        nbx.repeat_interleave(nbx.asarray(np.ones((2, 2), np.int64)))


def test_scatter_add_and_scatter_reduce_are_torchs_spellings_of_scatter():
    x = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([[0, 1, 0], [0, 3, 0]])
    src = rng.standard_normal((2, 3)).astype(np.float32)
    args = (nbx.asarray(x), 0, nbx.asarray(idx), nbx.asarray(src))
    np.testing.assert_array_equal(nbx.scatter_add(*args).numpy(), nbx.scatter(*args, reduce="sum").numpy())
    np.testing.assert_array_equal(nbx.scatter_reduce(*args, "amax", include_self=False).numpy(),
                                  nbx.scatter(*args, reduce="amax", include_self=False).numpy())
    expected = x.astype(np.float64).copy()
    np.add.at(expected, (idx, np.arange(3)[None].repeat(2, 0)), src)
    np.testing.assert_allclose(nbx.scatter_add(*args).numpy(), expected, rtol=1e-6)
    with pytest.raises(ArgumentError):
        nbx.scatter_reduce(*args, "add")  # torch's scatter_reduce names no "add"
