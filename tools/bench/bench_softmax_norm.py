"""Softmax, log_softmax, layer norm, RMS norm and the fused residual add + RMS norm: nbx against
torch on the same GPU, in one process (torch is the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_softmax_norm.py

Timing: CUDA events around `iters` back-to-back calls queued behind a GPU spin (torch.cuda._sleep),
so the events see GPU time alone, not the host's launch overhead (reported apart, as host us a
call). Each call reads another copy of its inputs, and the copies together exceed the L2, so the
reads come from HBM. TB/s counts the bytes an op must move once: inputs read and outputs written.
ratio = torch time / nbx time (above 1: nbx faster).
The first line of each shape and dtype is the ceiling: a clone, which reads and writes the same
bytes as a softmax (for a 64 MiB move the H200 copies at about 3.6 TB/s, not its 4.0-4.1 on
larger ones: each launch's ramp-up and tail are a larger share). The cold columns time one call alone after
an L2 flush, the certifier's method (peer_timing.cold), for nbx and torch: nbx's cold time is what the
certificate's best_ms states for the same launch key.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import nbx.core as nbx
from peer_timing import allocator_name, both, deviation, spin_cycles_per_ms

SHAPES = [(4096, 4096), (32, 151936), (2048, 8192)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
L2_FLUSH_BYTES = 256 << 20   # input copies per case add up to at least this (the H200's L2 is 50 MB)


def nbx_view(t: torch.Tensor):
    return nbx.from_dlpack(t)


def cases(shape, dtype):
    rows, n = shape
    tdt = DTYPES[dtype]
    item = torch.finfo(tdt).bits // 8
    nbytes = rows * n * item
    copies = max(1, -(-L2_FLUSH_BYTES // nbytes))
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(shape, device="cuda", dtype=tdt, generator=gen) * 3 for _ in range(copies)]
    rs = [torch.randn(shape, device="cuda", dtype=tdt, generator=gen) for _ in range(copies)]
    w = torch.randn(n, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(n, device="cuda", dtype=tdt, generator=gen)
    nx, nr, nw, nb = [nbx_view(x) for x in xs], [nbx_view(r) for r in rs], nbx_view(w), nbx_view(b)
    param = n * item
    yield ("clone", 2 * nbytes, copies, lambda i: nx[i].clone(), lambda i: xs[i].clone())
    yield ("softmax", 2 * nbytes, copies, lambda i: nbx.softmax(nx[i], -1), lambda i: torch.softmax(xs[i], -1))
    yield ("log_softmax", 2 * nbytes, copies, lambda i: nbx.log_softmax(nx[i], -1),
           lambda i: torch.log_softmax(xs[i], -1))
    yield ("layer_norm", 2 * nbytes + 2 * param, copies, lambda i: nbx.layer_norm(nx[i], (n,), nw, nb, 1e-5),
           lambda i: F.layer_norm(xs[i], (n,), w, b, 1e-5))
    yield ("rms_norm", 2 * nbytes + param, copies, lambda i: nbx.rms_norm(nx[i], (n,), nw, 1e-6),
           lambda i: F.rms_norm(xs[i], (n,), w, 1e-6))
    yield ("add_rms_norm", 4 * nbytes + param, copies, lambda i: nbx.add_rms_norm(nx[i], nr[i], nw, 1e-6),
           lambda i: F.rms_norm(xs[i] + rs[i], (n,), w, 1e-6))


def first(result):
    return result[0] if isinstance(result, tuple) else result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", help="only these ops")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    print(f"# GPU spin: {cycles / 1e3:.0f} MHz effective")
    header = (f"{'op':<13} {'dtype':<9} {'shape':<13} {'nbx us':>8} {'torch us':>9} {'nbx TB/s':>9} "
              f"{'torch TB/s':>10} {'ratio':>6} {'host us nbx/torch':>18} {'deviation':>10} {'cold us nbx/torch':>18} "
              f"{'ratio':>6}")
    print(header)
    rows = []
    for shape in SHAPES:
        for dtype in DTYPES:
            for op, nbytes, copies, nbx_fn, torch_fn in cases(shape, dtype):
                if args.ops and op not in args.ops:
                    continue
                try:
                    dev = deviation(first(nbx_fn(0)), torch_fn(0))
                    ours, peer = both(nbx_fn, torch_fn, copies, cycles)
                except Exception as exc:  # report and go on: one failing case must not hide the rest
                    print(f"{op:<13} {dtype:<9} {str(shape):<13} FAILED: {type(exc).__name__}: {exc}")
                    continue
                flag = " (host-bound)" if ours.host_bound or peer.host_bound else ""
                line = (f"{op:<13} {dtype:<9} {str(shape):<13} {ours.gpu_us:8.1f} {peer.gpu_us:9.1f} "
                        f"{nbytes / ours.gpu_us / 1e6:9.2f} {nbytes / peer.gpu_us / 1e6:10.2f} "
                        f"{peer.gpu_us / ours.gpu_us:6.2f} {ours.host_us:8.1f}/{peer.host_us:<8.1f} {dev:10.2e} "
                        f"{ours.cold_us:8.1f}/{peer.cold_us:<9.1f} {peer.cold_us / ours.cold_us:6.2f}{flag}")
                print(line, flush=True)
                rows.append(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
