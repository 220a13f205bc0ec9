"""Certified settings of the FFT passes: whether a row of n = N1 x N2 points (both <= 64) runs in
one program (fused: two dense DFT products, tile.py, up to 2048 padded points; longer powers of two after one or two column
passes of block_j columns a program), there the rows a program takes at once (tile_rows: its
DFT matrices formed once for them, the rows stacked in the products' M dimension) and the groups of
them it takes in turn (tile_steps: the next group read while this one's products run) and whether its products run on the tensor cores as three TF32
products (tf32x3) or as exact float32 products; else the largest power-of-two radix a pass takes
and the butterflies a program owns; the warps.

The launch key: the transform length n and the number of rows (both on the dims ladder). A larger
radix means fewer passes over memory (log_radix n of them) but an R x R DFT product per butterfly
in registers; which wins depends on n and on the register file, so it is certified per key. The
representative launch: a forward complex FFT of the key's rows x n, complex64.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray

PARAMS = {"fused": (0, 1), "radix": (4, 8, 16), "block_j": (16, 64, 128), "num_warps": (4, 8, 16), "tf32x3": (0, 1),
          "tile_rows": (1, 2, 4, 8), "tile_steps": (1, 4)}
# a fused row's padded points a thread (tile_rows rows over the program's threads): past 32 the
# tile's values, their TF32 parts and the products' accumulators spill (ptxas, sm_90: 4 rows of 1024
# points over 8 warps take 170 registers, 8 rows 219, 16 rows over 16 warps spill)
TILE_POINTS_A_THREAD = 32
KEY = {"n": "dims", "rows": "dims"}


def fft_key(n: int, rows: int) -> dict:
    return {"n": int(n), "rows": int(rows)}


def _registers(setting) -> int:
    """A thread's registers, estimated: the R x R DFT product of BLOCK_J butterflies (two float32
    terms an entry live at once) spread over the program's threads, plus the indices and phases."""
    threads = 32 * setting["num_warps"]
    return 40 + 2 * setting["block_j"] * setting["radix"] ** 2 // threads


def _first(setting, names) -> bool:
    return all(setting[p] == PARAMS[p][0] for p in names)


def _fits_key(setting, rep, facts):
    """fused rows only where the key's length is N1 x N2 with both <= 64 (the tile, tile.py) or a
    power of two the column passes take to a tile; the
    parameters the chosen path does not read are not swept."""
    from . import column_radices, tile_factors
    n = rep["n"]
    tiled, columns = tile_factors(n, False) is not None, column_radices(n) is not None
    if setting["fused"] and not (tiled or columns):
        return f"n {n} is neither a tile's N1 x N2 nor a power of two the column passes take: no fused row"
    if setting["fused"] and not _first(setting, ("radix",) if columns else ("radix", "block_j")):
        return "a fused row reads no radix (and a tile's row no block_j: the column passes' columns a program)"
    if not setting["fused"] and not _first(setting, ("tf32x3", "tile_rows", "tile_steps")):
        return "the passes read neither tf32x3, tile_rows nor tile_steps"
    if setting["fused"] and setting["num_warps"] > 8:
        return "a fused tile over 16 warps has 128 registers a thread: its values spill (ptxas, sm_90)"
    if setting["fused"]:
        points = setting["tile_rows"] * _tile_points(n, tiled) // (32 * setting["num_warps"])
        if points > TILE_POINTS_A_THREAD:
            return f"{points} padded points a thread in a fused tile: above {TILE_POINTS_A_THREAD}, its registers spill"
    return True


def _tile_points(n: int, tiled: bool) -> int:
    """The padded points of the row tile an n-point row ends in (after its column passes)."""
    from math import prod
    from . import _tile_dim, column_radices, tile_factors
    last = n if tiled else n // prod(column_radices(n))
    n1, n2 = tile_factors(last, False)
    return _tile_dim(n1) * _tile_dim(n2)


def fft_workload(rep, device):
    from . import launch_transform
    rows, n = rep["rows"], rep["n"]
    phase = 0.37 * np.arange(rows * n).reshape(rows, n)
    values = (np.sin(phase + 0.5) + 1j * np.cos(0.61 * phase)).astype(np.complex64)
    x = asarray(values, device=device)
    expected = np.fft.fft(values.astype(np.complex128), axis=-1)
    out = asarray(np.zeros((rows, n), np.complex64), device=device)
    return autotune.TensorWorkload(
        out, lambda setting: launch_transform(x, n, "fft", "backward", out=out, setting=setting),
        lambda sel: expected[sel])


FFT = autotune.declare(autotune.Tunable(
    "fft", params=PARAMS, key=KEY, default_from="tiles.fft", workload=fft_workload,
    constraint=autotune.registers(_registers), fits=_fits_key))


def fft_setting(device, n: int, rows: int) -> dict:
    """The served setting of the passes of an n-point transform over rows."""
    return autotune.setting(FFT, device, **fft_key(n, rows))


__all__ = ["FFT", "PARAMS", "KEY", "fft_key", "fft_setting"]
