"""Host microseconds per call of small ops on any machine: nbx's cuda path over the simulated CUDA
of the tests, with Triton's JIT and launcher stubbed out. Everything else runs as on a GPU host:
front-end, promotion, plans, the caching pool and plans.execute. The stubs skip
Triton's own launcher (about 6-9 us a launch on the H200 host, tools/bench/host_parts.py) and the
kernels themselves.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/host_sim.py [--profile OP]

Work on the host path without spending GPU time, then confirm on the GPU with host_parts.py: the
figures here are of this machine's Python, not the GPU host's (which ran 1.5-2.5x slower in 2026-11).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from pathlib import Path

import numpy as np
from host_timing import per_call_us

ROOT = Path(__file__).resolve().parents[2]


def simulated_cuda():
    """Install the tests' simulated libcudart/libcuda (tests/nbx-devices/test_nvidia_simulated.py)."""
    import pytest
    sys.path.insert(0, str(ROOT / "tests" / "nbx-devices"))
    import test_nvidia_simulated
    return test_nvidia_simulated._install(pytest.MonkeyPatch(), 1)


def stub_triton() -> None:
    """kernel[grid](...) returns a compiled kernel whose launcher does nothing; no stream lookup."""
    import triton

    from nbx.kernels import plans

    class Compiled:
        function, packed_metadata = 0, None

        @staticmethod
        def run(*args):
            return None

    triton.runtime.jit.JITFunction.__getitem__ = lambda self, grid: (lambda *args, **meta: Compiled())
    plans._stream_of = lambda index: 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--profile", help="cProfile this op (by own time; SORT=cumtime for cumulative)")
    parser.add_argument("--parts", action="store_true", help="run host_parts.py's stages instead")
    args = parser.parse_args(argv)
    os.environ["NBX_AUTOTUNE_NO_SWEEP"] = "1"   # the device file's tiles: a simulated GPU cannot be timed
    simulated_cuda()
    stub_triton()
    if args.parts:
        import host_parts
        return host_parts.main(["--calls", str(args.calls)])
    import nbx.core as nbx
    from nbx.core.tensor import empty
    device = nbx.as_device("cuda:0")
    a = nbx.asarray(np.ones(4096, np.float32)).to(device)
    x = nbx.asarray(np.ones((16, 256), np.float32)).to(device)
    w = nbx.asarray(np.ones(256, np.float32)).to(device)
    m = nbx.asarray(np.ones((1, 256), np.float32)).to(device)
    wt = nbx.asarray(np.ones((256, 256), np.float32)).to(device)
    table = nbx.asarray(np.ones((1000, 256), np.float32)).to(device)
    ids = nbx.asarray(np.array([3], np.int64)).to(device)
    ops = {
        "empty((4096,))": lambda: empty((4096,), "float32", device),
        "a + b": lambda: a + a,
        "a * 2.0": lambda: a * 2.0,
        "exp(a)": lambda: nbx.exp(a),
        "softmax": lambda: nbx.softmax(x, dim=-1),
        "rms_norm": lambda: nbx.rms_norm(x, (256,), w),
        "sum": lambda: nbx.sum(x, dim=-1),
        "x @ W.T": lambda: m @ wt.T,
        "embedding (1 id)": lambda: nbx.embedding(ids, table),
    }
    print(f"{'op (simulated CUDA, launcher stubbed)':40s} us/call")
    for name, op in ops.items():
        print(f"{name:40s} {per_call_us(op, args.calls):7.2f}")
    from nbx.kernels import plans
    kept = plans.compiled_count()
    print(f"# compiled kernels kept by the direct path: {kept} (repeats reuse them)")
    if args.profile:
        op = ops[args.profile]

        def loop():
            for _ in range(args.calls):
                op()
        profiler = cProfile.Profile()
        profiler.runcall(loop)
        pstats.Stats(profiler).sort_stats(os.environ.get("SORT", "tottime")).print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
