"""matmul: nbx's tiled Triton kernel against torch (cuBLAS) on the same GPU, in one process (torch
is the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_matmul.py

Shapes are M x N x K: a square 4096^3 product with both operands row-major ("nn"), and the
products of a Llama-7B-sized linear layer, x @ W.T with W stored (out, in) ("nt"): 32 decode rows,
and 4096 prefill rows through the MLP's up (K 4096 -> N 11008) and down (K 11008 -> N 4096)
projections. float32 runs in IEEE float32 on both sides (torch's TF32 is switched off).

Timing: CUDA events around back-to-back calls queued behind a GPU spin (peer_timing.measure), each
call reading another copy of its operands, the copies together past the L2. TFLOP/s counts
2 M N K. ratio = torch time / nbx time (above 1: nbx faster). The cold columns time one call alone
after an L2 flush, the certifier's method (peer_timing.cold), for nbx and torch: nbx's cold time is
what the certificate's best_ms states for the same launch key.
"""
from __future__ import annotations

import argparse
import sys

import torch

import nbx.core as nbx
from peer_timing import allocator_name, both, deviation, spin_cycles_per_ms

# (name, M, N, K, layout of (A, B))
SHAPES = [
    ("square", 4096, 4096, 4096, "nn"),
    ("decode 32 rows", 32, 4096, 4096, "nt"),
    ("mlp up", 4096, 11008, 4096, "nt"),
    ("mlp down", 4096, 4096, 11008, "nt"),
]
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
L2_FLUSH_BYTES = 256 << 20   # operand copies per case add up to at least this (the H200's L2 is 50 MB)


def operands(m, n, k, layout, tdt, gen):
    a = torch.randn((m, k), device="cuda", dtype=tdt, generator=gen)
    if layout == "nt":  # a linear layer's weight, stored (out, in) and read transposed
        return a, torch.randn((n, k), device="cuda", dtype=tdt, generator=gen).T
    return a, torch.randn((k, n), device="cuda", dtype=tdt, generator=gen)


def case(m, n, k, layout, dtype):
    tdt = DTYPES[dtype]
    item = torch.finfo(tdt).bits // 8
    copies = max(1, -(-L2_FLUSH_BYTES // ((m * k + k * n) * item)))
    gen = torch.Generator(device="cuda").manual_seed(0)
    pairs = [operands(m, n, k, layout, tdt, gen) for _ in range(copies)]
    views = [(nbx.from_dlpack(a), nbx.from_dlpack(b)) for a, b in pairs]
    return copies, (lambda i: nbx.matmul(*views[i])), (lambda i: torch.matmul(*pairs[i]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="*", default=list(DTYPES), help="only these dtypes")
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    print(f"# GPU spin: {cycles / 1e3:.0f} MHz effective")
    print(f"{'case':<15} {'M x N x K':<18} {'AB':<3} {'dtype':<9} {'nbx us':>9} {'torch us':>9} {'nbx TF/s':>9} "
          f"{'torch TF/s':>10} {'ratio':>6} {'host us nbx/torch':>18} {'deviation':>10} {'cold us nbx/torch':>19}")
    for name, m, n, k, layout in SHAPES:
        for dtype in args.dtypes:
            shape = f"{m}x{n}x{k}"
            try:
                copies, nbx_fn, torch_fn = case(m, n, k, layout, dtype)
                dev = deviation(nbx_fn(0), torch_fn(0))
                ours, peer = both(nbx_fn, torch_fn, copies, cycles)
            except Exception as exc:  # report and go on: one failing case must not hide the rest
                print(f"{name:<15} {shape:<18} {layout:<3} {dtype:<9} FAILED: {type(exc).__name__}: {exc}")
                continue
            flops = 2 * m * n * k
            flag = " (host-bound)" if ours.host_bound or peer.host_bound else ""
            print(f"{name:<15} {shape:<18} {layout:<3} {dtype:<9} {ours.gpu_us:9.1f} {peer.gpu_us:9.1f} "
                  f"{flops / ours.gpu_us / 1e6:9.1f} {flops / peer.gpu_us / 1e6:10.1f} {peer.gpu_us / ours.gpu_us:6.2f} "
                  f"{ours.host_us:8.1f}/{peer.host_us:<8.1f} {dev:10.2e} {ours.cold_us:9.1f}/{peer.cold_us:<9.1f}{flag}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
