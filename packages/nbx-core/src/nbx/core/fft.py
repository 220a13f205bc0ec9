"""nbx.fft: discrete Fourier transforms, spelled as torch.fft.

fft, ifft, rfft, irfft (n, dim, norm), fft2, ifft2, rfft2, irfft2 (s, dim=(-2, -1), norm) and the
n-D fftn, ifftn, rfftn, irfftn (s, dim, norm), any length; fftfreq and rfftfreq (made on the host),
fftshift and ifftshift (dim=None: every dim; a roll, so every device and dtype roll takes). norm is 'backward' (None), 'ortho' or
'forward' as torch and numpy define them. Real inputs of float32 (and the half types, computed in
float32) give complex64, float64 gives complex128; integer and bool inputs compute in the default
float dtype. Every transform reaches one of four ops (fftn, ifftn, rfftn, irfftn) with normalized
sizes and dims; the CPU computes them with numpy's pocketfft in the input's precision. On Triton
devices nbx.kernels.fft computes complex64 (and real float32 / half) transforms; float64 and
complex128 ones are refused there by name (NotSupportedError). The four ops have specs
(nbx.core.spec: x, sizes, dims, norm), so a repeated call of one signature takes the spec's fast
path.
"""
from __future__ import annotations

import numpy as np

from . import dtypes, layout, reference
from .dispatch import register
from .errors import ArgumentError, DTypeError, ShapeError
from .ops._common import wrap
from .spec import OpSpec, define, params
from .tensor import Tensor

NORMS = ("backward", "ortho", "forward")
_COMPLEX_OF = {"float32": dtypes.complex64, "float64": dtypes.complex128}
_REAL_OF = {"complex64": dtypes.float32, "complex128": dtypes.float64}


def _norm(norm) -> str:
    norm = "backward" if norm is None else norm
    if norm not in NORMS:
        raise ArgumentError(f"fft norm {norm!r} is none of {NORMS}")
    return norm


def complex_dtype(dtype) -> dtypes.DType:
    """The complex dtype a transform of dtype computes in (half types and integers in complex64)."""
    if dtype.kind == "complex":
        return dtype
    return _COMPLEX_OF.get(dtype.name, dtypes.complex64)


def real_dtype(dtype) -> dtypes.DType:
    return _REAL_OF[complex_dtype(dtype).name]


def _sizes_and_dims(op: str, x: Tensor, s, dim):
    """The transform's sizes (None: the input's) and dims (None: the last len(s), or every dim)."""
    if dim is None:
        dims = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(layout.normalize_dim(d, x.ndim) for d in dims)
    if len(set(dims)) != len(dims) or not dims:
        raise ArgumentError(f"{op}: dims {dim!r} must be distinct and at least one")
    if s is not None:
        s = (s,) if isinstance(s, int) else tuple(s)
        if len(s) != len(dims):
            raise ArgumentError(f"{op}: s {s} and dims {dims} differ in length")
        s = tuple(x.shape[d] if n == -1 else int(n) for d, n in zip(dims, s))
    return s, dims


def _transform(op: str, x: Tensor, s, dim, norm) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: input must be a tensor, got {type(x).__name__}")
    if op.startswith("r") and x.dtype.kind == "complex":
        raise DTypeError(f"{op} takes a real input, got {x.dtype.name}")
    if x.dtype.kind not in ("float", "complex"):
        x = x.to(dtype=dtypes.DEFAULT_FLOAT)
    s, dims = _sizes_and_dims(op, x, s, dim)
    last = s[-1] if s is not None else None
    if op == "irfftn":
        last = last if last is not None else 2 * (x.shape[dims[-1]] - 1)
    sizes = s or tuple(x.shape[d] for d in dims)
    if op == "irfftn":
        sizes = sizes[:-1] + (last,)
    if any(n < 1 for n in sizes):
        raise ShapeError(f"{op}: transform sizes {sizes} over dims {dims} of shape {x.shape} must be positive")
    return _SPECS[op].call(x, sizes, dims, _norm(norm))


def _check(call, facts) -> None:
    """What a transform's normalized call derives: its device and its result's dtype."""
    x = call.x
    facts.device = x.device
    facts.out_dtype = real_dtype(x.dtype) if call.spec.name == "irfftn" else complex_dtype(x.dtype)


