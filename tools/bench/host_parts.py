"""Host microseconds per call of each stage of a small op's path, timed by wall clock (no profiler,
which inflates many cheap calls): the whole op (a repeat: its signature's one dict lookup, then the
prepared plan run, nbx.core.spec), the checks its first call of a signature pays (spec.bind), its
plan run with the call's values (output allocation and launches: plans.execute), each launch alone
(the plan's runner, output given), and the compiled launcher alone. Torch-free.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/host_parts.py
    ... host_parts.py --prefill   # also a Llama-1B prefill layer's ops (512 tokens, bf16; host_sim.prefill_ops)

What the whole op spends beyond plans.execute is the signature's lookup (checks, promotion,
dispatch and the plan lookup are paid once per signature).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import nbx.core as nbx
from nbx.core import spec
from nbx.core.device import get_backend
from nbx.kernels import compiled_launch, plans
from host_timing import per_call_us


class LastPlan:
    """Records the plans an op runs and the values it passes them (the op still runs)."""

    def __init__(self):
        self.calls = []

    def __enter__(self):
        self.original, self.prepared = plans.execute, plans.prepared

        def recording(plan, values):
            self.calls.append((plan, dict(values)))
            return self.original(plan, values)
        plans.execute = recording
        plans.prepared = lambda plan: None   # a signature's repeats would bypass plans.execute
        spec.forget()
        return self

    def __exit__(self, *exc):
        plans.execute, plans.prepared = self.original, self.prepared
        spec.forget()


def ops(device):
    rng = np.random.default_rng(0)
    a = nbx.asarray(rng.standard_normal(4096).astype(np.float32)).to(device)
    x = nbx.asarray(rng.standard_normal((16, 256)).astype(np.float32)).to(device)
    w = nbx.asarray(rng.standard_normal(256).astype(np.float32)).to(device)
    m = nbx.asarray(rng.standard_normal((1, 4096)).astype(np.float32)).to(device)
    wt = nbx.asarray(rng.standard_normal((4096, 4096)).astype(np.float32) * 0.01).to(device)
    return {
        "a + b": lambda: a + a,
        "a * 2.0": lambda: a * 2.0,
        "softmax": lambda: nbx.softmax(x, dim=-1),
        "rms_norm": lambda: nbx.rms_norm(x, (256,), w),
        "sum": lambda: nbx.sum(x, dim=-1),
        "matmul (1 x 4096) @ (4096 x 4096)": lambda: nbx.matmul(m, wt),
        "x @ W.T (1 x 4096) @ (4096 x 4096).T": lambda: m @ wt.T,
    }


def bind(op) -> None:
    """The checks of op's call, as its first call of a signature runs them (the last bound call again)."""
    found = _LAST.get(op)
    if found is None:
        original = spec.OpSpec.bind

        def keep(self, *args, **kwargs):
            _LAST[op] = (self, args, kwargs)
            return original(self, *args, **kwargs)
        spec.OpSpec.bind, spec._FAST = keep, {}
        try:
            op()
        finally:
            spec.OpSpec.bind = original
            spec.forget()
        found = _LAST.get(op)
    if found is not None:
        found[0].bind(*found[1], **found[2])


_LAST: dict = {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--prefill", action="store_true",
                        help="also the ops of one Llama-1B prefill layer and its halves (the plan shown: its last)")
    args = parser.parse_args(argv)
    device = nbx.as_device("cuda")
    backend = get_backend("cuda")
    print(f"{'stage':48s} us/call")
    print(f"{'nbx.empty((4096,))':48s} {per_call_us(lambda: nbx.empty((4096,), device=device), args.calls):7.2f}")
    print(f"{'backend.current_device()':48s} {per_call_us(backend.current_device, args.calls):7.2f}")
    print(f"{'stream lookup (backend.launch_stream(0))':48s} {per_call_us(lambda: backend.launch_stream(0), args.calls):7.2f}")
    print(f"{'  through the Triton driver (compiled_launch._stream_of(0))':48s} {per_call_us(lambda: compiled_launch._stream_of(0), args.calls):7.2f}")
    print(f"{'plans.hooks_set()':48s} {per_call_us(plans.hooks_set, args.calls):7.2f}")
    found = ops(device)
    if args.prefill:
        from host_sim import prefill_ops
        found.update(prefill_ops(nbx, device))
    for name, op in found.items():
        op()
        with LastPlan() as rec:
            op()
        backend.synchronize(device)
        plan, values = rec.calls[-1]
        print(f"== {name}: {len(plan.launches)} launch(es)")
        print(f"  {'whole op':46s} {per_call_us(op, args.calls):7.2f}")
        print(f"  {'  its checks, once a signature (spec.bind)':46s} {per_call_us(lambda: bind(op), args.calls):7.2f}")
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

                def bare():  # as the runner calls it (Triton's C launch itself where compiled_launch.Compiled may)
                    fast.run(g[0], g[1], g[2], runner.stream_of(0), *fast.head, None, None, None, *direct, *fast.tail)
                print(f"  {'  its compiled launcher alone (+ stream lookup)':46s} {per_call_us(bare, args.calls):7.2f}")
        backend.synchronize(device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
