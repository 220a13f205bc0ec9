"""Compare the caching pool's rule sets on an allocation trace, and plan its slab.

For each rule set (and each expandable-range chunk for nbx's rules) it replays the trace with
nbx.memory.pool.simulate on a fake device and prints:
  - reserved at peak / live at peak with unlimited memory (what torch's figure on a big card is),
  - the smallest card that completes the trace (bisected to 1 MiB) and the refusals it costs there,
  - driver calls (segment allocations or chunk creations).
Then the slab planner's figures (live peak, first fit, greedy-by-size extent).

    python tools/bench/memory_rules.py [trace.tsv]     # default: every shipped trace
    python tools/bench/memory_rules.py --latency       # also time the pool's cached allocate/free
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]

from nbx.memory import slab  # noqa: E402
from nbx.memory.fakes import FakeDevice  # noqa: E402
from nbx.memory.pool import Pool, simulate  # noqa: E402
from nbx.memory.rules import NBX, NO_HALF_RULE, RULE_SETS, STRICT_HALF  # noqa: E402
from nbx.memory.trace import read_trace, shipped_trace, shipped_traces  # noqa: E402

MiB = 1 << 20
CHUNKS = (2 * MiB, 8 * MiB, 32 * MiB, 64 * MiB)


def smallest_card(trace, rules, chunk=None):
    """The fewest MiB of device memory on which the replay completes (bisection; assumes monotone)."""
    lo, hi = trace.live_peak // MiB, 4 * trace.live_peak // MiB + 64
    if not simulate(trace, rules, capacity=hi * MiB, vmm_chunk=chunk).completed:
        return None, None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if simulate(trace, rules, capacity=mid * MiB, vmm_chunk=chunk).completed:
            hi = mid
        else:
            lo = mid
    return hi, simulate(trace, rules, capacity=hi * MiB, vmm_chunk=chunk)


def rules_table(trace) -> None:
    live = trace.live_peak
    print(f"live at peak: {live / MiB:.1f} MiB over {len(trace)} rows\n")
    print(f"{'rules':30} {'unlimited: reserved/live':>25} {'calls':>6}   {'smallest card':>14} {'x live':>7} "
          f"{'refusals':>8}")
    slack = [replace(NBX, name=f"nbx, slack {m} MiB", half_rule_slack=m * MiB) for m in (0, 24, 40, 48, 64, 128)]
    buffer = [replace(NBX, name=f"nbx, {b} MiB segs under {b // 2}", large_buffer=b * MiB,
                      large_buffer_below=b // 2 * MiB) for b in (8, 32)]
    rounding = [replace(STRICT_HALF, name=f"strict half, round {m} MiB", large_round=m * MiB) for m in (1, 4, 8)]
    configs = ([(r, None) for r in RULE_SETS] + [(r, None) for r in slack + buffer + rounding]
               + [(NBX, c) for c in CHUNKS] + [(STRICT_HALF, 32 * MiB), (NO_HALF_RULE, 32 * MiB)])
    for rules, chunk in configs:
        name = rules.name + (f" + range/{chunk // MiB} MiB" if chunk else "")
        free = simulate(trace, rules, vmm_chunk=chunk)
        card, tight = smallest_card(trace, rules, chunk)
        card_txt = f"{card:>10} MiB {card * MiB / live:7.4f} {tight.stats.refusals:>8}" if card else "   none"
        print(f"{name:30} {free.reserved_peak / MiB:11.1f} MiB {free.overhead:9.4f} "
              f"{free.stats.segment_allocations:>6}   {card_txt}", flush=True)


def slab_table(trace) -> None:
    print(f"\n{'slab plan':30} {'live peak':>12} {'first fit':>12} {'x':>7} {'greedy':>12} {'x':>7}")
    for label, skip in (("whole run", False), ("without the weights", True)):
        events = slab.events_from_trace(trace, alignment=256, skip_whole_run=skip)
        plan = slab.greedy_by_size(events)
        print(f"{label:30} {plan.live_peak / MiB:8.1f} MiB {plan.first_fit_extent / MiB:8.1f} MiB "
              f"{plan.first_fit_extent / plan.live_peak:7.4f} {plan.extent / MiB:8.1f} MiB {plan.ratio:7.4f}")


def latency(repeats: int = 200_000) -> None:
    """Microseconds per cached allocate + release through the public interface (Python, fake device)."""
    pool = Pool(FakeDevice().segments, NBX, parked_fraction=1.0)
    for size in (4096, 8 * MiB):
        pool.allocate(size).release()
        t0 = time.perf_counter()
        for _ in range(repeats):
            pool.allocate(size).release()
        dt = (time.perf_counter() - t0) / repeats * 1e6
        print(f"cached allocate+release of {size} bytes: {dt:.2f} us (host-side Python, fake device)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", help="a trace file (default: the shipped one)")
    parser.add_argument("--latency", action="store_true")
    args = parser.parse_args()
    for name in [args.trace] if args.trace else shipped_traces():
        trace = read_trace(name) if args.trace else shipped_trace(name)
        print(f"\ntrace: {name} ({trace.meta.get('source', 'no source line')})")
        rules_table(trace)
        slab_table(trace)
    if args.latency:
        latency()
    return 0


if __name__ == "__main__":
    sys.exit(main())
