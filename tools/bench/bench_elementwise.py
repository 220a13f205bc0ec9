"""Elementwise ops and casts: nbx against torch on the same GPU, in one process (torch is the peer
here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_elementwise.py

Cases: add, mul, exp, silu, gelu in float32/bfloat16/float16; casts float32 -> bfloat16 and
bfloat16 -> float32; a broadcast row add and a transposed add; on a large tensor (256 MiB a
tensor) and the inference rows 4096 x 4096, 32 x 151936, 2048 x 8192.

Timing: CUDA events around back-to-back calls queued behind a GPU spin (torch.cuda._sleep), so the
events see GPU time alone. Each call reads another copy of its inputs and the copies add up to at
least 256 MiB (the H200's L2 is 50 MB), so reads come from HBM. TB/s counts the bytes an op must
move: inputs read once, output written once. ratio = torch time / nbx time (above 1: nbx faster).
Settings are nbx.autotune's for each launch key (NBX_AUTOTUNE_REPORT=1 prints where they came from).
The cold columns time one call alone after an L2 flush, the certifier's method (peer_timing.cold), for
nbx and torch: nbx's cold time is what the certificate's best_ms states for the same launch key.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.nn.functional as F

import nbx.core as nbx
from peer_timing import allocator_name, cold, deviation, measure, spin_cycles_per_ms

L2_FLUSH_BYTES = 256 << 20
ROWS = [(4096, 4096), (32, 151936), (2048, 8192)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _inputs(shape, tdt, count, copies, scale=1.0):
    gen = torch.Generator(device="cuda").manual_seed(1)
    made = [[torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen).mul_(scale).to(tdt)
             for _ in range(copies)] for _ in range(count)]
    return made, [[nbx.from_dlpack(t) for t in group] for group in made]


def cases(shape, dtype: str):
    """(label, bytes moved, copies, nbx fn, torch fn) of the ops, one shape and dtype."""
    tdt = DTYPES[dtype]
    item = torch.finfo(tdt).bits // 8
    nbytes = int(np.prod(shape)) * item
    copies = max(1, -(-L2_FLUSH_BYTES // (2 * nbytes)))
    (ta, tb), (na, nb) = _inputs(shape, tdt, 2, copies)
    yield "add", 3 * nbytes, copies, lambda i: na[i] + nb[i], lambda i: ta[i] + tb[i]
    yield "mul", 3 * nbytes, copies, lambda i: na[i] * nb[i], lambda i: ta[i] * tb[i]
    yield "exp", 2 * nbytes, copies, lambda i: nbx.exp(na[i]), lambda i: torch.exp(ta[i])
    yield "silu", 2 * nbytes, copies, lambda i: nbx.silu(na[i]), lambda i: F.silu(ta[i])
    yield "gelu", 2 * nbytes, copies, lambda i: nbx.gelu(na[i]), lambda i: F.gelu(ta[i])
    if dtype == "float32":
        yield ("cast f32->bf16", nbytes + nbytes // 2, copies, lambda i: na[i].to(dtype="bfloat16"),
               lambda i: ta[i].to(torch.bfloat16))
    if dtype == "bfloat16":
        yield ("cast bf16->f32", nbytes * 3, copies, lambda i: na[i].to(dtype="float32"),
               lambda i: ta[i].to(torch.float32))


def _strided(dtype: str):
    shape = (4096, 4096)
    tdt = DTYPES[dtype]
    item = torch.finfo(tdt).bits // 8
    nbytes = shape[0] * shape[1] * item
    copies = max(1, -(-L2_FLUSH_BYTES // (2 * nbytes)))
    (ta,), (na,) = _inputs(shape, tdt, 1, copies)
    (tr,), (nr,) = _inputs(shape[1:], tdt, 1, copies)
    yield ("add row bcast", dtype, shape, 2 * nbytes + shape[1] * item, copies,
           lambda i: na[i] + nr[i], lambda i: ta[i] + tr[i])
    yield ("add a.T + b", dtype, shape, 3 * nbytes, copies,
           lambda i: na[i].permute(1, 0) + na[(i + 1) % copies], lambda i: ta[i].t() + ta[(i + 1) % copies])


def strided_cases():
    for dtype in ("bfloat16", "float32"):
        yield from _strided(dtype)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-large", action="store_true", help="skip the 256 MiB tensors")
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | nbx allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    print(f"{'op':<15} {'dtype':<9} {'shape':<14} {'nbx us':>9} {'torch us':>9} {'nbx TB/s':>8} "
          f"{'torch TB/s':>10} {'ratio':>6} {'deviation':>10} {'cold us nbx/torch':>19} {'ratio':>6}")
    plan = []
    for dtype in DTYPES:
        large = (L2_FLUSH_BYTES // (torch.finfo(DTYPES[dtype]).bits // 8),)
        for shape in ([] if args.no_large else [large]) + ROWS:
            plan += [(label, dtype, shape, nbytes, copies, f_nbx, f_torch)
                     for label, nbytes, copies, f_nbx, f_torch in cases(shape, dtype)]
    ratios = []
    for label, dtype, shape, nbytes, copies, f_nbx, f_torch in list(plan) + list(strided_cases()):
        try:
            dev = deviation(f_nbx(0), f_torch(0)) if np.prod(shape) <= 2 ** 24 else float("nan")
            t_nbx, _, bound_nbx = measure(f_nbx, copies, cycles)
            t_torch, _, bound_torch = measure(f_torch, copies, cycles)
            c_nbx, c_torch = cold(f_nbx), cold(f_torch)
        except Exception as exc:  # one failing case must not hide the others
            print(f"{label:<15} {dtype:<9} {str(shape):<14} FAILED: {type(exc).__name__}: {exc}", flush=True)
            continue
        ratios.append(t_torch / t_nbx)
        flag = " host-bound" if bound_nbx or bound_torch else ""
        print(f"{label:<15} {dtype:<9} {str(shape):<14} {t_nbx:9.1f} {t_torch:9.1f} {nbytes / t_nbx / 1e6:8.2f} "
              f"{nbytes / t_torch / 1e6:10.2f} {t_torch / t_nbx:6.2f} {dev:10.2e} {c_nbx:9.1f}/{c_torch:<9.1f} "
              f"{c_torch / c_nbx:6.2f}{flag}", flush=True)
    if ratios:
        print(f"# ratio over {len(ratios)} cases: min {min(ratios):.2f}, geometric mean "
              f"{float(np.exp(np.mean(np.log(ratios)))):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
