"""Why a certificate's best_ms and a benchmark's time differ: one certified launch timed five ways.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/flush_experiment.py

For a few certified keys (the certificate's setting, the certifier's own workload):
- memset flush: nbx.autotune.timing.measure as the certifier runs it (a write of twice the L2 before
  each run: the L2 is left full of dirty lines the run must write back);
- read flush: the same, the L2 flushed by reading twice its size instead (clean lines);
- no flush: the same without any flush;
- back to back: 20 runs queued behind a hold between two events, divided by 20 (the benchmarks'
  way, one input; its tail overlaps the next run's head).
Torch-free.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import triton
import triton.language as tl

import nbx.core as nbx
from nbx.autotune import candidates, timing
from nbx.core import dtypes
from nbx.core.device import as_device

ROOT = Path(__file__).resolve().parents[2]
CERTS = ROOT / "certificates" / "nvidia" / "nvidia-h200-140gb" / "triton-3.6.0-cuda"
KEYS = [
    ("reduction", "width=4096,elements=16777216,dtype=f32,strided=0"),
    ("reduction", "width=4096,elements=16777216,dtype=bf16,strided=0"),
    ("softmax", "width=4096,elements=16777216,dtype=f32,strided=0"),
    ("norm", "width=4096,elements=16777216,dtype=f32,strided=0"),
    ("elementwise", "n=68719476736,dtype=bf16,strided=0"),
]


@triton.jit
def read_kernel(src, sink, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = tl.sum(tl.load(src + offs, mask=offs < n, other=0).to(tl.int32), 0)
    if total == -1:  # never taken: the loads must happen, nothing is written
        tl.store(sink, total)


def main() -> int:
    from nbx.kernels import elementwise, norm, reduction, softmax  # noqa: F401  (declare the tunables)
    device = as_device("cuda:0")
    timer = timing.timer_for(device)
    n = timer.flush_bytes // 4
    buffer = nbx.empty((n,), "int32", device)
    sink = nbx.empty((1,), "int32", device)

    def read_flush():
        read_kernel[(triton.cdiv(n, 4096),)](buffer, sink, n, BLOCK=4096)

    declared = candidates.declared()
    print(f"{'kernel':12s} {'key':52s} {'cert':>8s} {'memset':>8s} {'read':>8s} {'none':>8s} {'b2b':>8s}  (ms)")
    for kernel, key in KEYS:
        entry = json.loads((CERTS / f"{kernel}.json").read_text())["entries"][key]
        rep = dict(entry["proof"]["representative"])
        rep["dtype"] = dtypes.as_dtype(rep["dtype"])
        work = declared[kernel].workload(rep, device)
        setting = entry["setting"]
        fn = lambda: work.launch(setting)  # noqa: E731
        memset = timing.measure(fn, timer).median_ms
        original = timer.flush_l2
        timer.flush_l2 = read_flush
        read = timing.measure(fn, timer).median_ms
        timer.flush_l2 = lambda: None
        none = timing.measure(fn, timer).median_ms
        timer.flush_l2 = original
        start, end = timer.event(), timer.event()
        timer.hold(5.0)
        timer.record(start)
        for _ in range(20):
            fn()
        timer.record(end)
        timer.synchronize()
        b2b = timer.elapsed_ms(start, end) / 20
        print(f"{kernel:12s} {key:52s} {entry['proof']['best_ms']:8.4f} {memset:8.4f} {read:8.4f} {none:8.4f} "
              f"{b2b:8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
