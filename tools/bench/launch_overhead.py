"""Host microseconds per launch: an nbx elementwise add of a small tensor against torch eager.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/launch_overhead.py

Each line times `calls` back-to-back calls of a 4096-element float32 add and divides the wall
time by the calls: the kernels take a few microseconds of GPU time, so the host's time per call
is what is measured. Lines, from the whole op down to the bare launch:

- torch a + b, and torch.add(out=): the peer (its caching allocator serves the output);
- nbx a + b: front-end (promotion, checks, dispatch), call-site plan, output allocation, launch;
- nbx.empty and result_type alone: two parts of that;
- nbx launch_elementwise(out=): the wrapper with a preallocated output (plan lookup + launch);
- nbx, plan rebuilt every call: what every call cost before plans were cached (collapsed layout
  and settings lookup each time), with a preallocated output;
- nbx launch.run: the launch path every family takes (the compiled kernel looked up by its
  specialisation key and called directly), every argument precomputed;
- Triton JIT kernel[grid](...): Triton's own per-call path with every argument precomputed;
- compiled kernel run: the launcher alone (the floor of any Triton launch).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import triton

import nbx.core as nbx


def per_call_us(fn, calls: int, repeats: int = 5) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e6 / calls)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from peer_timing import allocator_name

    from nbx.kernels import launch
    from nbx.kernels.elementwise import callsite, functions, launch_elementwise
    from nbx.kernels.elementwise.kernel import elementwise_kernel

    ta, tb = torch.randn(args.n, device="cuda"), torch.randn(args.n, device="cuda")
    tc = torch.empty_like(ta)
    a, b = nbx.from_dlpack(ta), nbx.from_dlpack(tb)
    out = nbx.empty((args.n,), dtype="float32", device="cuda")
    f32 = nbx.float32
    rows = []

    def row(label, fn):
        rows.append((label, per_call_us(fn, args.calls)))
        print(f"{label:<58} {rows[-1][1]:8.2f} us", flush=True)

    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | float32 add of {args.n} elements")
    row("torch a + b", lambda: ta + tb)
    row("torch.add(a, b, out=c)", lambda: torch.add(ta, tb, out=tc))
    allocator = allocator_name()  # nbx's caching pool, which the backend registers
    row(f"nbx a + b ({allocator})", lambda: a + b)
    row("nbx launch_elementwise(add, out=) (cached plan)", lambda: launch_elementwise(functions.add, [a, b], f32, f32, out))
    row(f"nbx.empty((n,)) alone ({allocator})", lambda: nbx.empty((args.n,), dtype=f32, device=a.device))
    from nbx.core.promotion import result_type
    row("nbx result_type(a, b) alone (the front-end promotes)", lambda: result_type(a, b))

    def rebuilt():
        callsite.clear()
        launch_elementwise(functions.add, [a, b], f32, f32, out)
    row("nbx, plan rebuilt every call (the path before plans)", rebuilt)
    plan = callsite.plan_for(functions.add, [a, b], f32, f32, out)
    jit_args = plan.arguments(out, [a, b])
    row("nbx launch.run (the compiled kernel called directly)", lambda: launch.run(
        elementwise_kernel, plan.grid, plan.device, *jit_args, **plan.meta))
    row("Triton JIT kernel[grid](...) alone", lambda: elementwise_kernel[plan.grid](*jit_args, **plan.meta))
    pointers, spec = launch._direct(jit_args)
    fast = launch._COMPILED[(elementwise_kernel, plan.device.index, plan.grid, tuple(plan.meta.items()), spec)]
    stream = triton.runtime.driver.active.get_current_stream(0)
    row("compiled kernel run (launcher only, stream fixed)", lambda: fast.run(
        plan.grid[0], 1, 1, stream, fast.function, fast.packed, None, None, None, *pointers, *fast.tail))
    us = dict(rows)
    total, wrapper, alloc = us[f"nbx a + b ({allocator})"], us["nbx launch_elementwise(add, out=) (cached plan)"], \
        us[f"nbx.empty((n,)) alone ({allocator})"]
    print(f"# nbx a + b / torch a + b: {total / us['torch a + b']:.2f}; of nbx's {total:.1f} us: wrapper and launch "
          f"{wrapper:.1f}, output allocation {alloc:.1f}, front-end and the rest {total - wrapper - alloc:.1f}; "
          f"plan rebuilt every call: {us['nbx, plan rebuilt every call (the path before plans)']:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
