"""Split K for the implicit GEMM: a launch of few tiles (SD's 16^2 x 1280 key: 40 tiles of 128 x 128
on 132 SMs, 184 K steps each) runs split_k programs a tile, each summing its share of the (tap,
channel) steps into float32 partials (workspace), then linear's split epilogue
(matmul/fused.py split_epilogue_kernel) adds each element's partials in split order (no atomics:
the same bits every run) and applies bias, activation and residual, in the order and the float32
arithmetic of the unsplit store.

The epilogue reads a dense (BATCH, M, N) output and partials (BATCH, split_k, M, N). The conv
output is dense in either layout, so it is such a matrix: channels-last (N, *S, C) is one batch of
(N x S) rows by C columns (the bias a row vector), channels-first (N, C, *S) is N batches of C rows
by S columns (the bias a column). The GEMM stores its partials through the output's own strides
(channels-first: the sample stride times split_k) plus split x M x N.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import triton.language as tl

from nbx.core import dtypes
from nbx.core.layout import view_strides

from .. import plans
from ..matmul.epilogue import SPLIT_BLOCK
from ..matmul.fused import bias_form, split_epilogue_kernel
from ..plans import Launch, Slot
from ..rows import float_bits


@dataclass(frozen=True)
class SplitK:
    splits: int
    batch: int      # the epilogue's view of the dense output: batch x rows x cols
    rows: int
    cols: int
    channels_last: bool

    @classmethod
    def of(cls, splits: int, batch: int, channels: int, outs, channels_last: bool) -> "SplitK":
        positions = prod(outs)
        if channels_last:
            return cls(splits, 1, batch * positions, channels, True)
        return cls(splits, batch, channels, positions, False)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.splits, self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * 4

    def partial_strides(self, o_strides) -> tuple[tuple, int]:
        """The GEMM's store strides (n, c, d, h, w) into the partials, and one split's offset."""
        n, *rest = o_strides
        return ((n, *rest) if self.channels_last else (self.splits * n, *rest)), self.rows * self.cols

    def residual(self, strides, batch: int, channels: int, outs) -> tuple | None:
        """The residual's (batch, row, col) strides over the epilogue's view (its logical strides
        (N, C, D, H, W) over outs of three dims), or None where its layout does not merge so."""
        n, c, *spatial = strides
        if self.channels_last:
            found = view_strides((batch, *outs, channels), (n, *spatial, c), (self.rows, self.cols))
            return None if found is None else (0, *found)
        found = view_strides((batch, channels, *outs), (n, c, *spatial), (self.batch, self.rows, self.cols))
        return None if found is None else tuple(found)

    def epilogue(self, has_bias: bool, activation, residual: tuple | None) -> Launch:
        """The launch that sums the partials into "out" with the bias, activation and residual."""
        bias_s = (0, 0, 1) if self.channels_last else (0, 1, 0)   # a bias [C] along the columns or the rows
        res_s = residual or (0, 0, 0)
        meta = dict(ACC=tl.float32, SPLIT_K=self.splits, BLOCK=SPLIT_BLOCK,
                    HAS_BIAS=bias_form(bias_s) if has_bias else False, ACTIVATION=activation,
                    HAS_RES=residual is not None, GATED=False, NORM=False)
        one = float_bits(1.0)
        args = (Slot("part"), Slot("out"), Slot("bias"), Slot("res") if residual else Slot("out"), Slot("part"),
                self.rows, self.cols, 0, self.batch, *bias_s, *res_s, one, one, float_bits(0.0))
        total = self.batch * self.rows * self.cols
        return Launch(split_epilogue_kernel, (-(-total // SPLIT_BLOCK),), args, meta)

    def workspace(self):
        return plans.workspace("part", self.shape, dtypes.float32)
