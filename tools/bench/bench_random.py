"""Random draws of nbx (Triton kernels on nbx.core's Philox stream) against torch on one GPU.

    python tools/bench/bench_random.py [--mib 256] [--reps 20]

For rand, randn and dropout (p = 0.1) of --mib MiB in float32 and bfloat16, prints the median time
of nbx's kernel (the "random.<op>" implementation into a preallocated output: the launch alone),
of nbx's front-end call (the output allocated through nbx's allocator as well) and of
torch.rand / torch.randn / torch.nn.functional.dropout, the TB/s each achieves over the bytes the
op must move (written, plus read for dropout) and nbx's kernel time over torch's.

Then the bits: randn's and normal's distance from the host (float32 ulps; rand, uniform and the
masks are compared bit for bit by the tests), a sweep of the launch setting (block = words of the
stream a program writes, block // 4 Philox counters; warps) for rand float32, to show whether the
random family wants settings of its own, and the global loads and stores of each random kernel
this run compiled (from its PTX: st.global.v4 is a thread writing 16 bytes at once).

Timed with CUDA events on the legacy default stream, which nbx and torch both use. torch is
imported here only as the peer: nbx itself never imports it.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import nbx.core as nbx
from peer_timing import call_ms
from nbx.core.dispatch import implementation
from nbx.core.random import Generator

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def cases(nbytes: int, device):
    """(op, dtype, moved bytes, nbx kernel fn, nbx front-end fn, torch fn) for each benchmarked case."""
    gen = Generator(2024)
    for dtype, tdt in TORCH_DTYPES.items():
        n = nbytes // nbx.as_dtype(dtype).itemsize
        out = nbx.empty((n,), dtype, device)
        x_nbx = nbx.randn(n, dtype=dtype, device=device, generator=Generator(1))
        x_torch = torch.randn(n, dtype=tdt, device="cuda")
        rand_k, randn_k = implementation("random.rand", device), implementation("random.randn", device)
        dropout_k = implementation("random.dropout", device)
        yield ("rand", dtype, n * out.dtype.itemsize, lambda: rand_k(out, 7, 0),
               lambda: nbx.rand(n, dtype=dtype, device=device, generator=gen),
               lambda: torch.rand(n, dtype=tdt, device="cuda"))
        yield ("randn", dtype, n * out.dtype.itemsize, lambda: randn_k(out, 7, 0),
               lambda: nbx.randn(n, dtype=dtype, device=device, generator=gen),
               lambda: torch.randn(n, dtype=tdt, device="cuda"))
        yield ("dropout", dtype, 2 * n * out.dtype.itemsize, lambda: dropout_k(out, 7, 0, x_nbx, 0.1),
               lambda: nbx.random.dropout(x_nbx, 0.1, generator=gen),
               lambda: torch.nn.functional.dropout(x_torch, 0.1, training=True))


def bench_ops(mib: int, reps: int) -> None:
    device = nbx.as_device("cuda")
    print(f"== {mib} MiB per tensor; median of {reps} ({torch.cuda.get_device_name()}, torch {torch.__version__})")
    print(f"{'op':8} {'dtype':9} {'elements':>11} {'nbx kernel ms':>14} {'nbx op ms':>10} {'torch ms':>9} "
          f"{'nbx TB/s':>9} {'torch TB/s':>10} {'ratio':>6}")
    for op, dtype, moved, kernel, front, peer in cases(mib << 20, device):
        t_kernel, t_front, t_torch = call_ms(kernel, reps), call_ms(front, reps), call_ms(peer, reps)
        n = (mib << 20) // nbx.as_dtype(dtype).itemsize
        print(f"{op:8} {dtype:9} {n:>11} {t_kernel:>14.4f} {t_front:>10.4f} {t_torch:>9.4f} "
              f"{moved / t_kernel / 1e9:>9.3f} {moved / t_torch / 1e9:>10.3f} {t_torch / t_kernel:>6.3f}")


def bench_launch_overhead(profile: bool) -> None:
    """Host microseconds per call of a tiny draw (launch-bound): nbx's kernel into a preallocated
    output, nbx's allocation alone, nbx's front-end, against torch eager's in-place and allocating draws."""
    device = nbx.as_device("cuda")
    gen = Generator(3)
    out = nbx.empty((1024,), "float32", device)
    peer = torch.empty(1024, device="cuda")
    kernel = implementation("random.rand", device)
    calls = [("nbx kernel (preallocated)", lambda: kernel(out, 3, 0)),
             ("nbx.empty(1024)", lambda: nbx.empty((1024,), "float32", device)),
             ("nbx.rand(1024)", lambda: nbx.rand(1024, device=device, generator=gen)),
             ("torch out.uniform_()", lambda: peer.uniform_()),
             ("torch.rand(1024)", lambda: torch.rand(1024, device="cuda"))]
    for name, fn in calls:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(500):
            fn()
        host = (time.perf_counter() - start) / 500 * 1e6
        torch.cuda.synchronize()
        print(f"launch overhead {name:27} {host:7.1f} us per call (host)")
    if profile:
        import cProfile
        import pstats
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [nbx.rand(1024, device=device, generator=gen) for _ in range(300)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)


