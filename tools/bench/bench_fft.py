"""rfft / irfft of batched rows (2**10 to 2**20 points) and Whisper's stft front-end: nbx against
torch.fft (cuFFT) on the same GPU, in one process (torch is the peer; nbx never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 NBX_AUTOTUNE_NO_SWEEP=1 \
        python3 tools/bench/bench_fft.py

Each rfft / irfft case transforms 2**22 float32 points (rows x n: 16 MiB of signal), reading one of
several input copies a call so the reads come from HBM; stft is 30 s of 16 kHz audio, n_fft 400,
hop 160, a periodic Hann window, centred with reflect padding (Whisper's log-mel front-end before
the filterbank). Per case: the shapes, nbx and torch GPU time a call back to back (peer_timing.measure)
and cold (peer_timing.cold: one call after an L2 flush), the host time a call, the wall time of one
call (peer_timing.call_ms: host overhead included), GB/s of the bytes a transform must move once,
the ratio torch / nbx (above 1: nbx faster) and the deviation from torch. It finishes in under a
minute on the H200 (NBX_AUTOTUNE_NO_SWEEP=1: the device file's tile, no sweep, until certified).
Every case is timed again through the row tile (tile_rows rows a program stacked in two dense DFT
products on tl.dot, tile_steps groups of them in turn; past 2048 points one or two column passes
first: the `fused` choice of the fft tunable, off in the device file), its products on the tensor
cores (tf32x3); at 2**10 points also one group a program, 8 rows, and exact (ieee) products; the
stft's frames then read in place by the tile, windowed as loaded (the padding included in its time).
"""
from __future__ import annotations

import numpy as np
import torch

import nbx.core as nbx
from nbx.core.tensor import Tensor
from nbx.kernels import plans
from nbx.kernels.fft import launch_transform, transform_plan
from peer_timing import banner, both, call_ms

POINTS = 1 << 22
LENGTHS = [1 << e for e in (10, 12, 14, 16, 18, 20)]
COPIES = 4
WHISPER = dict(samples=30 * 16000, n_fft=400, hop=160)
ROW_TILE = {"fused": 1, "radix": 4, "block_j": 128, "num_warps": 8, "tf32x3": 1, "tile_rows": 4, "tile_steps": 4}
# the row tile's settings: the first at every length, the second at the stft too, the rest at 2**10:
# 4 rows stacked in the products' M, 4 groups a program in turn; then one group, 8 rows, exact products
TILES = {"tf32x3 4 rows x 4": ROW_TILE, "tf32x3 4 rows x 1": {**ROW_TILE, "tile_steps": 1},
         "tf32x3 8 rows x 4": {**ROW_TILE, "tile_rows": 8}, "ieee 4 rows x 1": {**ROW_TILE, "tf32x3": 0, "tile_steps": 1}}
FIRST_ONLY = (1 << 10,)


def _deviation(a, b: torch.Tensor) -> float:
    a = np.asarray(a.numpy()).astype(np.complex128)
    b = b.cpu().numpy().astype(np.complex128)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def _row_tile_cases(rows, n, nx, xs, nspecs, specs, moved, tiles):
    for precision, tile in tiles:
        yield (f"rfft  {rows} x {n} float32, row tile {precision}", moved,
               lambda i, t=tile: launch_transform(nx[i], n, "rfft", "backward", setting=t),
               lambda i: torch.fft.rfft(xs[i]))
        yield (f"irfft {rows} x {n // 2 + 1} complex64 -> {n}, row tile {precision}", moved,
               lambda i, t=tile: launch_transform(nspecs[i], n, "irfft", "backward", setting=t),
               lambda i: torch.fft.irfft(specs[i], n=n))


