"""The remap copy's certified tile: what is tuned, the launch key, the workload.

Key: the output's element count class, its last dim's class (a head transpose's 128-wide rows want
another tile than a 16384-wide image row), the word the kernel moves (the dtype's size: bf16 and
f16 share u16) and whether the last dim is mapped (its groups shifted or reversed in registers,
its seams element by element). Not exact shapes; and whether it is a transpose
(`datamove_transpose`: its own tunable, so its square-ish default tile). The representative launch: a roll of the last dim by one element (mapped: the
shifted 16-byte path a pad and a roll take, over the flat output where rows are no multiple of 16
bytes, as a pad's; a flip's register-reversed groups cost alike), a copy from every other row of a
twice-as-tall source (unmapped: rows apart, as a concat's) or a transpose, of words, bit for bit.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.ops.creation import asarray
from nbx.core.tensor import empty

from ..gather import word_of


def _fits_threads(setting, facts):
    threads = setting["num_warps"] * facts.value("compute.warp_size")
    if setting["block_c"] > setting["block"]:
        return f"a row tile of {setting['block_c']} is wider than the block of {setting['block']}"
    return setting["block"] >= threads or f"block {setting['block']} has fewer elements than {threads} threads"


WIDE_ROWS = 4096   # rows at least this wide (not a transpose's) try only row tiles of WIDE_TILE or more
WIDE_TILE = 512


def _fits_rows(setting, rep, facts):
    """A row tile wider than the key's last dim launches as the narrower one (remap.tile): not a
    candidate. On wide rows a narrow row tile only spans more rows for the same bytes a program (and
    a pad's flat walk ignores it): those halve a wide key's candidates, whose screens and compiles
    bound the certification (a transpose's square tiles stay)."""
    from ..rows import pow2_at_least
    widest = max(PARAMS["block_c"][0], pow2_at_least(rep["inner"]))
    if setting["block_c"] > widest:
        return f"a row tile of {setting['block_c']} for rows of {rep['inner']}"
    if rep["inner"] >= WIDE_ROWS and not rep["transposed"] and setting["block_c"] < WIDE_TILE:
        return f"a row tile of {setting['block_c']} on rows of {rep['inner']}: under {WIDE_TILE}, more rows, same bytes"
    return True


def workload(rep, device):
    from .kernel import COPY, ROLL
    from .remap import remap_copy
    inner, word, mapped = rep["inner"], rep["dtype"], rep["mapped"]
    rows = max(1, rep["n"] // inner)
    # masked, not taken modulo 2**64: numpy refuses a Python int past uint64 (OverflowError for 8-byte words)
    bits = (np.arange(rows * inner, dtype=np.uint64) * np.uint64(2654435761)
            & np.uint64((1 << (8 * word.itemsize)) - 1)).astype(word.host)
    out = empty((rows, inner), word, device)
    # each reference made contiguous once, on the host: the screen compares against it twice a
    # candidate, and a compare against a transposed view took ~10 s a check at 128 Mi words
    if rep["transposed"]:  # out [rows, inner] of src [inner, rows] read through its transpose
        flat = asarray(bits.reshape(inner, rows), device=device)
        reference = np.ascontiguousarray(bits.reshape(inner, rows).T)
        launch = lambda setting: remap_copy(out, flat.T, COPY, (0, 0), setting=setting)   # noqa: E731
    elif mapped:
        src = asarray(bits.reshape(rows, inner), device=device)
        reference = np.roll(bits.reshape(rows, inner), 1, axis=1)
        launch = lambda setting: remap_copy(out, src, ROLL, (0, 1 % inner), setting=setting)   # noqa: E731
    else:
        # from every other row of a twice-as-tall source into a dense output: rows apart, as a concat's
        # part's are, and the screen downloads the output's bytes alone (a strided output's span is twice)
        reference = bits.reshape(rows, inner)
        wide = np.zeros((2 * rows, inner), word.host)
        wide[::2] = reference
        strided = asarray(wide, device=device)[::2]
        launch = lambda setting: remap_copy(out, strided, COPY, (0, 0), setting=setting)   # noqa: E731
    return autotune.TensorWorkload(out, launch, lambda r: reference[r])


PARAMS = {"block": (1024, 2048, 4096, 8192), "block_c": (64, 128, 256, 512, 1024, 2048, 4096), "num_warps": (4, 8)}
KEY = {"n": "elements", "inner": "dims", "dtype": "dtype", "mapped": "flag", "transposed": "flag"}
DATAMOVE = autotune.declare(autotune.Tunable(
    "datamove", params=PARAMS, key=KEY, default_from="tiles.datamove", constraint=_fits_threads, fits=_fits_rows,
    workload=workload, key_dtype=word_of))
# a transpose's tile is square-ish (rows read contiguous, columns written so): its own default, keyed alike
DATAMOVE_TRANSPOSE = autotune.declare(autotune.Tunable(
    "datamove_transpose", params=PARAMS, key=KEY, default_from="tiles.datamove_transpose", constraint=_fits_threads,
    fits=_fits_rows, workload=workload, key_dtype=word_of))


def setting(device, n: int, inner: int, dtype, mapped: bool, transposed: bool):
    """The served tile of a remap launch."""
    return autotune.setting(DATAMOVE_TRANSPOSE if transposed else DATAMOVE, device, n=n, inner=inner, dtype=dtype,
                            mapped=mapped, transposed=transposed)


__all__ = ["DATAMOVE", "DATAMOVE_TRANSPOSE", "setting", "workload"]
