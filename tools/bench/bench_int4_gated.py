"""The gated int4 pair of a SwiGLU MLP in one launch (nbx.gated_linear of two int4 weights, the int4
kernel's GATED form) against the two int4 launches and the multiply it replaces.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_int4_gated.py \
        [--m 1] [--n 14336] [--k 4096] [--group 128] [--sweep]

Two int4 launches take their certified linear_int4 settings. The gated launch takes the setting
gated_linear_int4 serves, or with --sweep every candidate the tunable keeps for the key, timed cold
(the certifier's method), the best five printed and the best timed back to back beside the pair.
Times (peer_timing): GPU us a call back to back over copies of the weights past the L2, and cold.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import nbx.core as nbx
from nbx.kernels import launch
from nbx.kernels.matmul import int4
from peer_timing import cold, measure, spin_cycles_per_ms

L2_FLUSH_BYTES = 256 << 20


def deviation(out, reference) -> float:
    """max|out - reference| / max|reference|, in float64."""
    got = out.numpy().astype(np.float64)
    return float(np.max(np.abs(got - reference)) / max(np.max(np.abs(reference)), 1e-30))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--n", type=int, default=14336)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--sweep", action="store_true")
    args = parser.parse_args()
    m, n, k = args.m, args.n, args.k
    rng = np.random.default_rng(0)
    pair_bytes = n * k + 4 * n * k // args.group * 2   # two packed weights, their scales and minima
    copies = max(1, -(-L2_FLUSH_BYTES // pair_bytes))
    hosts = [nbx.QuantizedTensor.quantize(rng.standard_normal((n, k)) / np.sqrt(k), args.group, "asymmetric",
                                          "bfloat16") for _ in range(2)]
    pairs = [tuple(w.to("cuda") for w in hosts) for _ in range(copies)]
    x = nbx.asarray(rng.standard_normal((m, k)).astype(np.float32), device="cuda").to(dtype="bfloat16")

    def apart(i):
        gate, up = pairs[i]
        return nbx.linear(x, gate, activation="silu") * nbx.linear(x, up)

    def gated(setting=None):
        return lambda i: int4.launch_gated_linear_int4(x, *pairs[i], "silu", setting=setting)

    cycles = spin_cycles_per_ms()
    best = None
    if args.sweep:
        rep = {"m": m, "n": n, "k": k, "dtype": "bfloat16", "group": args.group}
        kept, _ = int4.GATED_LINEAR_INT4.candidates(launch.facts(x.device), rep)
        timed = []
        for setting in kept:
            try:
                timed.append((cold(gated(setting)), setting))
            except Exception as exc:   # report and go on
                print(f"FAILED {setting}: {type(exc).__name__}: {exc}", flush=True)
        timed.sort(key=lambda t: t[0])
        for us, setting in timed[:5]:
            print(f"gated candidate {us:8.2f} us cold  {setting}", flush=True)
        best = timed[0][1]
    reference = apart(0).numpy().astype(np.float64)
    one = lambda i: nbx.linear(x, pairs[i][0])   # noqa: E731
    rows = [("one int4 launch", one), ("two int4 + mul", apart), ("gated int4 (served)" if best is None
                                                                  else "gated int4 (best)", gated(best))]
    print(f"{m} x {n} x {k}, group {args.group}, bfloat16 x; {copies} copies of the pair", flush=True)
    for name, fn in rows:
        gpu, host, bound = measure(fn, copies, cycles)
        dev = deviation(fn(0), reference) if fn is not one else float("nan")
        print(f"{name:<22} {gpu:8.2f} us/call  cold {cold(fn):8.2f} us  host {host:6.1f} us"
              f"{'  (host-bound)' if bound else ''}  deviation from the pair {dev:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
