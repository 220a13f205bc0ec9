"""Tensor-parallel linear layers: one weight split across the ranks of a communicator.

Both compute y = x @ W.T + b for a weight W of shape (out_features, in_features) (the layout of
safetensors checkpoints), each rank holding one block of W:

- ColumnParallelLinear splits W by output features (rows of W): rank r computes the r-th block of
  y's last dim; with gather_output the blocks are all_gathered, so every rank holds all of y.
- RowParallelLinear splits W by input features (columns of W): rank r multiplies its block of x
  by its block of W, and an all_reduce (sum) adds the partial products; the bias is added once,
  after the sum. With input_is_parallel, x is already the rank's block (a ColumnParallelLinear's
  output without gathering: the usual pair in an MLP, one collective per pair).

The matrix products are nbx.core.matmul on the communicator's device; the collectives are the
communicator's (nccl.Communicator on GPUs; anything with the same all_reduce / all_gather,
rank, world_size and device). A split that does not divide evenly is refused (ShapeError): NCCL's
all_gather and reduce_scatter move equal blocks. Partial products are rounded to the output dtype
before they are summed: one rounding more than the single-device product, within its tolerance.
"""
from __future__ import annotations

import numpy as np
from nbx.core.errors import ArgumentError, ShapeError
from nbx.core.ops.elementwise import add
from nbx.core.ops.linalg import matmul
from nbx.core.tensor import Tensor, from_numpy

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "shard_range"]


def shard_range(features: int, rank: int, world_size: int, what: str = "features") -> slice:
    """The block of `features` that rank holds: equal blocks in rank order."""
    if features % world_size:
        raise ShapeError(f"{features} {what} do not split evenly among {world_size} ranks "
                         f"({features} % {world_size} = {features % world_size})")
    size = features // world_size
    return slice(rank * size, (rank + 1) * size)


def _as_tensor(value, what: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return from_numpy(value)
    raise ArgumentError(f"{what} must be an nbx Tensor or a numpy array, got {type(value).__name__}")


def _check_weight(weight: Tensor, bias: Tensor | None, out_features: int) -> None:
    if weight.ndim != 2:
        raise ShapeError(f"a linear layer's weight is (out_features, in_features), got shape {weight.shape}")
    if bias is not None and bias.shape != (out_features,):
        raise ShapeError(f"the bias has shape {bias.shape}; ({out_features},) expected")


class _ParallelLinear:
    def __init__(self, comm, in_features: int, out_features: int):
        self.comm = comm
        self.in_features = in_features
        self.out_features = out_features

    def _check_input(self, x: Tensor, features: int) -> None:
        if not isinstance(x, Tensor):
            raise ArgumentError(f"the input must be an nbx Tensor, got {type(x).__name__}")
        if not x.ndim or x.shape[-1] != features:
            raise ShapeError(f"the input's last dim must be {features} (rank {self.comm.rank} of "
                             f"{self.comm.world_size}), got shape {x.shape}")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_features} -> {self.out_features}, rank {self.comm.rank} of "
                f"{self.comm.world_size}, {self.comm.device})")


class ColumnParallelLinear(_ParallelLinear):
    """Rank r holds W[r*o:(r+1)*o, :] and b[r*o:(r+1)*o] (o = out_features / world_size)."""

    def __init__(self, weight_shard: Tensor, bias_shard: Tensor | None = None, *, comm,
                 gather_output: bool = False):
        _check_weight(weight_shard, bias_shard, weight_shard.shape[0])
        super().__init__(comm, weight_shard.shape[1], weight_shard.shape[0] * comm.world_size)
        self.local_out_features = weight_shard.shape[0]
        self.gather_output = gather_output
        # stored transposed and dense once: each call is then a plain (..., in) @ (in, o) product
        self.weight_t = weight_shard.to(comm.device).T.contiguous()
        self.bias = None if bias_shard is None else bias_shard.to(comm.device).contiguous()

    @classmethod
    def from_full(cls, weight, bias=None, *, comm, gather_output: bool = False) -> ColumnParallelLinear:
        """This rank's layer from the full weight and bias (on any device, or numpy arrays)."""
        weight = _as_tensor(weight, "weight")
        bias = None if bias is None else _as_tensor(bias, "bias")
        _check_weight(weight, bias, weight.shape[0])
        rows = shard_range(weight.shape[0], comm.rank, comm.world_size, "output features")
        return cls(weight[rows], None if bias is None else bias[rows], comm=comm, gather_output=gather_output)

    def __call__(self, x: Tensor) -> Tensor:
        self._check_input(x, self.in_features)
        y = matmul(x, self.weight_t)
        if self.bias is not None:
            y = add(y, self.bias)
        return self._gather_last_dim(y) if self.gather_output else y

    def _gather_last_dim(self, y: Tensor) -> Tensor:
        """The ranks' blocks of the last dim, side by side: all_gather stacks them first (dim 0)."""
        world = self.comm.world_size
        stacked = self.comm.all_gather(y.contiguous())          # (world, *lead, o)
        k = y.ndim
        order = (*range(1, k), 0, k)                             # (*lead, world, o)
        return stacked.permute(*order).contiguous().reshape(*y.shape[:-1], world * y.shape[-1])


class RowParallelLinear(_ParallelLinear):
    """Rank r holds W[:, r*i:(r+1)*i] (i = in_features / world_size) and all of b."""

    def __init__(self, weight_shard: Tensor, bias: Tensor | None = None, *, comm, input_is_parallel: bool = True):
        _check_weight(weight_shard, bias, weight_shard.shape[0])
        super().__init__(comm, weight_shard.shape[1] * comm.world_size, weight_shard.shape[0])
        self.local_in_features = weight_shard.shape[1]
        self.input_is_parallel = input_is_parallel
        self.weight_t = weight_shard.to(comm.device).T.contiguous()
        self.bias = None if bias is None else bias.to(comm.device).contiguous()

    @classmethod
    def from_full(cls, weight, bias=None, *, comm, input_is_parallel: bool = True) -> RowParallelLinear:
        weight = _as_tensor(weight, "weight")
        bias = None if bias is None else _as_tensor(bias, "bias")
        _check_weight(weight, bias, weight.shape[0])
        cols = shard_range(weight.shape[1], comm.rank, comm.world_size, "input features")
        return cls(weight[:, cols], bias, comm=comm, input_is_parallel=input_is_parallel)

    def __call__(self, x: Tensor) -> Tensor:
        if self.input_is_parallel:
            self._check_input(x, self.local_in_features)
        else:
            self._check_input(x, self.in_features)
            cols = shard_range(self.in_features, self.comm.rank, self.comm.world_size, "input features")
            x = x[..., cols]
        partial = matmul(x, self.weight_t)
        y = self.comm.all_reduce_(partial.contiguous(), "sum")
        return y if self.bias is None else add(y, self.bias)
