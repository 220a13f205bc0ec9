"""nbx.linalg: the Array API's linear-algebra extension, as far as inference needs it.

matmul, matrix_transpose, vecdot, vector_norm and matrix_norm ("fro", 1, -1, inf, -inf) run on
every backend through nbx's ops. The factorisations (solve, inv, cholesky) and the norms that need
singular values ("nuc", 2, -2) run on the CPU only (numpy's LAPACK, float32 for half types): on
any other device they are refused by name (NotSupportedError), since no kernel computes them;
copy the operand to the CPU with .cpu() first.
"""
from __future__ import annotations

import math

import numpy as np

from . import reference
from .errors import ArgumentError, NotSupportedError, ShapeError
from .ops import matmul, vector_norm
from .ops._common import check_category, compute_dtype, oracle_dtype, wrap
from .ops.reductions import sum as _sum
from .tensor import Tensor

CPU_ONLY = ("solve", "inv", "cholesky", "matrix_norm(ord='nuc', 2 or -2)")


def matrix_transpose(x: Tensor) -> Tensor:
    return x.mT


def vecdot(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """sum(x1 * x2) over axis (real dtypes: the conjugate is the identity)."""
    return _sum(x1 * x2, dim=axis)


def _square(op: str, x: Tensor) -> None:
    if not isinstance(x, Tensor) or x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"{op} takes a stack of square matrices, got shape {getattr(x, 'shape', None)}")
    check_category(op, x.dtype, "real_floating")


def _on_cpu(op: str, x: Tensor) -> None:
    if x.device.type != "cpu":
        raise NotSupportedError(f"linalg.{op} runs on the CPU only (no {x.device.type} kernel computes it); "
                                f"call it on x.cpu()")


def _host(x: Tensor, precision=reference.NATIVE) -> np.ndarray:
    compute = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    return x.numpy().astype(compute, copy=False)


def _lapack(op: str, fn, *operands: Tensor) -> Tensor:
    for x in operands:
        _on_cpu(op, x)
    try:
        return wrap(fn(*(_host(x) for x in operands)), operands[0].dtype)
    except np.linalg.LinAlgError as exc:
        raise ArgumentError(f"linalg.{op}: {exc}") from None


def inv(x: Tensor) -> Tensor:
    _square("inv", x)
    return _lapack("inv", np.linalg.inv, x)


def cholesky(x: Tensor, /, *, upper: bool = False) -> Tensor:
    """The lower (upper: upper) Cholesky factor of a symmetric positive-definite matrix."""
    _square("cholesky", x)
    factor = _lapack("cholesky", np.linalg.cholesky, x)
    return factor.mT.contiguous() if upper else factor


def solve(x1: Tensor, x2: Tensor) -> Tensor:
    """X with x1 @ X = x2; x2 a stack of matrices, or one vector (the standard's rule)."""
    _square("solve", x1)
    if not isinstance(x2, Tensor) or x2.ndim < 1 or (x2.shape[-2] if x2.ndim > 1 else x2.shape[0]) != x1.shape[-1]:
        raise ShapeError(f"solve of {x1.shape} with {getattr(x2, 'shape', None)}: the rows differ")
    if x1.dtype is not x2.dtype:
        raise ArgumentError(f"solve takes operands of one dtype, got {x1.dtype.name} and {x2.dtype.name}")
    if x2.ndim == 1:
        return _lapack("solve", lambda a, b: np.linalg.solve(a, b[..., None])[..., 0], x1, x2)
    return _lapack("solve", np.linalg.solve, x1, x2)


def matrix_norm(x: Tensor, /, *, keepdims: bool = False, ord="fro") -> Tensor:
    """The norm of each matrix of the last two dims: 'fro', 1/-1 (max/min column sum), inf/-inf
    (max/min row sum) on every backend; 'nuc', 2, -2 (singular values) on the CPU."""
    if not isinstance(x, Tensor) or x.ndim < 2:
        raise ShapeError(f"matrix_norm takes a stack of matrices, got shape {getattr(x, 'shape', None)}")
    check_category("matrix_norm", x.dtype, "floating")
    if ord == "fro":
        return vector_norm(x, 2, dim=(-2, -1), keepdim=keepdims)
    if ord in ("nuc", 2, -2):
        _on_cpu(f"matrix_norm(ord={ord!r})", x)
        return wrap(_matrix_norm_reference(x, keepdims, ord), x.dtype)
    if ord not in (1, -1, math.inf, -math.inf):
        raise ArgumentError(f"matrix_norm's ord is 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}")
    if 0 in x.shape[-2:]:
        raise ShapeError(f"matrix_norm of ord {ord} over an empty matrix (shape {x.shape}) has no identity")
    summed = vector_norm(x, 1, dim=-2 if abs(ord) == 1 else -1, keepdim=True)
    from .ops import max as max_, min as min_
    pick = max_ if ord > 0 else min_
    out = pick(summed, dim=-1 if abs(ord) == 1 else -2, keepdim=True)
    return out if keepdims else out.squeeze(-1).squeeze(-1)


def _matrix_norm_reference(x, keepdims=False, ord="fro", precision=reference.NATIVE):
    out = np.linalg.norm(_host(x, precision), ord=ord, axis=(-2, -1), keepdims=keepdims)
    return np.asarray(out)


reference.register("matrix_norm", _matrix_norm_reference)

__all__ = ["matmul", "matrix_transpose", "vecdot", "vector_norm", "matrix_norm", "solve", "inv", "cholesky",
           "CPU_ONLY"]
