"""Shape functions at the top level, beside the Tensor methods they call: the Array API spellings.

    nbx.reshape(x, (2, -1)), nbx.permute_dims(x, (1, 0)), nbx.expand_dims(x, axis=0),
    nbx.broadcast_to(x, (4, 3))
"""
from __future__ import annotations

from ..tensor import Tensor


def reshape(x: Tensor, /, shape, *, copy: bool | None = None) -> Tensor:
    """x with a new shape: a view when the layout allows, else a copy; copy=False refuses the copy
    (ViewError), copy=True always copies."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if copy is False:
        return x.view(*shape)
    out = x.reshape(*shape)
    return out.clone() if copy and out.storage is x.storage else out


def permute_dims(x: Tensor, /, axes) -> Tensor:
    """A view of x with its dims in the order axes (torch's x.permute)."""
    return x.permute(axes)


def expand_dims(x: Tensor, /, *, axis: int = 0) -> Tensor:
    """A view of x with a new dim of size 1 at axis (torch's x.unsqueeze)."""
    return x.unsqueeze(axis)


def broadcast_to(x: Tensor, /, shape) -> Tensor:
    """A view of x broadcast to shape (stride 0 along the broadcast dims; torch's x.expand)."""
    return x.broadcast_to(shape)


__all__ = ["reshape", "permute_dims", "expand_dims", "broadcast_to"]