def normal_bits() -> None:
    """How far the GPU's randn/normal lie from the host's (the promise is bit-exact for the rest)."""
    n = 1 << 24
    for label, draw in [("randn float32", lambda d: nbx.randn(n, device=d, generator=Generator(5, 2**32 - 99))),
                        ("normal(2, 3) float32", lambda d: nbx.random.normal(2.0, 3.0, (n,), device=d,
                                                                             generator=Generator(5, 17)))]:
        gpu, host = draw("cuda").numpy(), draw("cpu").numpy()
        a, b = gpu.view(np.int32).astype(np.int64), host.view(np.int32).astype(np.int64)
        a, b = np.where(a < 0, -(a & 0x7FFFFFFF), a), np.where(b < 0, -(b & 0x7FFFFFFF), b)
        ulps = np.abs(a - b)
        print(f"{label:22} bit-equal {np.mean(ulps == 0):7.2%}  worst {int(ulps.max())} ulp  "
              f"ulp histogram {np.bincount(np.minimum(ulps, 16)).tolist()}  "
              f"largest |diff| {float(np.abs(gpu.astype(np.float64) - host).max()):.3g}")
    u_gpu = nbx.random.uniform(-3.7, 11.2, (n,), device="cuda", generator=Generator(9)).numpy()
    u_host = nbx.random.uniform(-3.7, 11.2, (n,), generator=Generator(9)).numpy()
    print(f"uniform float32        bit-equal {np.mean(u_gpu.view(np.uint32) == u_host.view(np.uint32)):7.2%}")


def sweep_settings(mib: int, reps: int) -> None:
    """rand float32 under other (block, num_warps): whether the random family wants its own tiles."""
    from nbx.kernels import launch
    import nbx.kernels.random as random_kernels
    device = nbx.as_device("cuda")
    n = (mib << 20) // 4
    out = nbx.empty((n,), "float32", device)
    kernel = implementation("random.rand", device)
    default = launch.tiles(random_kernels.TILES, device)
    original = random_kernels.launch.tiles
    try:
        for block, warps in [(1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8), (512, 4), (1024, 8)]:
            random_kernels.launch.tiles = lambda family, dev, s={"block": block, "num_warps": warps}: s
            ms = call_ms(lambda: kernel(out, 7, 0), reps)
            mark = "  (device file)" if (block, warps) == (default["block"], default["num_warps"]) else ""
            print(f"rand float32 block {block:5} warps {warps}: {ms:.4f} ms {4 * n / ms / 1e9:.3f} TB/s{mark}")
    finally:
        random_kernels.launch.tiles = original


def store_instructions() -> None:
    """The global memory instructions in the PTX of every random kernel compiled in this run."""
    import re
    from nbx.kernels.random import kernel as k
    draws = {getattr(k, name): name for name in ("RAND", "RANDN", "RANDINT", "UNIFORM", "NORMAL", "BERNOULLI",
                                                 "BERNOULLI_TENSOR", "DROPOUT_MASK", "DROPOUT")}
    draw_at = (k.random_kernel.arg_names.index("DRAW"),)
    try:
        compiled = [kernel for entry in k.random_kernel.device_caches.values() for kernel in entry[0].values()]
    except (AttributeError, IndexError, TypeError) as error:  # Triton's cache layout differs: say so
        print(f"PTX of the random kernels: not found in this Triton's JIT cache ({error})")
        return
    for kernel in compiled:
        ops = re.findall(r"(?:ld|st)\.global[\w.]*", kernel.asm["ptx"])
        draw = draws.get(getattr(kernel.src, "constants", {}).get(draw_at), "?")
        out = getattr(kernel.src, "signature", {}).get("out_ptr", "?")
        counts = ", ".join(f"{op} x{ops.count(op)}" for op in sorted(set(ops)))
        print(f"PTX {draw:16} out {out:6} {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="profile nbx.rand(1024)'s host time by function")
    parser.add_argument("--skip-ops", action="store_true", help="only the overhead, the bits and the sweep")
    args = parser.parse_args()
    if not args.skip_ops:
        bench_ops(args.mib, args.reps)
    bench_launch_overhead(args.profile)
    normal_bits()
    sweep_settings(args.mib, args.reps)
    store_instructions()


if __name__ == "__main__":
    main()
