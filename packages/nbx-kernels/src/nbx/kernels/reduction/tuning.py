"""Certified settings of the reduction kernels (sum, mean, max, argmax, var, logsumexp, ...).

Tuned: the elements a program holds per step (`block`), its warps, and `programs`, the count a
launch aims for before it splits long rows into column ranges. A block wider than a row holds
several rows (layout.tile): 8192 and 16384 give a 4096-long bfloat16 row's program 2 or 4 rows,
16-32 KiB a step; the certifier keeps them where they time faster (for bfloat16 4096 x 4096 the
H200 kept 1024 with split rows). The launch key, as for the row
kernels (rows.py): the reduced length rounded up to a power of two, the element count's
class, the input dtype, and whether the reduced dim is read across its stride while the kept rows
are adjacent. The representative launch is a sum over the key's rows.

Its setting depends on both sizes of the key alike (`weights`, for a key served a neighbour's
setting): the block follows the row's width, `programs` the row count (a few long rows are split
into column ranges). On the H200 a bfloat16 sum of 1 Mi elements in 8192-wide rows served the
setting of 16 Mi elements of the same width lost 45 % (2026-12-01): the row count matters here,
unlike to softmax's tile.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.reference import oracle

from ..rows import ROW_KEY, representative_rows, row_setting
from .layout import Rows


def setting(device, view: Rows, dtype):
    """The served setting of a reduction of view (rows x cols) of dtype."""
    return row_setting(REDUCTION, device, view.rows, view.cols, dtype, view.across)


def sum_workload(rep, device):
    from . import launches
    from .. import launch
    from .combine import Code as C
    x, rows, _ = representative_rows(rep, device, positive=True)
    out_dtype = x.dtype if x.dtype.kind == "float" else launches.accumulator(x.dtype)
    out = launch.output((rows,), out_dtype, device)
    reference = oracle("sum", x, dim=1)

    def run(s):
        launches.accumulate(x, (1,), False, out_dtype, C.ADD, C.VALUE, C.KEEP, launches.accumulator(out_dtype),
                            0, out=out, setting=s)
    return autotune.TensorWorkload(out, run, lambda rows: np.asarray(reference)[rows])


REDUCTION = autotune.declare(autotune.Tunable(
    "reduction",
    params={"block": (1024, 4096, 8192, 16384), "num_warps": (4, 8), "programs": (1056, 2112)},
    key=ROW_KEY, weights={"width": 1, "elements": 1}, default_from="tiles.reduction", workload=sum_workload,
    screen_at_launch="elements"))

__all__ = ["REDUCTION", "setting"]
