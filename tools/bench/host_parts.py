"""Host microseconds per call of each stage of a small op's path, timed by wall clock (no profiler,
which inflates many cheap calls): the whole op, its plan run with the call's values (output
allocation and launches: plans.execute), each launch alone (the plan's runner, output given),
and the compiled launcher alone. Torch-free.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/host_parts.py

What the whole op spends beyond plans.execute is the front-end (checks, promotion, dispatch) and
the family's plan lookup (its signature and the cache).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import nbx.core as nbx
from nbx.core.device import get_backend
from nbx.kernels import plans
from host_timing import per_call_us


class LastPlan:
    """Records the plans an op runs and the values it passes them (the op still runs)."""

    def __init__(self):
        self.calls = []

    def __enter__(self):
        self.original = plans.execute

        def recording(plan, values):
            self.calls.append((plan, dict(values)))
            return self.original(plan, values)
        plans.execute = recording
        return self

    def __exit__(self, *exc):
        plans.execute = self.original


def ops(device):
    rng = np.random.default_rng(0)
    a = nbx.asarray(rng.standard_normal(4096).astype(np.float32)).to(device)
    x = nbx.asarray(rng.standard_normal((16, 256)).astype(np.float32)).to(device)
    w = nbx.asarray(rng.standard_normal(256).astype(np.float32)).to(device)
    m = nbx.asarray(rng.standard_normal((1, 4096)).astype(np.float32)).to(device)
    wt = nbx.asarray(rng.standard_normal((4096, 4096)).astype(np.float32) * 0.01).to(device)
    return {
        "a + b": lambda: a + a,
        "softmax": lambda: nbx.softmax(x, dim=-1),
        "rms_norm": lambda: nbx.rms_norm(x, (256,), w),
        "sum": lambda: nbx.sum(x, dim=-1),
        "matmul (1 x 4096) @ (4096 x 4096)": lambda: nbx.matmul(m, wt),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args(argv)
    device = nbx.as_device("cuda")
    backend = get_backend("cuda")
    print(f"{'stage':48s} us/call")
    print(f"{'nbx.empty((4096,))':48s} {per_call_us(lambda: nbx.empty((4096,), device=device), args.calls):7.2f}")
    print(f"{'backend.current_device()':48s} {per_call_us(backend.current_device, args.calls):7.2f}")
    print(f"{'stream lookup (plans._stream_of(0))':48s} {per_call_us(lambda: plans._stream_of(0), args.calls):7.2f}")
    print(f"{'plans.hooks_set()':48s} {per_call_us(plans.hooks_set, args.calls):7.2f}")
    for name, op in ops(device).items():
        op()
        with LastPlan() as rec:
            op()
        backend.synchronize(device)
        plan, values = rec.calls[-1]
        print(f"== {name}: {len(plan.launches)} launch(es)")
        print(f"  {'whole op':46s} {per_call_us(op, args.calls):7.2f}")
        print(f"  {'plans.execute, the call replayed':46s} "
              f"{per_call_us(lambda: plans.execute(plan, dict(values)), args.calls):7.2f}")
        filled = plans.execute(plan, dict(values))
        for i, one in enumerate(plan.launches):
            runner = one._runner[0]
            print(f"  {'launch %d alone (%d args)' % (i, len(one.args)):46s} "
                  f"{per_call_us(lambda: runner.run(filled), args.calls):7.2f}")
            fast = next(iter(runner.compiled.values()), None)
            if fast is not None:
                direct = [a.data_ptr() if hasattr(a, "data_ptr") else a for a in runner.arguments(filled)]
                g = (*one.grid, 1, 1)

                def bare():
                    fast.run(g[0], g[1], g[2], plans._stream_of(0), fast.function, fast.packed, None, None, None,
                             *direct, *fast.tail)
                print(f"  {'  its compiled launcher alone (+ stream lookup)':46s} {per_call_us(bare, args.calls):7.2f}")
        backend.synchronize(device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
