"""stft and istft on the FFT passes.

stft: the signal padded by nbx.pad (center), its frames a strided view (frames x n_fft, hop apart:
no copy), multiplied by the window centred in n_fft (the one dense pass that forms the frames),
then rfft (onesided) or fft of each frame; the result (B?, freqs, frames) is a transposed view.
Where the served setting runs an n_fft-point rfft as the row tile, a one-signal onesided stft reads
its frames in place and windows them as it loads (one launch after the padding, no frames in memory).
istft: irfft (onesided) or ifft of each frame, the window, then the overlap-add kernel of
conv_transpose1d (each output gathers its frames' taps, no atomics; the trimming of center as its
padding) and a product by the inverse of the window's squared envelope. The envelope is a function
of the window alone: formed on the host from the window's values, where the NOLA condition is
checked as torch checks it (a read of the window back to the host).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from nbx.core import dtypes
from nbx.core.errors import ArgumentError
from nbx.core.ops.creation import asarray
from nbx.core.ops.datamove import pad
from nbx.core.tensor import Tensor

from nbx.core.layout import contiguous_strides

from .. import launch
from ..cost import LAUNCH, RESULT, Buffer, Cost, declares, price
from ..conv.kernel import overlap_add_kernel
from ..elementwise import _parts as pairs_of
from ..plans import Launch, LaunchPlan, Slot, cached, execute, output
from ..registry import implements
from ..rows import pow2_at_least
from . import _along, check_dtype, transform_plan


def _full_window(window: Tensor | None, n_fft: int, win: int, device) -> Tensor | None:
    """The window zero-padded to n_fft, centred (None: a window of ones, no product needed)."""
    if window is None:
        return None if win == n_fft else asarray(_centred(np.ones(win, np.float32), n_fft), device=device)
    left = (n_fft - win) // 2
    return pad(window.to(dtype=dtypes.float32), (left, n_fft - win - left)) if win < n_fft else window


def _centred(w: np.ndarray, n_fft: int) -> np.ndarray:
    left = (n_fft - len(w)) // 2
    return np.pad(w, (left, n_fft - len(w) - left))


def _framed(x: Tensor, n_fft: int, hop: int, window: Tensor | None) -> Tensor:
    """(B, frames, n_fft) frames of a contiguous (B, L) signal, times the window, dense."""
    batch, length = x.shape
    count = 1 + (length - n_fft) // hop
    frames = Tensor(x.storage, x.dtype, (batch, count, n_fft), (x.strides[0], hop, 1), x.storage_offset)
    return frames.contiguous() if window is None else _framed_product(frames, window.to(dtype=dtypes.float32))


@implements("stft")
def _stft(x, n_fft, hop, win, window, center, pad_mode, normalized, onesided):
    check_dtype("stft", x.dtype)
    signal = x.reshape(1, -1) if x.ndim == 1 else x
    if center:
        signal = pad(signal.reshape(signal.shape[0], 1, signal.shape[1]), (n_fft // 2, n_fft // 2),
                     mode=pad_mode).reshape(signal.shape[0], -1)
    signal, norm = signal.contiguous(), "ortho" if normalized else "backward"
    full = _full_window(window, n_fft, win, x.device)
    count = 1 + (signal.shape[1] - n_fft) // hop
    plan = _in_place(signal.shape[0], onesided, count, n_fft, signal.dtype, norm, hop, full is not None, x.device)
    if plan is not None:
        window_values = None if full is None else full.to(dtype=dtypes.float32).contiguous()
        out = execute(plan, {"x": signal, "window": window_values, "out": None})["out"]
        spec = Tensor(out.storage, dtypes.complex64, (1, count, n_fft // 2 + 1))
    else:
        spec = _along(_framed(signal, n_fft, hop, full), 2, n_fft, "rfft" if onesided else "fft", norm)
    spec = spec.transpose(1, 2)
    return spec[0] if x.ndim == 1 else spec


def _in_place(batch: int, onesided: bool, count: int, n_fft: int, dtype, norm: str, hop: int, windowed: bool,
              device) -> LaunchPlan | None:
    """The plan of the row tile reading stft's frames in place (one signal, onesided), or None:
    its frames are formed first (the served setting runs no row tile for them)."""
    if batch != 1 or not onesided or count < 1:
        return None
    plan = transform_plan(count, n_fft, dtype, n_fft, "rfft", norm, device, frames=(hop, windowed))
    return plan if plan.launches else None


def _envelope_inverse(window: Tensor | None, n_fft: int, win: int, hop: int, count: int, start: int, length: int):
    """1 / the window's squared overlap-add over the kept samples [start, start + length) (0 past
    the frames' end, which the overlap-add leaves zero), checked where it vanishes (NOLA)."""
    w = np.ones(win) if window is None else window.numpy().astype(np.float64)
    w = _centred(w, n_fft)
    total = n_fft + hop * (count - 1)
    envelope = np.zeros(total)
    for f in range(count):
        envelope[f * hop:f * hop + n_fft] += w * w
    kept = envelope[start:min(start + length, total)]
    if np.any(np.abs(kept) < 1e-11):
        raise ArgumentError("istft: the window's squared overlap-add vanishes somewhere (NOLA fails)")
    inverse = np.zeros(length, np.float32)
    inverse[:len(kept)] = 1.0 / kept
    return inverse