def cases():
    """In the order of what matters most, each row printed as it is timed: the row tile at every
    length, the stft, the row tile's other settings at 2**10, then the served settings (the device
    file's until certified)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    signals = []
    for n in LENGTHS:
        rows = POINTS // n
        xs = [torch.randn((rows, n), device="cuda", generator=gen) for _ in range(COPIES)]
        nx = [nbx.from_dlpack(x) for x in xs]
        specs = [torch.fft.rfft(x) for x in xs]
        nspecs = [launch_transform(x, n, "rfft", "backward", setting=ROW_TILE) for x in nx]   # no served compile yet
        signals.append((rows, n, nx, xs, nspecs, specs, rows * (n * 4 + (n // 2 + 1) * 8)))
    tiles = list(TILES.items())
    for signal in signals:
        yield from _row_tile_cases(*signal, tiles[:1])
    n_fft, hop = WHISPER["n_fft"], WHISPER["hop"]
    audio = [torch.randn(WHISPER["samples"], device="cuda", generator=gen) for _ in range(COPIES)]
    naudio = [nbx.from_dlpack(a) for a in audio]
    window, nwindow = torch.hann_window(n_fft, device="cuda"), nbx.hann_window(n_fft, device="cuda")
    frames = 1 + WHISPER["samples"] // hop
    moved = WHISPER["samples"] * 4 + frames * (n_fft // 2 + 1) * 8
    for precision, tile in tiles[:2]:
        yield (f"stft  {WHISPER['samples']} samples n_fft {n_fft} hop {hop} hann, frames in place, row tile {precision}",
               moved, lambda i, t=tile: _stft_in_place(naudio[i], nwindow, n_fft, hop, frames, t),
               lambda i: torch.stft(audio[i], n_fft, hop, window=window, return_complex=True))
    yield (f"stft  {WHISPER['samples']} samples n_fft {n_fft} hop {hop} hann -> {n_fft // 2 + 1} x {frames}", moved,
           lambda i: nbx.stft(naudio[i], n_fft, hop, window=nwindow, return_complex=True),
           lambda i: torch.stft(audio[i], n_fft, hop, window=window, return_complex=True))
    for signal in signals:
        if signal[1] in FIRST_ONLY:
            yield from _row_tile_cases(*signal, tiles[1:])
    for rows, n, nx, xs, nspecs, specs, moved in signals:
        yield (f"rfft  {rows} x {n} float32", moved, lambda i, nx=nx: nbx.fft.rfft(nx[i]),
               lambda i, xs=xs: torch.fft.rfft(xs[i]))
        yield (f"irfft {rows} x {n // 2 + 1} complex64 -> {n}", moved,
               lambda i, s=nspecs, n=n: nbx.fft.irfft(s[i], n=n), lambda i, s=specs, n=n: torch.fft.irfft(s[i], n=n))


def _stft_in_place(signal, window, n_fft: int, hop: int, frames: int, tile: dict):
    """nbx.stft's in-place path under the given setting (the served one picks it once certified)."""
    padded = nbx.pad(signal.reshape(1, 1, -1), (n_fft // 2, n_fft // 2), mode="reflect").reshape(1, -1)
    plan = transform_plan(frames, n_fft, nbx.float32, n_fft, "rfft", "backward", signal.device, tile, frames=(hop, True))
    out = plans.execute(plan, {"x": padded, "window": window, "out": None})["out"]
    return Tensor(out.storage, nbx.complex64, (frames, n_fft // 2 + 1)).transpose(0, 1)


def main() -> int:
    cycles = banner()
    print("case | nbx us | torch us | nbx cold us | torch cold us | nbx host us | nbx wall ms | torch wall ms | "
          "nbx GB/s | ratio | deviation")
    for name, moved, nbx_fn, torch_fn in cases():
        deviation = _deviation(nbx_fn(0), torch_fn(0))
        mine, theirs = both(nbx_fn, torch_fn, COPIES, cycles)
        wall_nbx, wall_torch = call_ms(lambda: nbx_fn(0), 20), call_ms(lambda: torch_fn(0), 20)
        print(f"{name} | {mine.gpu_us:.1f} | {theirs.gpu_us:.1f} | {mine.cold_us:.1f} | {theirs.cold_us:.1f} | "
              f"{mine.host_us:.1f}{' (host-bound)' if mine.host_bound else ''} | {wall_nbx:.3f} | {wall_torch:.3f} | "
              f"{moved / mine.gpu_us / 1e3:.0f} | {theirs.gpu_us / mine.gpu_us:.2f} | {deviation:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
