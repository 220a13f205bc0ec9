"""The elementwise kernel's certified settings: what is tuned, the launch key, the workload.

Every elementwise launch (ops, activations, casts, copies) runs the one strided kernel, so one
tunable serves them all. Its key is what changes the best block: the element count's class
(launch-bound small tensors want more, smaller programs), the output dtype (elements per 16-byte
access) and whether any operand is read through strides. The representative launch the
certifier screens and times is a binary op of two operands of the key's dtype, read in place or,
for a strided key, through a stride of 2: for floats logaddexp (an exp, a log1p and a division an
element), as heavy as the activations; an add, memory-bound, does not rank the tiles: on the H200
its eight candidates at 256 MiB of bfloat16 were within 0.2 % of each other, while the tile the add
picked ran gelu 15 % slower than gelu's best (H200, 2026-11-29). Integers take an add, bool a
logical xor.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from .. import launch


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
        op, first, second = "logaddexp", np.linspace(-4.0, 4.0, n), np.linspace(3.0, -5.0, n)
    else:  # integers: small values, exact in every width
        op, first, second = "add", np.arange(n) % 50, np.arange(n) % 7
    a, b = _operand(first, dtype, strided, device), _operand(second, dtype, strided, device)
    out = launch.output((n,), dtype, device)
    fn = functions.pick(op, dtype.name)
    reference = oracle(op, a, b)
    return autotune.TensorWorkload(
        out, lambda setting: launch_elementwise(fn, [a, b], dtype, dtype, out=out, setting=setting),
        lambda rows: np.asarray(reference)[rows])


ELEMENTWISE = autotune.declare(autotune.Tunable(
    "elementwise",
    params={"block": (1024, 2048, 4096, 8192), "num_warps": (4, 8)},
    key={"n": "elements", "dtype": "dtype", "strided": "flag"},
    default_from="tiles.elementwise",
    constraint=_fits_threads,
    workload=workload,
))


def setting(device, n: int, dtype, strided: bool):
    """The served setting of an elementwise launch of n elements of output dtype."""
    return autotune.setting(ELEMENTWISE, device, n=n, dtype=dtype, strided=strided)


__all__ = ["ELEMENTWISE", "setting", "workload"]