def _overlap_plan(batch, count, n_fft, hop, start, length, parts, device) -> LaunchPlan:
    """out[b, t (, part)] = sum over frames f of frames[b, f, t + start - f hop (, part)]: the
    col2im kernel with the frame's taps as its kernel taps and the parts as its channels."""
    tile = launch.tiles("fft", device)   # a pass program's points: the frames' samples a program sums
    block = min(tile["block_j"] * tile["radix"], pow2_at_least(length))
    row = count * n_fft * parts
    args = (Slot("frames"), Slot("frames"), Slot("out"), parts, count, length, n_fft, hop, start, 1,
            row, 1, parts, n_fft * parts, length * parts, 1, parts)
    one = Launch(overlap_add_kernel, (batch, -(-length // block), 1), args,
                 dict(HAS_BIAS=False, BLOCK_O=parts, BLOCK_L=block, num_warps=tile["num_warps"]))
    shape = (batch, length, parts) if parts == 2 else (batch, length)
    return LaunchPlan(device, (one,), (output("out", shape, dtypes.float32),))


@implements("istft")
def _istft(spec, n_fft, hop, win, window, center, normalized, onesided, length, return_complex):
    check_dtype("istft", spec.dtype)
    batched = spec if spec.ndim == 3 else spec.reshape(1, *spec.shape)
    frames_in = batched.transpose(1, 2)    # (B, frames, freqs)
    norm = "ortho" if normalized else "backward"
    frames = _along(frames_in, 2, n_fft, "irfft" if onesided else "ifft", norm)
    if not onesided and not return_complex:  # the real parts only
        frames = pairs_of(frames.contiguous())[..., 0]
    full = _full_window(window, n_fft, win, spec.device)
    if full is not None:
        frames = _framed_product(frames, full)
    frames = frames.contiguous()
    batch, count = frames.shape[0], frames.shape[1]
    start = n_fft // 2 if center else 0
    total = n_fft + hop * (count - 1)
    kept = total - 2 * start if length is None else length
    parts = 2 if frames.dtype.kind == "complex" else 1
    plan = cached("istft_overlap_add", (batch, count, n_fft, hop, start, kept, parts, spec.device),
                  lambda: _overlap_plan(batch, count, n_fft, hop, start, kept, parts, spec.device))
    source = pairs_of(frames) if parts == 2 else frames
    summed = execute(plan, {"frames": source})["out"]
    inverse = asarray(_envelope_inverse(window, n_fft, win, hop, count, start, kept), device=spec.device)
    y = summed * (inverse.reshape(kept, 1) if parts == 2 else inverse)
    if parts == 2:
        y = Tensor(y.storage, dtypes.complex64, (batch, kept))
    return y[0] if spec.ndim == 2 else y


def _framed_product(frames: Tensor, window: Tensor) -> Tensor:
    """frames (..., n_fft) times the window (n_fft), dense; a complex frame's both parts."""
    if frames.dtype.kind == "complex":
        parts = pairs_of(frames.contiguous()) * window.reshape(window.shape[0], 1)
        return Tensor(parts.storage, dtypes.complex64, parts.shape[:-1])
    return frames * window


__all__: list[str] = []


# ---- declared costs: the padded signal and the windowed frames, then the transforms' own --------

def _layout_only(shape, dtype, device):
    """What the transforms' cost reads of a tensor (its layout), for a buffer not made yet."""
    return SimpleNamespace(shape=tuple(shape), strides=contiguous_strides(tuple(shape)), dtype=dtype, device=device)


def _work_dtype(dtype):
    return dtypes.complex64 if dtype.kind == "complex" else dtypes.float32


@declares("stft")
def _stft_cost(x, n_fft, hop, win, window, center, pad_mode, normalized, onesided) -> Cost:
    batch = 1 if x.ndim == 1 else x.shape[0]
    length = x.shape[-1] + (2 * (n_fft // 2) if center else 0)
    count = 1 + (length - n_fft) // hop
    plan = _in_place(batch, onesided, count, n_fft, x.dtype, "ortho" if normalized else "backward", hop,
                     window is not None or win < n_fft, x.device)
    if plan is not None:   # the padding, then one launch
        padded = (Buffer("padded", length * x.dtype.itemsize, LAUNCH),) if center else ()
        return Cost(plan.buffers() + padded, plan.detail.bytes_moved + 2 * sum(b.nbytes for b in padded),
                    plan.detail.flops, len(plan.launches) + len(padded))
    work = _work_dtype(x.dtype)
    made = [Buffer("frames", batch * count * n_fft * work.itemsize, LAUNCH)]
    if center:
        made.append(Buffer("padded", batch * length * x.dtype.itemsize, LAUNCH))
    moved = sum(b.nbytes for b in made) * 2
    frames = _layout_only((batch, count, n_fft), work, x.device)
    return Cost(tuple(made), moved, batch * count * n_fft, len(made)) + price(
        "rfftn" if onesided else "fftn", frames, (n_fft,), (2,), "ortho" if normalized else "backward")


@declares("istft")
def _istft_cost(spec, n_fft, hop, win, window, center, normalized, onesided, length, return_complex) -> Cost:
    batch = 1 if spec.ndim == 2 else spec.shape[0]
    count = spec.shape[-1]
    start = n_fft // 2 if center else 0
    kept = n_fft + hop * (count - 1) - 2 * start if length is None else length
    parts = 2 if return_complex else 1
    bins = _layout_only((batch, count, spec.shape[-2]), spec.dtype, spec.device)
    made = (Buffer("frames", batch * count * n_fft * 4 * parts, LAUNCH), Buffer("summed", batch * kept * 4 * parts,
                                                                               LAUNCH),
            Buffer("envelope", kept * 4, LAUNCH), Buffer("out", batch * kept * 4 * parts, RESULT))
    transform = price("irfftn" if onesided else "ifftn", bins, (n_fft,), (2,), "ortho" if normalized else "backward")
    transform = Cost(tuple(Buffer(b.name, b.nbytes, LAUNCH) for b in transform.buffers), transform.bytes_moved,
                     transform.flops, transform.launches)   # the frames' transform is the overlap-add's input
    return transform + Cost(made, 2 * sum(b.nbytes for b in made), batch * count * n_fft * parts, 3)
