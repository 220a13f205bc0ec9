"""Pooling, spelled as torch.nn.functional: max_pool1d/2d/3d (dilation, ceil_mode, return_indices),
avg_pool1d/2d/3d (ceil_mode, count_include_pad, divisor_override), adaptive_avg_pool1d/2d/3d and
adaptive_max_pool1d/2d/3d (output_size entries None keep the input's size).

Input (N, C, *S) or unbatched (C, *S). Max indices are int64 positions in the flattened spatial
plane of each channel, as torch's. Windows start at o * stride - padding; with ceil_mode a last
window that would start in the right padding is dropped (torch's rule).
"""
from __future__ import annotations

import numpy as np

from .. import reference
from ..dispatch import implementation, register
from ..dtypes import int64
from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor
from ._common import check_category, compute_dtype, oracle_dtype, wrap
from .conv import spatial_tuple


def pool_out_size(size: int, k: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    span = size + 2 * pad - dilation * (k - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _check_input(op: str, n: int, x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: input must be a tensor, got {type(x).__name__}")
    check_category(op, x.dtype, "real_floating")
    if x.ndim not in (n + 1, n + 2):
        raise ShapeError(f"{op} takes input (N, C, *{n} dims) or unbatched (C, *{n} dims), got shape {x.shape}")


def pool_args(op: str, n: int, x: Tensor, kernel_size, stride, padding, dilation, ceil_mode: bool):
    """(kernel, stride, padding, dilation, output sizes), checked as torch checks them."""
    kernel = spatial_tuple(kernel_size, n, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else spatial_tuple(stride, n, "stride")
    padding = spatial_tuple(padding, n, "padding", 0)
    dilation = spatial_tuple(dilation, n, "dilation")
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ArgumentError(f"{op}: padding {padding} must be at most half the kernel size {kernel}")
    sizes = x.shape[-n:]
    outs = tuple(pool_out_size(sizes[d], kernel[d], stride[d], padding[d], dilation[d], bool(ceil_mode))
                 for d in range(n))
    if any(o < 1 for o in outs):
        raise ShapeError(f"{op}: input {tuple(sizes)} with kernel {kernel}, padding {padding} and dilation "
                         f"{dilation} gives no output ({outs})")
    return kernel, stride, padding, dilation, outs


def _max_pool_front_end(n: int):
    op = f"max_pool{n}d"

    def max_pool(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
                 return_indices: bool = False):
        _check_input(op, n, input)
        kernel, stride, padding, dilation, _ = pool_args(op, n, input, kernel_size, stride, padding, dilation, ceil_mode)
        out, indices = implementation(op, input.device)(input, kernel, stride, padding, dilation, bool(ceil_mode))
        return (out, indices) if return_indices else out
    max_pool.__name__ = max_pool.__qualname__ = op
    max_pool.__doc__ = f"torch.nn.functional.{op}: the maximum of each window (NaN wins), with its index if asked."
    return max_pool


def _avg_pool_front_end(n: int):
    op = f"avg_pool{n}d"

    def avg_pool(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
        _check_input(op, n, input)
        kernel, stride, padding, _, _ = pool_args(op, n, input, kernel_size, stride, padding, 1, ceil_mode)
        if divisor_override is not None and int(divisor_override) == 0:
            raise ArgumentError(f"{op}: divisor_override must not be zero")
        divisor = None if divisor_override is None else int(divisor_override)
        return implementation(op, input.device)(input, kernel, stride, padding, bool(ceil_mode),
                                                bool(count_include_pad), divisor)
    avg_pool.__name__ = avg_pool.__qualname__ = op
    avg_pool.__doc__ = f"torch.nn.functional.{op}: the mean of each window."
    return avg_pool


def adaptive_sizes(op: str, n: int, x: Tensor, output_size) -> tuple[int, ...]:
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        output_size = (output_size,) * n
    sizes = tuple(x.shape[-n:][d] if s is None else int(s) for d, s in enumerate(output_size))
    if len(sizes) != n or any(s < 1 for s in sizes):
        raise ArgumentError(f"{op}: output_size {output_size!r} needs {n} positive sizes")
    if any(s == 0 for s in x.shape[-n:]):
        raise ShapeError(f"{op}: an empty spatial dim in input {x.shape}")
    return sizes


def adaptive_window(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Each output's window [start, end) of an adaptive pool: floor(o * size / out) to
    ceil((o + 1) * size / out)."""
    o = np.arange(out)
    return (o * size) // out, -((-(o + 1) * size) // out)


def _adaptive_front_end(n: int, kind: str):
    op = f"adaptive_{kind}_pool{n}d"

    def adaptive(input: Tensor, output_size, return_indices: bool = False):
        _check_input(op, n, input)
        sizes = adaptive_sizes(op, n, input, output_size)
        result = implementation(op, input.device)(input, sizes)
        if kind == "avg":
            return result
        return result if return_indices else result[0]
    if kind == "avg":
        def adaptive_avg(input: Tensor, output_size) -> Tensor:
            return adaptive(input, output_size)
        fn = adaptive_avg
    else:
        fn = adaptive
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"torch.nn.functional.{op}: {kind} pooling to output_size, windows spread over the input."
    return fn


max_pool1d, max_pool2d, max_pool3d = (_max_pool_front_end(n) for n in (1, 2, 3))
avg_pool1d, avg_pool2d, avg_pool3d = (_avg_pool_front_end(n) for n in (1, 2, 3))
adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d = (_adaptive_front_end(n, "avg") for n in (1, 2, 3))
adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d = (_adaptive_front_end(n, "max") for n in (1, 2, 3))


# ---- references: every window gathered through index arrays (invalid taps masked) ----------------

def _compute(x: Tensor, precision) -> np.ndarray:
    dtype = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    return x.numpy().astype(dtype, copy=False)


def _gather(a: np.ndarray, taps: list[np.ndarray]):
    """a (..., *S) at taps[d] (O_d, K_d) per spatial dim -> values (..., *O, *K) and validity."""
    n = len(taps)
    index, valid = [], None
    for d, t in enumerate(taps):
        shape = [1] * (2 * n)
        shape[d], shape[n + d] = t.shape
        ok = ((t >= 0) & (t < a.shape[a.ndim - n + d])).reshape(shape)
        index.append(np.clip(t, 0, a.shape[a.ndim - n + d] - 1).reshape(shape))
        valid = ok if valid is None else valid & ok
    values = a[(Ellipsis, *index)]
    return values, np.broadcast_to(valid, values.shape[-2 * n:]), index


def _flat_index(index: list[np.ndarray], sizes) -> np.ndarray:
    flat = 0
    for d, i in enumerate(index):
        flat = flat * sizes[d] + i
    return flat


def _max_of(values, valid, index, sizes, n):
    """The max over the trailing n tap dims (NaN wins, the first maximum's index)."""
    lead = values.shape[:-n]
    flat_values = np.where(valid, values, -np.inf).reshape(*lead, -1)
    taps = np.broadcast_to(_flat_index(index, sizes), values.shape[-2 * n:]).reshape(*values.shape[-2 * n:-n], -1)
    nan = np.isnan(flat_values)
    pick = np.where(nan.any(-1), np.argmax(nan, -1), np.argmax(flat_values, -1))
    out = np.take_along_axis(flat_values, pick[..., None], -1)[..., 0]
    idx = np.take_along_axis(np.broadcast_to(taps, flat_values.shape), pick[..., None], -1)[..., 0]
    return out, idx


def _window_taps(out: int, k: int, stride: int, pad: int, dilation: int) -> np.ndarray:
    return np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dilation


def _max_pool_reference(n: int):
    def ref(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=True,
            precision=reference.NATIVE):
        kernel, stride, padding, dilation, outs = pool_args(f"max_pool{n}d", n, x, kernel_size, stride, padding,
                                                            dilation, ceil_mode)
        a = _compute(x, precision)
        taps = [_window_taps(outs[d], kernel[d], stride[d], padding[d], dilation[d]) for d in range(n)]
        values, valid, index = _gather(a, taps)
        out, idx = _max_of(values, valid, index, a.shape[-n:], n)
        return (out, idx.astype(np.int64)) if return_indices else out
    return ref


def _avg_pool_reference(n: int):
    def ref(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None,
            precision=reference.NATIVE):
        kernel, stride, padding, _, outs = pool_args(f"avg_pool{n}d", n, x, kernel_size, stride, padding, 1, ceil_mode)
        a = _compute(x, precision)
        taps = [_window_taps(outs[d], kernel[d], stride[d], padding[d], 1) for d in range(n)]
        values, valid, _ = _gather(a, taps)
        axes = tuple(range(-n, 0))
        total = np.sum(np.where(valid, values, 0), axis=axes)
        if divisor_override is not None:
            return total / divisor_override
        if count_include_pad:  # the window clipped to the padded input, not to the input
            count = 1
            for d in range(n):
                t = taps[d]
                inside = (t < a.shape[a.ndim - n + d] + padding[d]).sum(-1)
                count = np.multiply.outer(count, inside) if d else inside
        else:
            count = valid.reshape(*valid.shape[:n], -1).sum(-1)
        return total / count
    return ref


def _adaptive_taps(size: int, out: int):
    start, end = adaptive_window(size, out)
    width = int((end - start).max())
    taps = start[:, None] + np.arange(width)[None, :]
    return np.where(taps < end[:, None], taps, -1)


def _adaptive_reference(n: int, kind: str):
    def ref(x, output_size, precision=reference.NATIVE):
        sizes = adaptive_sizes(f"adaptive_{kind}_pool{n}d", n, x, output_size)
        a = _compute(x, precision)
        taps = [_adaptive_taps(a.shape[a.ndim - n + d], sizes[d]) for d in range(n)]
        values, valid, index = _gather(a, taps)
        if kind == "max":
            out, idx = _max_of(values, valid, index, a.shape[-n:], n)
            return out, idx.astype(np.int64)
        axes = tuple(range(-n, 0))
        return np.sum(np.where(valid, values, 0), axis=axes) / valid.sum(axis=axes)
    return ref


def _register_pair(op: str, ref) -> None:
    reference.register(op, ref)

    def cpu(x, *args):
        out, idx = ref(x, *args)
        return wrap(out, x.dtype), wrap(idx, int64)
    register(op, "cpu")(cpu)


for _n in (1, 2, 3):
    _register_pair(f"max_pool{_n}d", _max_pool_reference(_n))
    _register_pair(f"adaptive_max_pool{_n}d", _adaptive_reference(_n, "max"))
    for _op, _ref in ((f"avg_pool{_n}d", _avg_pool_reference(_n)), (f"adaptive_avg_pool{_n}d",
                                                                    _adaptive_reference(_n, "avg"))):
        reference.register(_op, _ref)
        register(_op, "cpu")(lambda x, *args, _ref=_ref: wrap(_ref(x, *args), x.dtype))

__all__ = [f"{kind}_pool{n}d" for kind in ("max", "avg", "adaptive_avg", "adaptive_max") for n in (1, 2, 3)]
