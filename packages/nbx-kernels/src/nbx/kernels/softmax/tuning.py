"""Certified settings of the row kernels (softmax here, the norms in norm/tuning.py).

What is tuned is the tile of a full-width row (`max_block_n`, whose power of two also decides
when a row is walked in pieces) and its warps (`num_warps`; narrower tiles take proportionally
fewer, rows.blocks). The launch key: the row's width rounded up to a power of two (the tile a
row takes), the element count's class (a few rows are launch-bound, many are bandwidth-bound),
the dtype, and whether the rows are read across their stride (a reduced dim that is not the
innermost). The representative launch of a key is width-long rows, as many as the class's top
count of elements holds (at least one).
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from .rows import pow2_at_least

# 16 warps at 8192 is the device file's tile; fewer than 8 warps over a full tile spill registers
ROW_PARAMS = {"num_warps": (8, 16, 32), "max_block_n": (8192, 16384)}
ROW_KEY = {"width": "exact", "elements": "elements", "dtype": "dtype", "strided": "flag"}


def row_setting(tunable, device, rows: int, n: int, dtype, strided: bool):
    """The served setting for rows x n of dtype (strided: rows read across the reduced dim's stride)."""
    return autotune.setting(tunable, device, width=pow2_at_least(n), elements=rows * n, dtype=dtype,
                            strided=strided)


def representative_rows(rep, device, positive: bool = False):
    """(x, rows, n): the key's rows x n input of its dtype, laid out as the key says. positive:
    values in [0.5, 2.5], so that a sum's result is not a cancellation (its relative error is then
    the order of summation's, which the screen's tolerance is derived for)."""
    n = rep["width"]
    rows = max(1, rep["elements"] // n)
    dtype = rep["dtype"]
    wave = np.sin(0.37 * np.arange(rows * n)).reshape(rows, n)
    values = 1.5 + wave if positive else 4.0 * wave
    if rep["strided"]:  # rows adjacent, a row's elements a stride apart: the transpose of (n, rows)
        x = asarray(np.ascontiguousarray(values.T).astype(dtype.host), device=device).permute(1, 0)
    else:
        x = asarray(values.astype(dtype.host), device=device)
    return x, rows, n


def softmax_workload(rep, device):
    from . import launch_softmax
    from .. import launch
    x, _, _ = representative_rows(rep, device)
    out = launch.output(x.shape, x.dtype, device)
    reference = oracle("softmax", x, -1)
    return autotune.TensorWorkload(out, lambda setting: launch_softmax(x, -1, out=out, setting=setting),
                                   lambda rows: np.asarray(reference)[rows])


SOFTMAX = autotune.declare(autotune.Tunable(
    "softmax", params=ROW_PARAMS, key=ROW_KEY, default_from="tiles.softmax", workload=softmax_workload))

__all__ = ["SOFTMAX", "ROW_PARAMS", "ROW_KEY", "row_setting", "representative_rows", "pow2_at_least"]
