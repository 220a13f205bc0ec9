"""Certified settings of softmax: the row tunable (rows.py: ROW_PARAMS, ROW_KEY), screened on a
softmax of the key's representative rows. The norms' is norm/tuning.py."""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.reference import oracle

from ..rows import ROW_KEY, ROW_PARAMS, ROW_WEIGHTS, representative_rows, row_setting


def softmax_workload(rep, device):
    from . import launch_softmax
    from .. import launch
    x, _, _ = representative_rows(rep, device)
    out = launch.output(x.shape, x.dtype, device)
    reference = oracle("softmax", x, -1)
    return autotune.TensorWorkload(out, lambda setting: launch_softmax(x, -1, out=out, setting=setting),
                                   lambda rows: np.asarray(reference)[rows])


SOFTMAX = autotune.declare(autotune.Tunable(
    "softmax", params=ROW_PARAMS, key=ROW_KEY, weights=ROW_WEIGHTS, default_from="tiles.softmax",
    workload=softmax_workload, screen_at_launch="elements"))

__all__ = ["SOFTMAX", "row_setting"]
