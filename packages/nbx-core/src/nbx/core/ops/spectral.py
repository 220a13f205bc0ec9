"""Short-time Fourier transforms and their windows, spelled as torch (stft, istft, hann_window,
hamming_window) and torchaudio (melscale_fbanks).

stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode='reflect',
normalized=False, onesided=None, return_complex=None): frames of n_fft samples every hop_length
(n_fft // 4), each multiplied by the window (ones of win_length when None) centred in n_fft, then
an FFT; center pads n_fft // 2 each side with pad_mode first. The result is (B?, freqs, frames),
complex. istft inverts it by an overlap-add divided by the window's squared envelope (refused by
name where the envelope vanishes, as torch). On Triton devices nbx.kernels.fft.spectral runs them
on the FFT kernels (complex64 and real float32 / half signals).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes, reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..fft import complex_dtype, real_dtype
from ..tensor import Tensor, from_numpy
from ._common import wrap

PAD_MODES = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def _window_array(kind: str, length: int, periodic: bool, alpha: float = 0.54, beta: float = 0.46) -> np.ndarray:
    if length == 1:
        return np.ones(1)
    n = length if periodic else length - 1
    phase = 2 * np.pi * np.arange(length) / n
    if kind == "hann":
        return 0.5 - 0.5 * np.cos(phase)
    return alpha - beta * np.cos(phase)


def hann_window(window_length: int, periodic: bool = True, dtype=None, device=None) -> Tensor:
    """torch.hann_window: 0.5 - 0.5 cos(2 pi n / N), N = length (periodic) or length - 1."""
    dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    return from_numpy(_window_array("hann", int(window_length), periodic).astype(dt.host), device)


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46,
                   dtype=None, device=None) -> Tensor:
    """torch.hamming_window: alpha - beta cos(2 pi n / N)."""
    dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    return from_numpy(_window_array("hamming", int(window_length), periodic, alpha, beta).astype(dt.host), device)


def _hz_to_mel(f, scale: str):
    f = np.asarray(f, np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    linear = f / (200.0 / 3)
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (math.log(6.4) / 27.0), linear)


def _mel_to_hz(m, scale: str):
    m = np.asarray(m, np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    return np.where(m >= 15.0, 1000.0 * np.exp((math.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))


def melscale_fbanks(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int, norm=None,
                    mel_scale: str = "htk", dtype=None, device=None) -> Tensor:
    """torchaudio.functional.melscale_fbanks: (n_freqs, n_mels) triangular filters on the mel scale
    ('htk' or 'slaney'), norm None or 'slaney' (each filter's area 1)."""
    if mel_scale not in ("htk", "slaney") or norm not in (None, "slaney"):
        raise ArgumentError(f"melscale_fbanks: mel_scale {mel_scale!r} (htk, slaney), norm {norm!r} (None, slaney)")
    if not 0 <= f_min < f_max or n_mels < 1 or n_freqs < 2:
        raise ArgumentError(f"melscale_fbanks: needs 0 <= f_min < f_max, n_mels >= 1, n_freqs >= 2")
    freqs = np.linspace(0, sample_rate // 2, n_freqs)
    f_pts = _mel_to_hz(np.linspace(_hz_to_mel(f_min, mel_scale), _hz_to_mel(f_max, mel_scale), n_mels + 2), mel_scale)
    f_diff = np.diff(f_pts)
    slopes = f_pts[None, :] - freqs[:, None]
    down, up = -slopes[:, :-2] / f_diff[:-1], slopes[:, 2:] / f_diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    if norm == "slaney":
        fb = fb * (2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels]))[None, :]
    dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    return from_numpy(fb.astype(dt.host), device)


def _full_window(window: Tensor | None, n_fft: int, win_length: int, host) -> np.ndarray:
    w = np.ones(win_length, host) if window is None else window.numpy().astype(host)
    left = (n_fft - win_length) // 2
    return np.pad(w, (left, n_fft - win_length - left))


def _stft_args(op: str, n_fft: int, hop_length, win_length, window):
    n_fft = int(n_fft)
    hop = n_fft // 4 if hop_length is None else int(hop_length)
    win = n_fft if win_length is None else int(win_length)
    if n_fft < 1 or hop < 1 or not 0 < win <= n_fft:
        raise ArgumentError(f"{op}: needs n_fft >= 1, hop_length >= 1 and 0 < win_length <= n_fft "
                            f"(got {n_fft}, {hop}, {win})")
    if window is not None and (not isinstance(window, Tensor) or tuple(window.shape) != (win,)):
        raise ShapeError(f"{op}: window must be a 1-D tensor of win_length {win}")
    return n_fft, hop, win


