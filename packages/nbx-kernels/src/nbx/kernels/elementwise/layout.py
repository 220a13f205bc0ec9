"""Collapsing an elementwise launch's operands to the fewest dims the kernel indexes.

Adjacent dims merge when every operand walks them as one (stride[i] == stride[i+1] * size[i+1]);
size-1 dims vanish. What is left is padded to MAX_RANK dims with size 1 in front, so one kernel
serves any rank up to MAX_RANK without a contiguous copy of any operand.
"""
from __future__ import annotations

from nbx.core.layout import collapse_dims as collapse

MAX_RANK = 4


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
