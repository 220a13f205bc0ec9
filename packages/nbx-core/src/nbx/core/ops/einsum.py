"""einsum: numpy's subscripts (torch's spelling too: the operands may come as one list) over
nbx's ops: a repeated index inside an operand is its diagonal (a view), a dim of size 1 broadcasts
against a longer one (dropped from that operand), and the operands are contracted left to right,
two at a time, each pair by permuting, reshaping and one matmul; an intermediate keeps the indices
that later operands or the output name. Half types therefore round once a pair (the reference,
numpy's einsum in float32 for them, once in all)."""
from __future__ import annotations

import math

import numpy as np

from .. import reference
from ..errors import ArgumentError, ShapeError
from ..promotion import result_type
from ..tensor import Tensor
from .linalg import matmul
from .products import _compute, _host, _tensors


# ---- einsum ----------------------------------------------------------------------------------
def _parse(subscripts: str, operands) -> tuple[list[str], str]:
    if not isinstance(subscripts, str):
        raise ArgumentError(f"einsum's subscripts are a string, got {type(subscripts).__name__}")
    spec = subscripts.replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands) or not operands:
        raise ArgumentError(f"einsum {subscripts!r}: {len(terms)} terms for {len(operands)} operands")
    broadcast = ""   # the letters standing for the ellipsis's dims, as the widest operand names them
    if "." in spec:
        width = max((t.ndim for t in operands), default=0)
        free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in spec][:width]
        terms = [_expand_ellipsis(term, t.ndim, free) for term, t in zip(terms, operands, strict=True)]
        broadcast = "".join(c for c in max(terms, key=lambda term: sum(c in free for c in term)) if c in free)
        if arrow:
            output = output.replace("...", broadcast)
    for term, t in zip(terms, operands, strict=True):
        if not term.isalpha() or len(term) != t.ndim:
            raise ShapeError(f"einsum term {term!r} does not name the {t.ndim} dims of an operand of shape {t.shape}")
    if not arrow:  # numpy's implicit output: the ellipsis's dims, then the indices seen once, sorted
        joined = "".join(terms)
        output = broadcast + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in broadcast))
    if len(set(output)) != len(output) or any(c not in "".join(terms) for c in output):
        raise ArgumentError(f"einsum output {output!r} repeats an index or names one no operand has")
    return terms, output


def _expand_ellipsis(term: str, ndim: int, free: list[str]) -> str:
    if "..." not in term:
        return term
    named = len(term) - 3
    return term.replace("...", "".join(free[len(free) - (ndim - named):]) if ndim > named else "")


def _diagonals(t: Tensor, term: str) -> tuple[Tensor, str]:
    """An index repeated inside one operand ("ii", "bii->bi") reads its diagonal: a view."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i, j = term.index(c), term.index(c, term.index(c) + 1)
        if t.shape[i] != t.shape[j]:
            raise ShapeError(f"einsum term {term!r} repeats index {c!r} over dims of sizes {t.shape[i]} and {t.shape[j]}")
        t, term = t.diagonal(0, i, j), "".join(x for k, x in enumerate(term) if k not in (i, j)) + c
    return t, term


def _sizes(terms, operands) -> dict[str, int]:
    """Each index's size; a size of 1 broadcasts against any other, as numpy's and torch's einsum."""
    sizes: dict[str, int] = {}
    for term, t in zip(terms, operands, strict=True):
        for c, s in zip(term, t.shape, strict=True):
            known = sizes.setdefault(c, s)
            if known != s and 1 not in (known, s):
                raise ShapeError(f"einsum index {c!r} has sizes {known} and {s}")
            sizes[c] = max(known, s)
    return sizes


def _unbroadcast(t: Tensor, term: str, sizes: dict) -> tuple[Tensor, str]:
    """A dim of size 1 that broadcasts against a longer one is dropped: the operand does not vary along it."""
    ones = [i for i, c in enumerate(term) if t.shape[i] == 1 and sizes[c] > 1]
    if not ones:
        return t, term
    return (t.reshape(*(n for i, n in enumerate(t.shape) if i not in ones)),
            "".join(c for i, c in enumerate(term) if i not in ones))


def _sum_out(t: Tensor, term: str, keep: set) -> tuple[Tensor, str]:
    """t with the indices not in keep summed away."""
    gone = [i for i, c in enumerate(term) if c not in keep]
    if not gone:
        return t, term
    from .reductions import sum as sum_
    return sum_(t, dim=tuple(gone)), "".join(c for c in term if c in keep)


def _contract(a: Tensor, ta: str, b: Tensor, tb: str, output: str, sizes: dict) -> Tensor:
    """Two operands into output's indices: batch, left, inner and right indices through one matmul."""
    a, ta = _sum_out(a, ta, set(output) | set(tb))
    b, tb = _sum_out(b, tb, set(output) | set(ta))
    batch = [c for c in output if c in ta and c in tb]
    left = [c for c in output if c in ta and c not in tb]
    right = [c for c in output if c in tb and c not in ta]
    inner = [c for c in ta if c in tb and c not in output]
    mat_a = a.permute([ta.index(c) for c in batch + left + inner]).reshape(
        *(sizes[c] for c in batch), math.prod(sizes[c] for c in left), math.prod(sizes[c] for c in inner))
    mat_b = b.permute([tb.index(c) for c in batch + inner + right]).reshape(
        *(sizes[c] for c in batch), math.prod(sizes[c] for c in inner), math.prod(sizes[c] for c in right))
    product = matmul(mat_a, mat_b).reshape(*(sizes[c] for c in batch + left + right))
    order = batch + left + right
    return product.permute([order.index(c) for c in output])


def _einsum_operands(operands) -> tuple:
    """torch's spelling einsum(eq, [a, b]) as well as numpy's einsum(eq, a, b)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        return tuple(operands[0])
    return operands


def einsum(subscripts: str, *operands: Tensor) -> Tensor:
    """numpy's einsum (torch's too: operands may come as one list): diagonals of repeated indices
    as views, size-1 dims broadcast, then the operands contracted left to right, two at a time,
    each pair through one matmul (an intermediate keeps the indices later operands or the output
    name)."""
    operands = _einsum_operands(operands)
    for i, t in enumerate(operands):
        _tensors("einsum", **{f"operand {i}": t})
    terms, output = _parse(subscripts, operands)
    pairs = [_diagonals(t, term) for t, term in zip(operands, terms, strict=True)]
    sizes = _sizes([term for _, term in pairs], [t for t, _ in pairs])
    pairs = [_unbroadcast(t, term, sizes) for t, term in pairs]
    if len(pairs) == 1:
        t, term = _sum_out(*pairs[0], set(output))
        return t.permute([term.index(c) for c in output])
    while len(pairs) > 1:
        (a, ta), (b, tb), rest = pairs[0], pairs[1], pairs[2:]
        later = set(output).union(*(term for _, term in rest))
        kept = output if not rest else "".join(c for c in dict.fromkeys(ta + tb) if c in later)
        pairs = [(_contract(a, ta, b, tb, kept, sizes), kept), *rest]
    return pairs[0][0]


def _einsum_reference(subscripts, *operands, precision=reference.NATIVE):
    operands = _einsum_operands(operands)
    compute = _compute(result_type(*operands), precision)
    return np.einsum(subscripts, *(_host(t, compute) for t in operands))


reference.register("einsum", _einsum_reference)


__all__ = ["einsum"]