def stft(input: Tensor, n_fft: int, hop_length=None, win_length=None, window=None, center: bool = True,
         pad_mode: str = "reflect", normalized: bool = False, onesided=None, return_complex=None) -> Tensor:
    """torch.stft (see the module's text); return_complex=False is refused (torch has dropped the
    real view as well)."""
    if not isinstance(input, Tensor) or input.ndim not in (1, 2):
        raise ShapeError("stft takes a 1-D signal or a 2-D batch of signals")
    if return_complex is False:
        raise NotSupportedError("stft: return_complex=False is not supported; take the real view of the result")
    if pad_mode not in PAD_MODES:
        raise ArgumentError(f"stft: pad_mode {pad_mode!r} is none of {sorted(PAD_MODES)}")
    n_fft, hop, win = _stft_args("stft", n_fft, hop_length, win_length, window)
    length = input.shape[-1] + (2 * (n_fft // 2) if center else 0)
    if length < n_fft or (center and pad_mode == "reflect" and n_fft // 2 >= input.shape[-1]):
        raise ShapeError(f"stft: a signal of {input.shape[-1]} samples is too short for n_fft {n_fft} "
                         f"(center {center}, pad_mode {pad_mode!r})")
    onesided = input.dtype.kind != "complex" if onesided is None else bool(onesided)
    if onesided and input.dtype.kind == "complex":
        raise DTypeError("stft: a complex signal has no onesided transform")
    return implementation("stft", input.device)(input, n_fft, hop, win, window, bool(center), pad_mode,
                                                bool(normalized), onesided)


def _stft_reference(x, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
                    normalized=False, onesided=None, precision=reference.NATIVE):
    n_fft, hop, win = _stft_args("stft", n_fft, hop_length, win_length, window)
    onesided = x.dtype.kind != "complex" if onesided is None else onesided
    wide = precision == reference.FLOAT64
    host = (np.complex128 if x.dtype.kind == "complex" else np.float64) if wide else (
        complex_dtype(x.dtype).host if x.dtype.kind == "complex" else real_dtype(x.dtype).host)
    a = x.numpy().astype(host, copy=False)
    if center:
        a = np.pad(a, [(0, 0)] * (a.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode=PAD_MODES[pad_mode])
    frames = 1 + (a.shape[-1] - n_fft) // hop
    taps = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :]
    framed = a[..., taps] * _full_window(window, n_fft, win, np.float64 if wide else real_dtype(x.dtype).host)
    spec = (np.fft.rfft if onesided else np.fft.fft)(framed, axis=-1, norm="ortho" if normalized else "backward")
    return np.swapaxes(spec, -1, -2)


def istft(input: Tensor, n_fft: int, hop_length=None, win_length=None, window=None, center: bool = True,
          normalized: bool = False, onesided=None, length=None, return_complex: bool = False) -> Tensor:
    """torch.istft: the signal whose stft is input (B?, freqs, frames), by overlap-add."""
    if not isinstance(input, Tensor) or input.dtype.kind != "complex" or input.ndim not in (2, 3):
        raise DTypeError("istft takes a complex spectrogram (freqs, frames) or (B, freqs, frames)")
    n_fft, hop, win = _stft_args("istft", n_fft, hop_length, win_length, window)
    onesided = input.shape[-2] != n_fft if onesided is None else bool(onesided)
    if input.shape[-2] != (n_fft // 2 + 1 if onesided else n_fft):
        raise ShapeError(f"istft: {input.shape[-2]} frequencies do not match n_fft {n_fft} (onesided {onesided})")
    if onesided and return_complex:
        raise ArgumentError("istft: a onesided spectrogram gives a real signal (return_complex=False)")
    return implementation("istft", input.device)(input, n_fft, hop, win, window, bool(center), bool(normalized),
                                                 onesided, None if length is None else int(length),
                                                 bool(return_complex))


def _istft_reference(spec, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
                     onesided=None, length=None, return_complex=False, precision=reference.NATIVE):
    n_fft, hop, win = _stft_args("istft", n_fft, hop_length, win_length, window)
    onesided = spec.shape[-2] != n_fft if onesided is None else onesided
    wide = precision == reference.FLOAT64
    real_host = np.float64 if wide else real_dtype(spec.dtype).host
    s = np.swapaxes(spec.numpy().astype(np.complex128 if wide else spec.dtype.host), -1, -2)
    norm = "ortho" if normalized else "backward"
    frames = np.fft.irfft(s, n=n_fft, axis=-1, norm=norm) if onesided else np.fft.ifft(s, axis=-1, norm=norm)
    if not return_complex:
        frames = frames.real
    w = _full_window(window, n_fft, win, real_host)
    count = frames.shape[-2]
    total = n_fft + hop * (count - 1)
    y = np.zeros(frames.shape[:-2] + (total,), frames.dtype)
    envelope = np.zeros(total, real_host)
    for f in range(count):  # overlap-add, frame by frame
        y[..., f * hop:f * hop + n_fft] += frames[..., f, :] * w
        envelope[f * hop:f * hop + n_fft] += w * w
    start = n_fft // 2 if center else 0
    end = total - (n_fft // 2 if center else 0) if length is None else start + length
    y, envelope = y[..., start:min(end, total)], envelope[start:min(end, total)]
    if np.any(np.abs(envelope) < 1e-11):
        raise ArgumentError("istft: the window's squared overlap-add vanishes somewhere (NOLA fails)")
    y = y / envelope
    if end > total:
        y = np.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, end - total)])
    return y


reference.register("stft", _stft_reference)
reference.register("istft", _istft_reference)


@register("stft", "cpu")
def _stft_cpu(x, *args):
    return wrap(_stft_reference(x, *args), complex_dtype(x.dtype))


@register("istft", "cpu")
def _istft_cpu(spec, *args):
    out = _istft_reference(spec, *args)
    return wrap(out, spec.dtype if args[-1] else real_dtype(spec.dtype))


__all__ = ["stft", "istft", "hann_window", "hamming_window", "melscale_fbanks"]
