"""Certified settings of the norm kernels: the row tunable of rows.py, screened on an
RMS norm with a weight (every norm, the fused add + RMS norm and batch norm launch the same tile)."""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from ..rows import ROW_KEY, ROW_PARAMS, ROW_WEIGHTS, representative_rows

EPS = 1e-6


def norm_workload(rep, device):
    from . import launch_rows_norm
    from .. import launch
    x, _, n = representative_rows(rep, device)
    weight = asarray((1.0 + 0.5 * np.cos(np.arange(n))).astype(x.dtype.host), device=device)
    out = launch.output(x.shape, x.dtype, device)
    reference = oracle("rms_norm", x, (n,), weight, EPS)
    return autotune.TensorWorkload(
        out, lambda setting: launch_rows_norm(x, 1, weight, None, EPS, rms=True, out=out, setting=setting),
        lambda rows: np.asarray(reference)[rows])


NORM = autotune.declare(autotune.Tunable(
    "norm", params=ROW_PARAMS, key=ROW_KEY, weights=ROW_WEIGHTS, default_from="tiles.norm", workload=norm_workload,
    screen_at_launch="elements"))

__all__ = ["NORM"]
