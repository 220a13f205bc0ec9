"""The take (embedding, index_select) rows kernel's certified tile: the bytes of rows a program
moves (row_bytes: one row's run of columns, or several short rows) and its warps.

Key: the row's width in bytes to a power of two (the word the kernel moves does not matter: a
program's columns are 16-byte vectors whatever the itemsize) and the rows taken, outer x ids, in
powers of four (a decode step's 1..16 ids are launch-bound, a prefill's thousands bandwidth-bound;
within a factor of four the grid's shape changes little). Not exact shapes. The representative
launch: rows of 16-bit words (bf16's) taken from a table of TABLE_BYTES (or ids' rows, if more) at
scattered ids, so the reads miss L2 as an embedding's do; compared bit for bit.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core import dtypes
from nbx.core.ops.creation import asarray
from nbx.core.tensor import empty

from ..rows import pow2_at_least

PARAMS = {"row_bytes": (1024, 2048, 4096, 8192, 16384, 32768), "num_warps": (1, 2, 4, 8)}
KEY = {"row_bytes": "exact", "ids": "exact"}
TABLE_BYTES = 128 << 20   # above the H200's L2 (50 MiB): the table is read from HBM, as a 151936-token table is
TABLE_ROWS = 65536        # at most (short rows: a smaller table still misses L2 at scattered ids)


def pow4_at_least(v: int) -> int:
    octave = pow2_at_least(v).bit_length() - 1
    return 1 << (octave + (octave & 1))


def take_key(row_bytes: int, ids: int) -> dict:
    """The key of a take of ids rows (outer x indices) of row_bytes bytes each."""
    return {"row_bytes": pow2_at_least(row_bytes), "ids": pow4_at_least(ids)}


def _fits_threads(setting, facts):
    """Every thread moves at least one 16-byte vector and at most 16 (their registers)."""
    per_thread = setting["row_bytes"] // (setting["num_warps"] * facts.value("compute.warp_size"))
    if per_thread < 16:
        return f"{setting['row_bytes']} bytes over {setting['num_warps']} warps: under 16 bytes a thread"
    return per_thread <= 256 or f"{setting['row_bytes']} bytes over {setting['num_warps']} warps: over 256 a thread"


def _fits_key(setting, rep, facts):
    """A program holding more bytes than the whole launch moves masks the rest: not a candidate,
    unless it is the device file's tile (which the certifier compares always)."""
    whole = max(PARAMS["row_bytes"][0], pow2_at_least(rep["row_bytes"] * rep["ids"]))
    if setting["row_bytes"] <= whole or setting["row_bytes"] == facts.value("tiles.gather")["row_bytes"]:
        return True
    return f"{setting['row_bytes']} bytes a program; the launch moves {whole}"


def take_workload(rep, device):
    from . import launch_take
    row_bytes, ids = rep["row_bytes"], rep["ids"]
    word = dtypes.uint16 if row_bytes >= 2 else dtypes.uint8
    inner = row_bytes // word.itemsize
    rows = max(ids, min(TABLE_ROWS, TABLE_BYTES // row_bytes))
    mask = np.uint64((1 << (8 * word.itemsize)) - 1)
    bits = (np.arange(rows * inner, dtype=np.uint64) * np.uint64(2654435761)) & mask
    table = asarray(bits.astype(word.host).reshape(rows, inner), device=device)
    picks = (np.arange(ids, dtype=np.int64) * 40503) % rows   # scattered, repeating only past `rows`
    index = asarray(picks, device=device)
    out = empty((ids, inner), word, device)
    reference = table.numpy()[picks]
    return autotune.TensorWorkload(out, lambda setting: launch_take(table, index, 0, setting=setting, out=out),
                                   lambda r: reference[r])


TAKE = autotune.declare(autotune.Tunable(
    "take", params=PARAMS, key=KEY, default_from="tiles.gather", constraint=_fits_threads, fits=_fits_key,
    workload=take_workload))


def take_setting(device, row_bytes: int, ids: int) -> dict:
    """The served tile of a take of ids rows of row_bytes bytes."""
    return autotune.setting(TAKE, device, **take_key(row_bytes, ids))


__all__ = ["TAKE", "PARAMS", "KEY", "take_key", "take_setting", "take_workload"]