def fft(input, n=None, dim=-1, norm=None):
    return _transform("fftn", input, None if n is None else (n,), (dim,), norm)


def ifft(input, n=None, dim=-1, norm=None):
    return _transform("ifftn", input, None if n is None else (n,), (dim,), norm)


def rfft(input, n=None, dim=-1, norm=None):
    return _transform("rfftn", input, None if n is None else (n,), (dim,), norm)


def irfft(input, n=None, dim=-1, norm=None):
    return _transform("irfftn", input, None if n is None else (n,), (dim,), norm)


def fft2(input, s=None, dim=(-2, -1), norm=None):
    return _transform("fftn", input, s, dim, norm)


def ifft2(input, s=None, dim=(-2, -1), norm=None):
    return _transform("ifftn", input, s, dim, norm)


def rfft2(input, s=None, dim=(-2, -1), norm=None):
    return _transform("rfftn", input, s, dim, norm)


def irfft2(input, s=None, dim=(-2, -1), norm=None):
    return _transform("irfftn", input, s, dim, norm)


def fftn(input, s=None, dim=None, norm=None):
    return _transform("fftn", input, s, dim, norm)


def ifftn(input, s=None, dim=None, norm=None):
    return _transform("ifftn", input, s, dim, norm)


def rfftn(input, s=None, dim=None, norm=None):
    return _transform("rfftn", input, s, dim, norm)


def irfftn(input, s=None, dim=None, norm=None):
    return _transform("irfftn", input, s, dim, norm)


def rfftfreq(n: int, d: float = 1.0, dtype=None, device=None) -> Tensor:
    """The sample frequencies of rfft's bins (torch.fft.rfftfreq)."""
    from .tensor import from_numpy
    dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    return from_numpy(np.fft.rfftfreq(int(n), d).astype(dt.host), device)


def fftfreq(n: int, d: float = 1.0, dtype=None, device=None) -> Tensor:
    """The sample frequencies of fft's bins, the negative ones last (torch.fft.fftfreq)."""
    from .tensor import from_numpy
    dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    return from_numpy(np.fft.fftfreq(int(n), d).astype(dt.host), device)


def _shift(op: str, x: Tensor, dim, sign: int) -> Tensor:
    from .ops.datamove import roll
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: input must be a tensor, got {type(x).__name__}")
    dims = tuple(range(x.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(layout.normalize_dim(d, x.ndim) for d in dims)
    if not dims:
        return x
    return roll(x, tuple(sign * (x.shape[d] // 2) for d in dims), axis=dims)


def fftshift(input, dim=None):
    """The zero-frequency bin moved to the centre of each dim (torch.fft.fftshift: a roll by n // 2)."""
    return _shift("fftshift", input, dim, 1)


def ifftshift(input, dim=None):
    """The inverse of fftshift (a roll by -(n // 2): they differ for odd n)."""
    return _shift("ifftshift", input, dim, -1)


_NUMPY = {"fftn": np.fft.fftn, "ifftn": np.fft.ifftn, "rfftn": np.fft.rfftn, "irfftn": np.fft.irfftn}


def _reference(op: str):
    def ref(x, sizes, dims, norm="backward", precision=reference.NATIVE):
        wide = precision == reference.FLOAT64
        if op == "irfftn" or x.dtype.kind == "complex":
            host = np.complex128 if wide else complex_dtype(x.dtype).host
        else:
            host = np.float64 if wide else real_dtype(x.dtype).host
        return _NUMPY[op](x.numpy().astype(host, copy=False), s=sizes, axes=dims, norm=norm)
    return ref


def _register(op: str) -> None:
    ref = _reference(op)
    reference.register(op, ref)

    def cpu(call):
        return wrap(ref(call.x, call.sizes, call.dims, call.norm), call.out_dtype)
    register(op, "cpu")(cpu)


_SPECS = {op: define(OpSpec(op, params("x", "sizes", "dims", "norm"), _check,
                            doc=f"{op} of x over dims, sizes points each (normalized by nbx.fft's front-ends)"))
          for op in _NUMPY}
for _op in _NUMPY:
    _register(_op)

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift", "NORMS"]
