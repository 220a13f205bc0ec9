"""Collapsing an elementwise launch's operands to the fewest dims the kernel indexes.

Adjacent dims merge when every operand walks them as one (stride[i] == stride[i+1] * size[i+1]);
size-1 dims vanish. What is left is padded to MAX_RANK dims with size 1 in front, so one kernel
serves any rank up to MAX_RANK without a contiguous copy of any operand.
"""
from __future__ import annotations

MAX_RANK = 4


def collapse(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    dims = [(size, [s[i] for s in strides]) for i, size in enumerate(shape) if size != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, st in dims:
        if merged:
            prev_size, prev_st = merged[-1]
            if all(p == c * size for p, c in zip(prev_st, st)):
                merged[-1] = (prev_size * size, st)
                continue
        merged.append((size, st))
    new_shape = tuple(size for size, _ in merged)
    new_strides = [tuple(st[k] for _, st in merged) for k in range(len(strides))]
    return new_shape, new_strides


def padded(shape: tuple[int, ...], strides: list[tuple[int, ...]]):
    """Shape and strides padded to MAX_RANK dims, or None when more dims remain after collapsing."""
    shape, strides = collapse(shape, strides)
    if len(shape) > MAX_RANK:
        return None
    lead = MAX_RANK - len(shape)
    return (1,) * lead + shape, [(0,) * lead + st for st in strides]


def is_dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Row-major dense over shape: the kernel may index it with the linear index itself."""
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True
