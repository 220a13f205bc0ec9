"""The sampling step's certified tile (sampling/__init__.py says what each parameter decides): the
logits a program reads a step (block), its warps, the programs a launch aims for (how many chunks a
row is split into) and the band weights a row may copy out for the top-p bisection (candidates).

Key: the vocabulary and the rows on the dims ladder (a decode batch's rows exact up to 64, where the
chunks a row changes most), and the logits' dtype (the bytes a step reads). The representative
launch: top-p 0.9 at temperature 0.7 (the benchmark's first case: every pass but top-k's digits,
which run over the same chunks) of smooth pseudo-random logits of spread 3, the tokens compared
exactly with the numpy reference drawing from the same Philox uniforms.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray

from ..rows import pow2_at_least

PARAMS = {"block": (1024, 2048, 4096), "num_warps": (4, 8), "programs": (528, 1056, 2112), "candidates": (2048, 4096)}
KEY = {"vocab": "dims", "rows": "dims", "dtype": "dtype"}
TEMPERATURE, TOP_P, SEED, OFFSET = 0.7, 0.9, 1234, 0


def sampling_key(rows: int, vocab: int, dtype) -> dict:
    return {"vocab": int(vocab), "rows": int(rows), "dtype": dtype}


def _fits_threads(setting, facts):
    """4 to 32 logits a thread a step: a 16-byte load of float32 at least, and registers to spare."""
    per_thread = setting["block"] // (setting["num_warps"] * facts.value("compute.warp_size"))
    return 4 <= per_thread <= 32 or f"block {setting['block']} over {setting['num_warps']} warps: {per_thread} a thread"


def _first_alike(name: str, setting, facts, alike) -> int | None:
    """A value of parameter `name` that launches as the setting's and comes first: the device file's
    tile's, then smaller ones (so the default stays a candidate wherever it is one of several alike)."""
    default = facts.value("tiles.sampling")[name]
    order = sorted(set(PARAMS[name]) | {default}, key=lambda v: (v != default, v))
    mine = setting[name]
    return next((v for v in order[:order.index(mine)] if alike(v, mine)), None) if mine in order else None


def _fits_key(setting, rep, facts):
    """A setting that launches as another candidate (the key's rows split alike by fewer programs; a
    band cap past the row's length) is not a candidate."""
    from ..sort.topk import split
    rows, vocab, block = rep["rows"], rep["vocab"], setting["block"]
    alike = _first_alike("programs", setting, facts,
                         lambda a, b: split(rows, vocab, block, a) == split(rows, vocab, block, b))
    if alike is not None:
        return f"{setting['programs']} programs split rows of {vocab} as {alike} do"
    whole = pow2_at_least(vocab)
    alike = _first_alike("candidates", setting, facts, lambda a, b: a >= whole and b >= whole)
    return alike is None or f"a band cap of {setting['candidates']} for rows of {vocab}: {alike} holds a row"


def sampling_workload(rep, device):
    from nbx.core.dispatch import implementation
    from nbx.core.dtypes import INDEX, float32
    from nbx.core.ops.sampling import sample_reference
    from nbx.core.tensor import empty
    from . import launch_sample
    rows, vocab, dtype = rep["rows"], rep["vocab"], rep["dtype"]
    phase = np.arange(rows * vocab, dtype=np.float64).reshape(rows, vocab)
    values = 3.0 * np.sin(0.7 * phase + 0.3) * np.cos(0.013 * phase)
    x = asarray(values.astype(np.float32), device=device).to(dtype=dtype)
    uniforms = empty((rows,), float32, device)
    implementation("random.rand", device)(uniforms, SEED, OFFSET)
    tokens = empty((rows,), INDEX, device)
    reference = sample_reference(x.to("cpu"), TEMPERATURE, vocab, TOP_P, 0.0, SEED, OFFSET)
    return autotune.TensorWorkload(
        tokens, lambda setting: launch_sample(x, uniforms, TEMPERATURE, vocab, TOP_P, 0.0, setting=setting,
                                              tokens=tokens),
        lambda r: reference[r])


SAMPLING = autotune.declare(autotune.Tunable(
    "sampling", params=PARAMS, key=KEY, default_from="tiles.sampling", constraint=_fits_threads, fits=_fits_key,
    workload=sampling_workload))


def sampling_setting(device, rows: int, vocab: int, dtype) -> dict:
    """The served tile of a sampling step over rows x vocab logits."""
    return autotune.setting(SAMPLING, device, **sampling_key(rows, vocab, dtype))


__all__ = ["SAMPLING", "PARAMS", "KEY", "sampling_key", "sampling_setting", "sampling_workload"]
