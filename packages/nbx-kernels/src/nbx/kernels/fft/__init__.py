"""nbx.fft (fftn, ifftn, rfftn, irfftn and through them every transform of nbx.fft) on the shared
launch path, complex64 as interleaved float32 pairs.

A transform over several dims is one 1-D transform a dim (the dim moved last, read through a dense
copy when it is not already the unit-stride last dim). A 1-D transform of n points over rows is a
chain of Stockham passes (kernel.py), one launch each, ping-ponging between two workspace rows:
- n whose factors are 2, 3, 5, 7, 11 and 13: radices of the certified power of two (radix: 4, 8
  or 16) for the power-of-two part, the odd primes merged while their product stays <= 16;
- with the setting's `fused` on, n = N1 x N2 with both <= TILE_MAX (padded, <= TILE_AREA points):
  one program a row, two dense DFT
  products on the matrix unit with the twiddles between them (tile.py: one read, one write); rfft
  and irfft of such an even n run their n points directly there (no half-length trick, no pre- or
  post-pass); a power of two past FUSED_UP_TO: one or two column passes (an R-point DFT of the
  row's columns each, R 16 to COLUMN_MAX, on tl.dot) before the tile of the sub-rows they leave, which
  stores each bin in place: 2 or 3 round trips through memory up to 2^21 points;
- any other n: Bluestein's chirp-z, a convolution by the chirp through forward and inverse
  transforms of M >= 2n - 1 points (a power of two): the chirp's spectrum (one row), the rows'
  forward transform (first pass multiplies by the chirp), the inverse (first pass multiplies by the
  chirp's spectrum, last pass by the chirp again).
rfft of an even n reads its real row as n / 2 complex pairs (even samples + i odd ones), transforms
them, and a post-pass separates the two spectra into the n / 2 + 1 bins; irfft of an even n is the
inverse (a pre-pass joins them, the inverse transform's pairs are the samples). Odd n: rfft reads the
real row into an n-point complex transform and keeps n / 2 + 1 bins; irfft extends its half
spectrum by conjugate symmetry as it reads and stores the real parts. The norm mode is a
scale applied by the last pass. float64 and complex128 are computed on the CPU only (refused here
by name). stft and istft (spectral.py) frame, window and overlap-add around these transforms.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod, sqrt

from nbx.core import dtypes
from nbx.core import layout as core_layout
from nbx.core.errors import NotSupportedError
from nbx.core.tensor import Tensor, empty

from .. import launch, plans
from ..cost import Cost, declares
from ..elementwise import _parts as pairs_of
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from ..rows import pow2_at_least
from .kernel import (CHIRP, CHIRP_SEQUENCE, COMPLEX, HERMITIAN, NONE, PAIRS, REAL, REAL_PAIRS, REAL_PART, SPECTRUM,
                     fft_pass_kernel, half_spectrum_kernel, real_spectrum_kernel)
from .tile import fft_column_kernel, fft_tile_kernel, irfft_tile_kernel
from .tuning import fft_setting

REAL_INPUTS = (dtypes.float16, dtypes.bfloat16, dtypes.float32)
ODD_RADICES = (3, 5, 7, 11, 13)
TILE_MAX = 64        # the longest side of a row's tile (tile.py): a 64 x 64 complex DFT matrix a program
TILE_AREA = 2048     # its padded points: a 64 x 64 tile's matrices, twiddles and rows spill kilobytes a
                     # thread on sm_90 (ptxas: 4.7 KB at 8 warps, 6 KB at 16); 32 x 64 a few hundred bytes
FUSED_UP_TO = TILE_AREA
COLUMN_MAX = 32      # a column pass's radix: 64 spills 1-4 KB a thread on sm_90 (ptxas), 32 none
COLUMNS_UP_TO = FUSED_UP_TO * COLUMN_MAX * COLUMN_MAX   # two column passes before a tile's row
MAX_ODD_RADIX = 16


def radices(n: int, max_radix: int) -> tuple[int, ...] | None:
    """n as the product of the passes' radices, or None when a prime factor above 13 remains
    (Bluestein). The power-of-two part in radices of max_radix and one smaller power of two."""
    if n == 1:
        return (1,)
    twos = (n & -n).bit_length() - 1
    odd = n >> twos
    step = max_radix.bit_length() - 1
    out = [max_radix] * (twos // step) + ([1 << (twos % step)] if twos % step else [])
    merged = 1
    for p in ODD_RADICES:
        while odd % p == 0:
            odd //= p
            if merged * p > MAX_ODD_RADIX:
                out.append(merged)
                merged = 1
            merged *= p
    if merged > 1:
        out.append(merged)
    return tuple(out) if odd == 1 else None


def norm_scale(n: int, norm: str, inverse: bool) -> float:
    """What the last pass multiplies by: 1, 1 / sqrt(n) or 1 / n as numpy's norm modes define."""
    if norm == "ortho":
        return 1.0 / sqrt(n)
    divides = norm == "backward" if inverse else norm == "forward"
    return 1.0 / n if divides else 1.0


