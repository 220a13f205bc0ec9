"""Python operators and method forms on Tensor, each mapped to one op front-end.

In-place operators follow the Array API standard: `x op= y` is allowed only when the result of
`x op y` has x's dtype and x's shape; anything else is refused by name rather than cast silently.
"""
from __future__ import annotations

from . import ops
from .errors import DTypeError, ShapeError
from .ops import elementwise
from .tensor import Tensor

_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "pow", "and": "bitwise_and",
    "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift",
}
_COMPARISONS = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                "gt": "greater", "ge": "greater_equal"}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert"}


def _reflected(fn):
    return lambda self, other: fn(other, self)


def _in_place(fn, name):
    def update(self, other):
        result = fn(self, other)
        if result.dtype is not self.dtype:
            raise DTypeError(f"in-place {name} would change {self.dtype.name} into {result.dtype.name}")
        if result.shape != self.shape:
            raise ShapeError(f"in-place {name} would change shape {self.shape} into {result.shape}")
        self._copy_from(result)
        return self
    return update


def _spec_call(name: str):
    """The elementwise op's spec call (a plain function): its front-end, given a Tensor operand, only
    forwards to it, and an operator's self is one. Installed as the operator itself (self, other in
    order): no frame between `a + b` and the signature's lookup."""
    return getattr(elementwise, name).spec.call


def _install() -> None:
    for dunder, name in _BINARY.items():
        fn, call = getattr(elementwise, name), _spec_call(name)
        setattr(Tensor, f"__{dunder}__", call)
        setattr(Tensor, f"__r{dunder}__", _reflected(call))
        setattr(Tensor, f"__i{dunder}__", _in_place(fn, name))
    for dunder, name in _COMPARISONS.items():
        setattr(Tensor, f"__{dunder}__", _spec_call(name))
    for dunder, name in _UNARY.items():
        setattr(Tensor, f"__{dunder}__", _spec_call(name))
    Tensor.__matmul__ = ops.matmul   # its spec's call, as the elementwise operators
    Tensor.__rmatmul__ = _reflected(ops.matmul)
    Tensor.__imatmul__ = _in_place(ops.matmul, "matmul")
    # method forms: x.exp(), x.sum(dim), x.softmax(-1), x.astype(dtype), ...
    for name in list(elementwise.OPS) + ["clamp", "astype"]:
        setattr(Tensor, name, getattr(elementwise, name))
    for name in ops.reductions.__all__ + ["softmax", "log_softmax", "matmul"]:
        setattr(Tensor, name, getattr(ops, name))


_install()
