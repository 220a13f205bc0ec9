"""Host microseconds per call of each stage of a small op's path, timed by wall clock (no profiler,
which inflates many cheap calls): the whole op, its kernel wrapper with a preallocated output, the
launch alone (launch.run replaying the op's last launch; for an elementwise op also its call site's
replay, which skips launch.run's key), the launcher alone, and the pieces of launch.run. Torch-free.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/host_parts.py
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import triton

import nbx.core as nbx
from nbx.core.device import get_backend
from nbx.kernels import launch
from nbx.kernels.elementwise import callsite
from host_timing import per_call_us


class LastLaunch:
    """Records the arguments of the launches an op makes (the op still launches), and the call
    site a launch came through (elementwise plans)."""

    def __init__(self):
        self.calls, self.sites = [], []

    def __enter__(self):
        self.original, self.site_run = launch.run, launch.CallSite.run

        def recording(kernel, grid, device, *args, **meta):
            self.calls.append((kernel, grid, device, args, meta))
            return self.original(kernel, grid, device, *args, **meta)

        def site_recording(site, args):
            self.sites.append((site, list(args)))
            return self.site_run(site, args)
        launch.run, launch.CallSite.run = recording, site_recording
        return self

    def __exit__(self, *exc):
        launch.run, launch.CallSite.run = self.original, self.site_run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args(argv)
    device = nbx.as_device("cuda")
    backend = get_backend("cuda")
    rng = np.random.default_rng(0)
    a = nbx.asarray(rng.standard_normal(4096).astype(np.float32)).to(device)
    x = nbx.asarray(rng.standard_normal((16, 256)).astype(np.float32)).to(device)
    w = nbx.asarray(rng.standard_normal(256).astype(np.float32)).to(device)
    ops = {
        "a + b": lambda: a + a,
        "softmax": lambda: nbx.softmax(x, dim=-1),
        "rms_norm": lambda: nbx.rms_norm(x, (256,), w),
        "sum": lambda: nbx.sum(x, dim=-1),
    }
    stream_of = triton.runtime.driver.active.get_current_stream
    print(f"{'stage':48s} us/call")
    print(f"{'nbx.empty((4096,))':48s} {per_call_us(lambda: nbx.empty((4096,), device=device), args.calls):7.2f}")
    print(f"{'backend.current_device()':48s} {per_call_us(backend.current_device, args.calls):7.2f}")
    print(f"{'driver get_current_stream(0)':48s} {per_call_us(lambda: stream_of(0), args.calls):7.2f}")
    print(f"{'launch.hooks_set()':48s} {per_call_us(launch.hooks_set, args.calls):7.2f}")
    for name, op in ops.items():
        op()
        callsite.clear()        # so that the recorded call builds its plan (elementwise)
        launch.forget_sites()   # or call-site record (the other families) and goes through launch.run
        with LastLaunch() as rec:
            op()
        backend.synchronize(device)
        print(f"== {name}: {len(rec.calls)} launch(es)")
        print(f"  {'whole op':46s} {per_call_us(op, args.calls):7.2f}")
        if rec.sites:
            site, site_args = rec.sites[-1]
            print(f"  {'CallSite.run, the last launch replayed':46s} "
                  f"{per_call_us(lambda: site.run(list(site_args)), args.calls):7.2f}")
        kernel, grid, dev, kargs, meta = rec.calls[-1]
        print(f"  {'launch.run, the last launch replayed':46s} "
              f"{per_call_us(lambda: launch.run(kernel, grid, dev, *kargs, **meta), args.calls):7.2f}")
        print(f"  {'launch._direct(args) (%d args)' % len(kargs):46s} "
              f"{per_call_us(lambda: launch._direct(kargs), args.calls):7.2f}")
        print(f"  {'key: tuple(meta.items()) + hash':46s} "
              f"{per_call_us(lambda: hash((kernel, dev.index, grid, tuple(meta.items()))), args.calls):7.2f}")
        _, spec = launch._direct(kargs)
        fast = launch._COMPILED.get((kernel, dev.index, grid, tuple(meta.items()), spec))
        if fast is not None:
            direct = launch._direct(kargs)[0]
            g = (*grid, 1, 1)

            def bare():
                fast.run(g[0], g[1], g[2], stream_of(0), fast.function, fast.packed, None, None, None,
                         *direct, *fast.tail)
            print(f"  {'compiled launcher alone (+ stream lookup)':46s} {per_call_us(bare, args.calls):7.2f}")
        backend.synchronize(device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
