"""Where nbx's host time per call goes: cProfile over many calls of small-tensor ops (torch-free).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/host_profile.py

The tensors are tiny (4096 elements) so the GPU work is negligible and every microsecond measured
is the host's: front-end, dispatch, planning, output allocation, launch. For each op it prints the
wall microseconds per call, then the functions with the most own time (tottime) per call.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import nbx.core as nbx


def per_call_us(fn, calls: int, sync) -> float:
    for _ in range(50):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) * 1e6 / calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--top", type=int, default=18)
    args = parser.parse_args(argv)
    dev = nbx.as_device(args.device)
    from nbx.core.device import get_backend
    backend = get_backend(dev.type)
    sync = lambda: backend.synchronize(dev)  # noqa: E731
    a = nbx.asarray([float(i % 7) for i in range(4096)], dtype="float32", device=dev)
    b = nbx.asarray([float(i % 5) for i in range(4096)], dtype="float32", device=dev)
    x = a.reshape((16, 256))
    w = nbx.ones((256,), dtype="float32", device=dev)
    ops = {
        "a + b": lambda: a + b,
        "nbx.exp(a)": lambda: nbx.exp(a),
        "nbx.softmax(x, -1)": lambda: nbx.softmax(x, dim=-1),
        "nbx.rms_norm(x, w)": lambda: nbx.rms_norm(x, (256,), w),
        "nbx.sum(x, dim=-1)": lambda: nbx.sum(x, dim=-1),
        "nbx.empty((4096,))": lambda: nbx.empty((4096,), dtype="float32", device=dev),
    }
    for label, fn in ops.items():
        try:
            us = per_call_us(fn, args.calls, sync)
        except Exception as exc:  # report and go on: this is a profile, not a test
            print(f"== {label}: {type(exc).__name__}: {exc}")
            continue
        print(f"== {label}: {us:.1f} us per call (wall, {args.calls} calls)")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            fn()
        prof.disable()
        stats = pstats.Stats(prof)
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:args.top]
        for (file, line, name), (cc, nc, tt, ct, _) in rows:
            where = f"{file.rsplit('/src/', 1)[-1].rsplit('site-packages/', 1)[-1]}:{line}({name})"
            print(f"   {tt * 1e6 / args.calls:7.2f} own {ct * 1e6 / args.calls:7.2f} cum us/call "
                  f"{nc / args.calls:5.1f} calls  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
