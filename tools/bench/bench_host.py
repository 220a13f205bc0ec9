"""Eager host cost per call: small nbx ops against torch eager on the same GPU, in one process, with
the goals of issue 14 (torch is the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_host.py

The tensors are small, so the GPU work is a few microseconds and what is measured is the host's:
front-end, dispatch, plan lookup, output allocation, launch. Two timings per op, the better of
five batches each:
- `wall us`: `calls` back-to-back calls then one synchronize, divided by the calls (the host's
  throughput: what an eager decode step of many small ops pays per op);
- `kernel us`: the GPU time a call, host overhead excluded: back-to-back calls queued behind a
  GPU spin, between two CUDA events (peer_timing.measure).
ratio = nbx wall / torch wall; the goal column is the issue's bound on it (chain: torch / nbx >= 0.7).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import nbx.core as nbx
from peer_timing import allocator_name, measure, spin_cycles_per_ms

HIDDEN = 4096


def wall_us(fn, calls: int, batches: int = 5) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e6 / calls)
    return best


def cases():
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(4096, device="cuda", generator=gen)
    x = torch.randn(1, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
    r = torch.randn(1, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
    big = torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    na, nx, nr, nw, nbig = (nbx.from_dlpack(t) for t in (a, x, r, w, big))
    yield "a + b (float32, 4096)", 1.5, lambda: na + na, lambda: a + a
    yield "softmax (bfloat16, 1 x 4096)", 2.0, lambda: nbx.softmax(nx, dim=-1), lambda: torch.softmax(x, dim=-1)
    yield "rms_norm (bfloat16, 1 x 4096)", 2.0, lambda: nbx.rms_norm(nx, (HIDDEN,), nw), \
        lambda: F.rms_norm(x, (HIDDEN,), w)
    yield "sum over the row (bfloat16, 1 x 4096)", 2.0, lambda: nbx.sum(nx, dim=-1), lambda: torch.sum(x, dim=-1)
    yield "x @ W.T (bfloat16, 1 x 4096 @ 4096 x 4096)", 2.0, lambda: nx @ nbig.T, lambda: x @ big.T
    yield "chain silu(rms_norm(x + r, w)) * x (bfloat16, 1 x 4096)", None, \
        lambda: nbx.silu(nbx.rms_norm(nx + nr, (HIDDEN,), nw)) * nx, \
        lambda: F.silu(F.rms_norm(x + r, (HIDDEN,), w)) * x


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | nbx allocator {allocator_name()}")
    cycles = spin_cycles_per_ms()
    print(f"{'op':58s} {'nbx wall us':>11s} {'torch wall us':>13s} {'nbx kernel us':>13s} "
          f"{'torch kernel us':>15s} {'ratio':>6s}  goal")
    for name, goal, nbx_fn, torch_fn in cases():
        nbx_wall, torch_wall = wall_us(nbx_fn, args.calls), wall_us(torch_fn, args.calls)
        nbx_gpu = measure(lambda i: nbx_fn(), 1, cycles)[0]
        torch_gpu = measure(lambda i: torch_fn(), 1, cycles)[0]
        ratio = nbx_wall / torch_wall
        if goal is None:  # the chain's goal: nbx at least 0.7x torch's speed
            verdict = f"torch/nbx {1 / ratio:.2f} >= 0.7: {'met' if 1 / ratio >= 0.7 else 'MISSED'}"
        else:
            verdict = f"<= {goal}: {'met' if ratio <= goal else 'MISSED'}"
        print(f"{name:58s} {nbx_wall:11.2f} {torch_wall:13.2f} {nbx_gpu:13.2f} {torch_gpu:15.2f} {ratio:6.2f}  "
              f"{verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
