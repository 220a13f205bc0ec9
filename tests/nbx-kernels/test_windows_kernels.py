"""The windows front-ends (ops/windows.py: views, pad, zeros, the strided copy, add) on the kernels'
devices, against float64 loops of their definitions at the device file's tolerance."""
import numpy as np
import pytest

import nbx.core as nbx
from window_references import col2im, diag_embed, im2col, pixel_shuffle

rng = np.random.default_rng(71)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_unfold_then_fold_match_im2col_and_col2im_with_padding_dilation_and_stride(device, check, dtype):
    frame = ((3, 2), (2, 1), (1, 1), (2, 1))  # kernel, dilation, padding, stride: windows overlap in W
    a = rng.standard_normal((1, 2, 7, 5)).astype(np.float32)
    x = nbx.asarray(a).to(dtype=getattr(nbx, dtype))
    exact = x.to(dtype=nbx.float64).numpy()
    cols = nbx.unfold(x.to(device), *frame)
    check(cols, im2col(exact, *frame), device)
    out = nbx.fold(cols, (7, 5), *frame)
    assert out.dtype is x.dtype
    check(out, col2im(im2col(exact, *frame), (7, 5), *frame), device)


def test_diag_embed_pixel_shuffle_sliding_windows_and_counts_alone_on_the_device(device, check):
    v = rng.standard_normal((2, 3)).astype(np.float32)
    check(nbx.diag_embed(nbx.asarray(v).to(device), -1, 0, 2), diag_embed(v.astype(np.float64), -1, 0, 2), device)
    a = rng.standard_normal((1, 8, 3, 5)).astype(np.float32)
    shuffled = nbx.pixel_shuffle(nbx.asarray(a).to(device), 2)
    check(shuffled, pixel_shuffle(a.astype(np.float64), 2), device)
    check(nbx.pixel_unshuffle(shuffled, 2), a.astype(np.float64), device)
    s = np.arange(13, dtype=np.float32)
    check(nbx.asarray(s).to(device).unfold(0, 4, 3).contiguous(),
          np.lib.stride_tricks.sliding_window_view(s, 4)[::3].astype(np.float64), device)
    counts = np.array([1, 0, 3])
    check(nbx.repeat_interleave(nbx.asarray(counts).to(device)), np.repeat(np.arange(3), counts), device)