@dataclass(frozen=True)
class Detail:
    path: str          # "stockham" or "bluestein"
    radices: tuple     # of the n-point (Stockham) or M-point (Bluestein) transform
    tile: dict
    flops: int
    bytes_moved: int


@dataclass(frozen=True)
class _Pass:
    """One pass of a chain: an R-point step of an n-point transform after ns points combined."""
    n: int
    radix: int
    ns: int
    sign: int
    load: int = COMPLEX
    pre: int = NONE
    post: int = NONE
    store: int = PAIRS


def _chain(n: int, rads, sign: int) -> list[_Pass]:
    out, ns = [], 1
    for r in rads:
        out.append(_Pass(n, r, ns, sign))
        ns *= r
    return out


def _launches(passes: list[_Pass], rows: int, src: str, dst: str, tile: dict, *, length: int, src_len: int,
              src_row: int, dst_row: int, dst_len: int, chirp_n: int = 1, chirp_sign: int = 1,
              scale: float = 1.0) -> list[Launch]:
    """Launches of a chain of passes from src to dst through the workspace rows work0 / work1: the
    first pass reads src's rows (length, src_len, src_row), the last writes dst's (dst_row, dst_len)
    scaled; between them full rows of 2 n floats."""
    out = []
    for i, p in enumerate(passes):
        first, last = i == 0, i == len(passes) - 1
        here = src if first else f"work{(i - 1) % 2}"
        there = dst if last else f"work{i % 2}"
        butterflies = rows * (p.n // p.radix)
        block = min(tile["block_j"], pow2_at_least(butterflies))
        aux = "spectrum" if p.pre == SPECTRUM else there
        args = (Slot(here), Slot(there), Slot(aux), butterflies, p.n, p.ns, length if first else p.n,
                src_len if first else p.n, src_row if first else 2 * p.n, dst_row if last else 2 * p.n,
                dst_len if last else p.n, chirp_n, scale if last else 1.0)
        meta = dict(R=p.radix, R_PAD=pow2_at_least(p.radix), BLOCK_J=block, SIGN=p.sign, LOAD=p.load if first else COMPLEX,
                    PRE=p.pre, POST=p.post, CHIRP_SIGN=chirp_sign, STORE=p.store if last else PAIRS,
                    num_warps=tile["num_warps"])
        out.append(Launch(fft_pass_kernel, (-(-butterflies // block),), args, meta))
    return out


def _with(p: _Pass, **changes) -> _Pass:
    return _Pass(**{**p.__dict__, **changes})


def _complex_launches(rows: int, n: int, tile: dict, sign: int, load: int, store: int, src: str, dst: str, *,
                      src_len: int, src_row: int, dst_row: int, dst_len: int, scale: float):
    """(launches, workspace width, path, radices) of an n-point complex transform from src to dst."""
    if fusable(n, tile, real=False) and load in (COMPLEX, REAL, REAL_PAIRS) and store == PAIRS and dst_len == n:
        return [_tile_launch(fft_tile_kernel, rows, n, tile, src, dst, src_len, src_row, dst_row, scale,
                             SIGN=sign, LOAD=load, HALF=False)], n, "fused", tile_factors(n, False)
    cols = column_radices(n) if tile.get("fused") and load in (COMPLEX, REAL, REAL_PAIRS) and store == PAIRS \
        and dst_len == n else None
    if cols:
        return _column_launches(rows, n, cols, tile, sign, load, src, dst, src_len, src_row, dst_row, scale), n, \
            "columns", cols + tile_factors(n // prod(cols), False)
    rads = radices(n, tile["radix"])
    if rads is not None:
        passes = _chain(n, rads, sign)
        passes[0] = _with(passes[0], load=load)
        passes[-1] = _with(passes[-1], store=store)   # one pass: both on it
        return _launches(passes, rows, src, dst, tile, length=n, src_len=src_len, src_row=src_row, dst_row=dst_row,
                         dst_len=dst_len, scale=scale), n, "stockham", rads
    # Bluestein: X_k = c_k sum_j (x_j c_j) b_(k - j), c_t = exp(sign i pi t^2 / n), b = conj(c)
    width = pow2_at_least(2 * n - 1)
    rads = radices(width, tile["radix"])
    kernel = _chain(width, rads, -1)
    kernel[0] = _with(kernel[0], load=CHIRP_SEQUENCE)
    launches = _launches(kernel, 1, dst, "spectrum", tile, length=n, src_len=n, src_row=0, dst_row=2 * width,
                         dst_len=width, chirp_n=n, chirp_sign=sign)
    forward, backward = _chain(width, rads, -1), _chain(width, rads, 1)
    forward[0] = _with(forward[0], load=load, pre=CHIRP)
    backward[0] = _with(backward[0], pre=SPECTRUM)
    backward[-1] = _with(backward[-1], post=CHIRP, store=store)
    launches += _launches(forward + backward, rows, src, dst, tile, length=n, src_len=src_len, src_row=src_row,
                          dst_row=dst_row, dst_len=dst_len, chirp_n=n, chirp_sign=sign, scale=scale / width)
    return launches, width, "bluestein", rads


def tile_factors(n: int, real: bool) -> tuple[int, int] | None:
    """(N1, N2) of an n-point row one program transforms (tile.py), N1, N2 <= TILE_MAX and their padded
    product <= TILE_AREA (N2 even for a real row, whose half spectrum takes N2 / 2 columns), the least
    padded work; None: no such pair."""
    best = None
    for n1 in range(1, TILE_MAX + 1):
        n2 = n // n1
        if n % n1 or n2 > TILE_MAX or (real and n2 % 2):
            continue
        p1, p2 = _tile_dim(n1), _tile_dim(n2)
        if p1 * p2 > TILE_AREA:
            continue
        work = p1 * p2 * (p1 + (_tile_dim(n2 // 2) if real else p2))
        if best is None or work < best[0]:
            best = (work, n1, n2)
    return None if best is None else best[1:]


def column_radices(n: int) -> tuple[int, ...] | None:
    """The radices of the column passes before a tile's row for a power of two n past FUSED_UP_TO up
    to COLUMNS_UP_TO (one pass up to 32 x 2048 points, two beyond), each 16 to COLUMN_MAX; else None."""
    if n <= FUSED_UP_TO or n > COLUMNS_UP_TO or n & (n - 1):
        return None
    bits = n.bit_length() - 1 - (FUSED_UP_TO.bit_length() - 1)   # what the tile's row cannot hold
    most = COLUMN_MAX.bit_length() - 1
    passes = -(-bits // most)
    each = max(4, -(-bits // passes))
    return (1 << each,) * passes


def _column_launches(rows: int, n: int, cols, tile: dict, sign: int, load: int, src: str, dst: str, src_len: int,
                     src_row: int, dst_row: int, scale: float) -> list[Launch]:
    """The column passes (src to work0, work0 to work1) and the tile of the sub-rows they leave,
    which stores each bin in the long row's order."""
    out, here, count, length = [], src, rows, n
    for i, r in enumerate(cols):
        m = length // r
        block = max(16, min(tile["block_j"], m))   # tl.dot's smallest dim (past m: masked)
        out.append(Launch(fft_column_kernel, (count, -(-m // block)),
                          (Slot(here), Slot(f"work{i}"), src_len if i == 0 else length, src_row if i == 0 else 2 * length),
                          dict(M=m, R=r, RP=_tile_dim(r), BLOCK_M=block, SIGN=sign, LOAD=load if i == 0 else COMPLEX,
                               PRECISION=_precision(tile), num_warps=tile["num_warps"])))
        here, count, length = f"work{i}", count * r, m
    ga, gb = (tuple(cols) + (1,))[:2]
    out.append(_tile_launch(fft_tile_kernel, count, length, tile, here, dst, length, 2 * length, dst_row, scale,
                            SIGN=sign, LOAD=COMPLEX, HALF=False, GA=ga, GB=gb))
    return out


def _precision(tile: dict) -> str:
    return "tf32x3" if tile["tf32x3"] else "ieee"


def _tile_dim(d: int) -> int:
    return max(16, pow2_at_least(d))   # tl.dot's smallest dim


def fusable(n: int, tile: dict, real: bool = False) -> bool:
    """Whether the setting runs an n-point row in one program (tile.py): n = N1 N2, both <= TILE_MAX."""
    return bool(tile.get("fused")) and tile_factors(n, real) is not None


def _tile_launch(kernel, rows: int, n: int, tile: dict, src: str, dst: str, src_len: int, src_row: int, dst_row: int,
                 scale: float, **meta) -> Launch:
    """One program a tile_steps groups of tile_rows rows of an n-point row transform (a complex one, or
    rfft's with HALF), each group's read issued before the products of the one before."""
    real = kernel is irfft_tile_kernel or meta.get("HALF")
    n1, n2 = tile_factors(n, real)
    k2 = n2 // 2 if real else n2
    per = min(tile["tile_rows"], pow2_at_least(rows))   # a power of two: the rows are an axis of the tile
    steps = max(1, min(tile.get("tile_steps", 1), rows // per))
    window = ()
    if kernel is fft_tile_kernel:
        meta = {"GA": 1, "GB": 1, "WINDOWED": False, **meta}
        window = (Slot("window" if meta["WINDOWED"] else src),)
    return Launch(kernel, (-(-rows // (per * steps)),), (Slot(src), Slot(dst), *window, rows, src_len, src_row, dst_row,
                                                      scale),
                  dict(N1=n1, N2=n2, P1=_tile_dim(n1), P2=_tile_dim(n2), K2=k2, PK2=_tile_dim(k2), ROWS=per, STEPS=steps,
                       PRECISION=_precision(tile), num_warps=tile["num_warps"], **meta))


def _pointwise(kernel, total: int, args: tuple, tile: dict) -> Launch:
    """A pre- or post-pass over total bins, as many a program as a pass's program holds."""
    block = min(tile["block_j"] * tile["radix"], pow2_at_least(total))
    return Launch(kernel, (-(-total // block),), (args[0], args[1], total, *args[2:]),
                  dict(BLOCK=block, num_warps=tile["num_warps"]))


def _plan(rows: int, n: int, src_len: int, load: int, inverse: bool, out_len: int, norm: str, device,
          setting, frames: tuple | None = None) -> LaunchPlan:
    """The launches of an n-point transform of rows rows (each src_len stored values, read as
    `load`) keeping out_len bins (complex pairs, or irfft's n reals). rfft and irfft of an even n
    run an n / 2-point complex transform of the real row read as pairs, with a post-pass (rfft)
    or a pre-pass (irfft) that separates or joins the even and odd samples' spectra."""
    tile = {**launch.tiles("fft", device), **dict(setting)}   # setting: the served one, or the certifier's
    sign = 1 if inverse else -1
    scale = norm_scale(n, norm, inverse)
    real_out = load == HERMITIAN
    out = plans.output("out", (rows, out_len) + (() if real_out else (2,)), dtypes.float32)
    half, extra = n // 2, ()
    row_tile = n % 2 == 0 and load == REAL and out_len == half + 1 and fusable(n, tile, real=True)
    if frames is not None and not row_tile:
        raise NotSupportedError(f"frames read in place: only by the row tile of a real even row, not {n} points here")
    if row_tile:   # one program a row
        hop, windowed = frames or (src_len, False)   # stft's frames: hop apart in the signal, windowed as read
        launches = [_tile_launch(fft_tile_kernel, rows, n, tile, "x", "out", src_len, hop, 2 * out_len, scale,
                                 SIGN=-1, LOAD=REAL, HALF=True, WINDOWED=windowed)]
        width, path, rads = n, "fused", tile_factors(n, True)
    elif n % 2 == 0 and load == HERMITIAN and fusable(n, tile, real=True):
        launches = [_tile_launch(irfft_tile_kernel, rows, n, tile, "x", "out", src_len, 2 * src_len, n, scale)]
        width, path, rads = n, "fused", tile_factors(n, True)
    elif n % 2 == 0 and load == REAL and out_len == half + 1:   # rfft (fft of a real row keeps every bin)
        launches, width, path, rads = _complex_launches(
            rows, half, tile, -1, REAL_PAIRS, PAIRS, "x", "half", src_len=src_len, src_row=src_len,
            dst_row=2 * half, dst_len=half, scale=1.0)
        launches.append(_pointwise(real_spectrum_kernel, rows * (half + 1),
                                   (Slot("half"), Slot("out"), half, 2 * half, 2 * out_len, scale), tile))
        extra = (plans.workspace("half", (rows, half, 2), dtypes.float32),)
    elif n % 2 == 0 and load == HERMITIAN:   # the inverse transform's pairs are the signal's samples
        pre = _pointwise(half_spectrum_kernel, rows * half, (Slot("x"), Slot("half"), half, src_len, 2 * src_len,
                                                               2 * half), tile)
        launches, width, path, rads = _complex_launches(
            rows, half, tile, 1, COMPLEX, PAIRS, "half", "out", src_len=half, src_row=2 * half, dst_row=n,
            dst_len=half, scale=2.0 * scale)
        launches.insert(0, pre)
        extra = (plans.workspace("half", (rows, half, 2), dtypes.float32),)
    else:
        store = REAL_PART if real_out else PAIRS
        launches, width, path, rads = _complex_launches(
            rows, n, tile, sign, load, store, "x", "out", src_len=src_len, src_row=src_len * (1 if load == REAL else 2),
            dst_row=out_len * (1 if real_out else 2), dst_len=out_len, scale=scale)
    passes = [l for l in launches if l.kernel is fft_pass_kernel]
    columns = [l for l in launches if l.kernel is fft_column_kernel]
    workspace = tuple(plans.workspace(f"work{i}", (rows, width, 2), dtypes.float32)
                      for i in range(max(min(2, len(passes) - 1), len(columns)))) + extra
    if path == "bluestein":
        workspace += (plans.workspace("spectrum", (1, width, 2), dtypes.float32),)
    # each pass reads and writes its rows' pairs (16 bytes a point), a pre- or post-pass reads two bins a bin
    fused = [l for l in launches if l.kernel in (fft_tile_kernel, irfft_tile_kernel)]
    pointwise = [l for l in launches if l.kernel in (real_spectrum_kernel, half_spectrum_kernel)]
    moved = (sum(l.args[3] * l.meta["R"] * 16 for l in passes) + sum(l.args[2] * 24 for l in pointwise)
             + sum(_tile_rows(l) * l.meta["N1"] * l.meta["N2"] * 16 for l in fused)
             + sum(l.grid[0] * l.meta["R"] * l.meta["M"] * 16 for l in columns))
    flops = (sum(l.args[3] * l.meta["R"] ** 2 * 8 for l in passes)   # an R-point product a butterfly
             + sum(_tile_rows(l) * _tile_flops(l.meta) for l in fused)
             + sum(l.grid[0] * l.meta["M"] * l.meta["RP"] ** 2 * 8 for l in columns))
    return LaunchPlan(device, tuple(launches), (out,), workspace, detail=Detail(path, rads, tile, flops, moved))


def _tile_rows(one: Launch) -> int:
    return one.args[3 if one.kernel is fft_tile_kernel else 2]


def _tile_flops(meta) -> int:
    """A row's padded products: four real products (two for a real operand) a complex one."""
    p1, p2, pk2 = meta["P1"], meta["P2"], meta["PK2"]
    return 2 * 4 * p1 * (p1 * p2 + p2 * pk2)


# ---- one 1-D transform over the rows of a 2-D (rows, length) tensor -----------------------------

KINDS = {"fft": (False, False), "ifft": (True, False), "rfft": (False, False), "irfft": (True, True)}


def check_dtype(op: str, dtype) -> None:
    if dtype is not dtypes.complex64 and dtype not in REAL_INPUTS:
        raise NotSupportedError(f"{op}: the FFT kernels compute complex64 and real {[d.name for d in REAL_INPUTS]} "
                                f"inputs, not {dtype.name} (complex128 and float64 transforms run on the CPU)")


def _out_len(op: str, n: int) -> int:
    return n // 2 + 1 if op == "rfft" else n


def transform_plan(rows: int, length: int, dtype, n: int, op: str, norm: str, device, setting=None,
                   frames: tuple | None = None) -> LaunchPlan:
    """frames: (hop, windowed) for rfft rows read as frames hop apart of one signal, times the
    slot `window` when windowed (stft). Only the row tile reads them so: where the served setting
    runs no row tile for them (frames_in_place), the plan has no launch (stft frames them first).
    The setting is resolved once, when the plan is built."""
    inverse, hermitian = KINDS[op]
    load = HERMITIAN if hermitian else COMPLEX if dtype.kind == "complex" else REAL
    key = ("fft", rows, length, dtype, n, op, norm, device, plans.setting_key(setting), frames)

    def build() -> LaunchPlan:
        served = setting if setting is not None else fft_setting(device, n, rows)
        if frames is not None and not frames_in_place(n, dtype, {**launch.tiles("fft", device), **dict(served)}):
            return LaunchPlan(device, ())
        return _plan(rows, n, length, load, inverse, _out_len(op, n), norm, device, served, frames)
    return plans.cached("fft", key, build)


def frames_in_place(n: int, dtype, tile: dict) -> bool:
    """Whether the setting (tile: the device file's fft tiles and the served setting) reads stft's
    frames of an n-point rfft in place (its row tile)."""
    return dtype in REAL_INPUTS and n % 2 == 0 and fusable(n, tile, real=True)


def launch_transform(x: Tensor, n: int, op: str, norm: str, out: Tensor | None = None, setting=None) -> Tensor:
    """op ('fft', 'ifft', 'rfft', 'irfft') of n points over the rows of a contiguous 2-D x (rows,
    length): complex64 (rows, bins), or float32 (rows, n) for irfft. out: the result's buffer."""
    check_dtype(op, x.dtype)
    rows, length = x.shape
    plan = transform_plan(rows, length, x.dtype, n, op, norm, x.device, setting)
    given = None if out is None else (out if out.dtype is dtypes.float32 else pairs_of(out))
    values = plans.execute(plan, {"x": pairs_of(x) if x.dtype.kind == "complex" else x, "out": given})
    if out is not None:
        return out
    result = values["out"]
    if op == "irfft":
        return result
    return Tensor(result.storage, dtypes.complex64, result.shape[:2])


def _moved_last(shape, strides, dim: int):
    order = [d for d in range(len(shape)) if d != dim] + [dim]
    return order, tuple(shape[d] for d in order), tuple(strides[d] for d in order)


def _along(x: Tensor, dim: int, n: int, op: str, norm: str) -> Tensor:
    order, shape, _ = _moved_last(x.shape, x.strides, dim)
    moved = x.permute(order).contiguous()
    lead = shape[:-1]
    bins = _out_len(op, n)
    out_dtype = dtypes.float32 if op == "irfft" else dtypes.complex64
    if prod(lead) == 0:
        result = empty(lead + (bins,), out_dtype, x.device)
    else:
        result = launch_transform(moved.reshape(prod(lead), shape[-1]), n, op, norm).reshape(*lead, bins)
    back = [order.index(d) for d in range(len(order))]
    return result.permute(back)


def steps(op: str, sizes, dims) -> list[tuple[int, int, str]]:
    """(dim, n, 1-D op) in the order they run: rfftn's real transform first, irfftn's last."""
    pairs = list(zip(dims, sizes))
    if op == "fftn":
        return [(d, n, "fft") for d, n in reversed(pairs)]
    if op == "ifftn":
        return [(d, n, "ifft") for d, n in reversed(pairs)]
    if op == "rfftn":
        return [(dims[-1], sizes[-1], "rfft")] + [(d, n, "fft") for d, n in reversed(pairs[:-1])]
    return [(d, n, "ifft") for d, n in reversed(pairs[:-1])] + [(dims[-1], sizes[-1], "irfft")]


def _transform(op: str):
    def run(call):
        x = call.x
        check_dtype(op, x.dtype)
        for dim, n, one in steps(op, call.sizes, call.dims):
            x = _along(x, dim, n, one, call.norm)
        return x

    def prepare(call):
        """A repeat of a one-step transform over the unit-stride last dim of a dense x: the plan's
        prepared launches over x's storage, the result a dense tensor of x's lead dims (None else)."""
        x = call.x
        check_dtype(op, x.dtype)
        (dim, n, one), *more = steps(op, call.sizes, call.dims)
        if more or dim != x.ndim - 1 or not core_layout.is_contiguous(x.shape, x.strides) or x.size == 0:
            return None
        rows = prod(x.shape[:-1])
        repeat = plans.prepared(transform_plan(rows, x.shape[-1], x.dtype, n, one, call.norm, x.device))
        if repeat is None:
            return None
        shape, dtype, pairs = x.shape[:-1] + (_out_len(one, n),), call.out_dtype, x.dtype.kind == "complex"
        return lambda c: Tensor(repeat({"x": pairs_of(c.x) if pairs else c.x, "out": None})["out"].storage, dtype,
                                shape)
    run.prepare = prepare
    return run


def _cost(op: str):
    def cost(call) -> Cost:
        x, sizes, dims, norm = call.x, call.sizes, call.dims, call.norm
        check_dtype(op, x.dtype)
        shape, strides, dtype = tuple(x.shape), tuple(x.strides), x.dtype
        total = Cost(launches=0)
        for dim, n, one in steps(op, sizes, dims):
            order, moved, moved_strides = _moved_last(shape, strides, dim)
            copy = () if core_layout.is_contiguous(moved, moved_strides) else (
                plans.workspace("copy", moved, dtype).buffer(),)
            plan = transform_plan(prod(moved[:-1]), moved[-1], dtype, n, one, norm, x.device)
            detail = plan.detail
            total = total + Cost(plan.buffers() + copy, detail.bytes_moved + 2 * sum(b.nbytes for b in copy),
                                 detail.flops, len(plan.launches) + len(copy))
            bins = _out_len(one, n)
            dtype = dtypes.float32 if one == "irfft" else dtypes.complex64
            result = moved[:-1] + (bins,)
            back = [order.index(d) for d in range(len(order))]
            dense = core_layout.contiguous_strides(result)
            shape, strides = tuple(result[b] for b in back), tuple(dense[b] for b in back)
        return total
    return cost


for _op in ("fftn", "ifftn", "rfftn", "irfftn"):
    implements(_op)(_transform(_op))
    declares(_op)(_cost(_op))

from . import spectral  # noqa: E402,F401  (registers stft and istft)

__all__ = ["launch_transform", "transform_plan", "radices", "norm_scale", "steps", "check_dtype", "fusable", "tile_factors", "column_radices", "frames_in_place",
           "FUSED_UP_TO"]
