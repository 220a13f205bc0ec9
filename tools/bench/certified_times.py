"""A certificate's best_ms against the same launch timed again, four ways (torch-free).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/certified_times.py

For each certified key of this GPU's class (the certificate's setting, the certifier's own
workload; keys whose best_ms is at least --min-ms and whose representative holds at most
--max-elements elements):
- read: nbx.autotune.timing.measure as the certifier runs it (the L2 flushed by reading twice its
  size before each run: it leaves clean lines);
- memset: the same, the L2 flushed by writing twice its size instead (as triton.testing.do_bench
  does: the flush leaves dirty lines the timed run writes back);
- none: the same without a flush;
- b2b: 20 runs queued behind a hold between two events, divided by 20 (the benchmarks' way: one
  input, each run's tail overlapping the next one's head).
The summary says how far the certifier's own method lands from best_ms (noise) and how far the
benchmarks' method lands from it (the L2 state a run starts from).
"""
from __future__ import annotations

import argparse
import statistics
import sys

from nbx.autotune import candidates, device_class, store, timing
from nbx.core import dtypes
from nbx.core.device import as_device
from nbx.core.tensor import empty
from nbx.devices.nvidia import runtime
from nbx.devices.nvidia.streams import LEGACY_DEFAULT


def certified_entries(device, kernels):
    """(kernel, key, entry) of every shipped certificate of this device's class and compiler."""
    from nbx.kernels.launch import facts
    identity = device_class.identify(device)
    certificates = store.CertificateStore()
    declared = candidates.declared()
    for name in kernels:
        for key, entry in sorted(certificates.entries(identity, declared[name], facts(device)).items()):
            yield name, key, entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="elementwise,softmax,norm,reduction,matmul")
    parser.add_argument("--min-ms", type=float, default=0.01, help="skip keys certified faster than this")
    parser.add_argument("--max-elements", type=int, default=1 << 28, help="skip larger representatives")
    args = parser.parse_args(argv)
    from nbx.kernels import elementwise, matmul, norm, reduction, softmax  # noqa: F401  (declare the tunables)
    device = as_device("cuda:0")
    timer = timing.timer_for(device)
    scratch = empty((timer.flush_bytes,), "uint8", device)
    flushes = {"read": timer.flush_l2, "none": lambda: None,
               "memset": lambda: runtime.memset_async(scratch.data_ptr(), 0, scratch.nbytes, LEGACY_DEFAULT)}
    print(f"{'kernel':12s} {'key':52s} {'best_ms':>8s} {'read':>8s} {'memset':>8s} {'none':>8s} {'b2b':>8s}")
    own, b2b_gap = [], []
    for kernel, key, entry in certified_entries(device, args.kernels.split(",")):
        rep = dict(entry.proof["representative"])
        size = rep.get("elements", rep.get("n", 0))
        if entry.proof["best_ms"] < args.min_ms or size > args.max_elements:
            continue
        rep["dtype"] = dtypes.as_dtype(rep["dtype"])
        work = candidates.declared()[kernel].workload(rep, device)
        run = lambda: work.launch(entry.setting)  # noqa: E731
        times = {}
        for name, flush in flushes.items():
            timer.flush_l2 = flush
            times[name] = timing.measure(run, timer).median_ms
        timer.flush_l2 = flushes["read"]
        start, end = timer.event(), timer.event()
        timer.hold(5.0)
        timer.record(start)
        for _ in range(20):
            run()
        timer.record(end)
        timer.synchronize()
        times["b2b"] = timer.elapsed_ms(start, end) / 20
        best = entry.proof["best_ms"]
        own.append(abs(times["read"] / best - 1))
        b2b_gap.append(times["b2b"] / best - 1)
        print(f"{kernel:12s} {key:52s} {best:8.4f} {times['read']:8.4f} {times['memset']:8.4f} "
              f"{times['none']:8.4f} {times['b2b']:8.4f}", flush=True)
    if own:
        print(f"# {len(own)} keys: the certifier's method again vs best_ms: median {statistics.median(own):.1%}, "
              f"worst {max(own):.1%}; back to back vs best_ms: median {statistics.median(b2b_gap):+.1%}, "
              f"range {min(b2b_gap):+.1%} .. {max(b2b_gap):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
