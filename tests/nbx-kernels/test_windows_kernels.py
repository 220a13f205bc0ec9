"""The windows front-ends (ops/windows.py: views, pad, zeros, the strided copy, add) on the kernels'
devices, against float64 loops of their definitions at the device file's tolerance."""
import numpy as np
import pytest

import nbx.core as nbx
from test_sort_select import requested_bytes  # the allocation recorder of the sort family's cost test
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


def test_the_declared_costs_of_the_copying_front_ends_are_their_allocations(device, monkeypatch):
    from nbx.kernels.cost import price
    asked = requested_bytes(device, monkeypatch)
    x = nbx.asarray(rng.standard_normal((2, 8, 3, 5)).astype(np.float32)).to(device)
    for op, args in (("pixel_shuffle", (x, 2)), ("pixel_shuffle", (x, 1)), ("pixel_unshuffle", (x, 1)),
                     ("pixel_shuffle", (x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), 2)),
                     ("diag_embed", (x[0, 0], 1, 0, 2)), ("unfold", (x, 2)), ("unfold", (x, 1))):
        cost = price(op, *args)
        asked.clear()
        getattr(nbx, op)(*args)
        assert sorted(asked) == sorted(b.nbytes for b in cost.buffers), (op, asked, cost.buffers)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_folds_declared_peak_is_the_padded_sum_and_the_larger_of_a_taps_temporaries_and_the_output(
        device, monkeypatch, dtype):
    from nbx.kernels.cost import price
    asked = requested_bytes(device, monkeypatch)
    cols = nbx.asarray(rng.standard_normal((2, 4, 16)).astype(np.float32)).to(dtype=getattr(nbx, dtype)).to(device)
    cost = price("fold", cols, (3, 3), 2, 1, 1)
    asked.clear()
    nbx.fold(cols, (3, 3), 2, 1, 1)  # padding 1: cropped, so an output is made
    per_tap = 2 if dtype == "float16" else 1  # the tap cast to float32, then the add
    padded, temporaries, out = asked[0], asked[1:1 + 4 * per_tap], asked[1 + 4 * per_tap:]
    assert len(out) == 1 and len(temporaries) == 4 * per_tap
    assert cost.allocated == padded + max(sum(temporaries[:per_tap]), out[0])
