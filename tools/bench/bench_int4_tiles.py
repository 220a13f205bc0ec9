"""The int4 product's tile forms at decode rows: every tiles candidate of a shape's 16-row key, timed at
1 and 16 rows of x beside the served setting (the certified one: the gemv form at one row) and torch's
bf16 product of the same shape.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_int4_tiles.py \
        [--shapes 14336x4096,4096x14336] [--rows 1,16] [--group 128] [--top 3] [--served-only]

Why: the decode tiles read the weight in 16-bit halves and decode four nibbles a lop3 (quantized.
_HALVES_ASM); the tiles' instructions a nibble fell from 6.1 to 3.6 (tools/bench/sass_loop.py), so
the tiles form may win decode keys it lost, one row of x included (linear_int4 prunes it there).
Times (peer_timing): GPU us a call cold (the certifier's method) for the sweep; back to back over
copies of the weight past the L2 for the best, the served and torch. deviation: max |out - float64
oracle| / max |oracle|, the oracle x @ dequantized W.T.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import nbx.core as nbx
from nbx.kernels import launch
from nbx.kernels.matmul import int4
from peer_timing import cold, measure, spin_cycles_per_ms

L2_FLUSH_BYTES = 256 << 20
TILE_FORMS = ("tiles", "prescaled")   # fold (the step's sums take C off) and dequantize-before-the-dot


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="14336x4096,4096x14336,4096x4096,6144x4096")
    parser.add_argument("--rows", default="1,16")
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--served-only", action="store_true", help="no sweep: the served setting and torch")
    args = parser.parse_args()
    cycles = spin_cycles_per_ms()
    rng = np.random.default_rng(0)
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        host = nbx.QuantizedTensor.quantize(rng.standard_normal((n, k)) / np.sqrt(k), args.group, "asymmetric",
                                            "bfloat16")
        copies = max(1, -(-L2_FLUSH_BYTES // (n * k // 2 + 4 * n * k // args.group)))
        weights = [host.to("cuda") for _ in range(copies)]
        dense = host.dequantize("float64").numpy()
        dense_copies = max(1, -(-L2_FLUSH_BYTES // (2 * n * k)))
        peers = [torch.from_numpy(dense).to("cuda", torch.bfloat16) for _ in range(dense_copies)]
        rep16 = {"m": 16, "n": n, "k": k, "dtype": "bfloat16", "group": args.group}
        tiles = [s for s in int4.LINEAR_INT4.candidates(launch.facts(weights[0].device), rep16)[0]
                 if s["kernel"] in TILE_FORMS]
        for m in map(int, args.rows.split(",")):
            xh = rng.standard_normal((m, k)).astype(np.float32)
            x = nbx.asarray(xh, device="cuda").to(dtype="bfloat16")
            oracle = x.to(dtype="float32").numpy().astype(np.float64) @ dense.T
            xt = torch.from_numpy(xh).to("cuda", torch.bfloat16)

            def run(setting=None):
                return lambda i: int4.launch_linear_int4(x, weights[i % copies], setting=setting)

            def deviation(out) -> float:
                return float(np.max(np.abs(out.numpy().astype(np.float64) - oracle)) / np.max(np.abs(oracle)))

            timed = []
            for setting in [] if args.served_only else tiles:
                try:
                    timed.append((cold(run(setting)), setting))
                except Exception as exc:   # report and go on
                    print(f"FAILED {setting}: {type(exc).__name__}: {exc}", flush=True)
            timed.sort(key=lambda t: t[0])
            print(f"\n{m} x {n} x {k}, group {args.group}, bfloat16 x; {len(tiles)} tile candidates; "
                  f"{copies} weight copies", flush=True)
            best = {}
            for form in TILE_FORMS:
                ranked = [(us, s) for us, s in timed if s["kernel"] == form]
                for us, s in ranked[:args.top]:
                    print(f"  {form:<9} cold {us:8.2f} us  bm {s['block_m']} bn {s['block_n']} bk {s['block_k']} "
                          f"split {s['split_k']} w {s['num_warps']} st {s['num_stages']}", flush=True)
                if ranked:
                    best[form] = run(ranked[0][1])
            rows = [("served", run())] + [(f"best {form}", fn) for form, fn in best.items()] + [
                    ("torch bf16", lambda i: torch.nn.functional.linear(xt, peers[i % len(peers)]))]
            for name, fn in rows:
                gpu, _, _ = measure(fn, copies, cycles)
                dev = deviation(fn(0)) if name != "torch bf16" else float("nan")
                print(f"  {name:<15} {gpu:8.2f} us/call b2b  cold {cold(fn):8.2f}  deviation {dev:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
