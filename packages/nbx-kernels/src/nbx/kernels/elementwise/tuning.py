"""The elementwise kernel's certified settings: what is tuned, the launch key, the workload.

Every elementwise launch (ops, activations, casts, copies) runs the one strided kernel, so one
tunable serves them all. Its key is what changes the best block: the element count's class
(launch-bound small tensors want more, smaller programs), the output dtype (elements per 16-byte
access) and whether any operand is read through strides. The representative launch the
certifier screens and times is an add of two operands of the key's dtype (a logical xor for bool),
read in place or, for a strided key, through a stride of 2.

An add is memory-bound: on the H200 its candidates at 256 MiB of bfloat16 are within 0.2 % of each
other, so it cannot rank tiles for an op whose arithmetic is the bound. Those ops (COMPUTE_BOUND)
take a tunable of their own, `elementwise_heavy`, keyed alike and ranked on gelu: there the tile the
add picked (1024 elements, 4 warps) ran gelu at 3.00 TB/s and the best (4096, 4) at 3.53 (H200,
2026-11-29). An op joins COMPUTE_BOUND when its benchmark shows the same.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from .. import launch
from . import activations

# ops whose arithmetic, not their bytes, bounds them on the H200 in the 16-bit types (gelu's erfc is
# a degree-10 polynomial and an exp an element)
COMPUTE_BOUND = frozenset({activations.gelu})


def _fits_threads(setting, facts):
    threads = setting["num_warps"] * facts.value("compute.warp_size")
    return setting["block"] >= threads or f"block {setting['block']} has fewer elements than {threads} threads"


def _operand(values: np.ndarray, dtype, strided: bool, device):
    """values as a tensor of dtype on device; strided: every other element of one twice as long."""
    if not strided:
        return asarray(values.astype(dtype.host), device=device)
    wide = np.repeat(values, 2).astype(dtype.host)
    return asarray(wide, device=device)[::2]


def workload(rep, device):
    from . import functions, launch_elementwise
    n, dtype, strided = rep["n"], rep["dtype"], rep["strided"]
    if dtype.kind == "bool":
        op, first, second = "logical_xor", np.arange(n) % 3 == 0, np.arange(n) % 2 == 0
    elif dtype.kind == "float":
        op, first, second = "add", np.linspace(-4.0, 4.0, n), np.linspace(3.0, -5.0, n)
    else:  # integers: small values, exact in every width
        op, first, second = "add", np.arange(n) % 50, np.arange(n) % 7
    a, b = _operand(first, dtype, strided, device), _operand(second, dtype, strided, device)
    out = launch.output((n,), dtype, device)
    fn = functions.pick(op, dtype.name)
    reference = oracle(op, a, b)
    return autotune.TensorWorkload(
        out, lambda setting: launch_elementwise(fn, [a, b], dtype, dtype, out=out, setting=setting),
        lambda rows: np.asarray(reference)[rows])


def heavy_workload(rep, device):
    """gelu of a float operand; its float64 reference is computed for the rows the screen reads only
    (the oracle's erf is a Python loop: a whole 2**31-element input would take minutes)."""
    from . import launch_elementwise
    n, dtype, strided = rep["n"], rep["dtype"], rep["strided"]
    a = _operand(np.linspace(-4.0, 4.0, n), dtype, strided, device)
    out = launch.output((n,), dtype, device)
    return autotune.TensorWorkload(
        out, lambda setting: launch_elementwise(activations.gelu, [a], dtype, dtype, out=out, setting=setting),
        lambda rows: np.asarray(oracle("gelu", a[rows])))


PARAMS = {"block": (1024, 2048, 4096, 8192), "num_warps": (4, 8)}
KEY = {"n": "elements", "dtype": "dtype", "strided": "flag"}
ELEMENTWISE = autotune.declare(autotune.Tunable(
    "elementwise", params=PARAMS, key=KEY, default_from="tiles.elementwise", constraint=_fits_threads,
    workload=workload))
ELEMENTWISE_HEAVY = autotune.declare(autotune.Tunable(
    "elementwise_heavy", params=PARAMS, key=KEY, default_from="tiles.elementwise", constraint=_fits_threads,
    workload=heavy_workload))


def setting(device, n: int, dtype, strided: bool, fn=None):
    """The served setting of an elementwise launch of fn over n elements of output dtype."""
    tunable = ELEMENTWISE_HEAVY if fn in COMPUTE_BOUND else ELEMENTWISE
    return autotune.setting(tunable, device, n=n, dtype=dtype, strided=strided)


__all__ = ["ELEMENTWISE", "ELEMENTWISE_HEAVY", "COMPUTE_BOUND", "setting", "workload", "heavy_workload"]
