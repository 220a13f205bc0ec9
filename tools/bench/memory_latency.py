#!/usr/bin/env python3
"""Host time of the caching pool's allocate + free of a cached block, on the CPU over the fake device.

The pool is Python; what it costs per pair is what every tensor an op allocates pays on the host.
Cases (microseconds per pair, best of 15 batches):
  exact     a cached free block of exactly the rounded size whose neighbours are live (the steady
            state of an inference loop: the fast path serves it without splitting or merging),
  lone      the only block of its segment: split off the free segment and merged back every time,
  segment   a large request that is a whole cached segment (16 MiB: 10 MiB or more gets its own),
each through the public interface (allocate + Block.release(), or the Block dropped and collected
as a tensor's storage is) and through the pool's own _malloc/_free (what simulate replays). The
stream is a Python object hashing and comparing like nbx.devices.nvidia's Stream (the pool on a GPU
sees those), or None. --general turns the pool's fast paths off: the general best-fit/split/merge
path for comparison (same blocks and figures, tested in tests/nbx-memory/test_pool_fast_path.py).

    python3 tools/bench/memory_latency.py [--pairs 20000] [--general]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # host_timing, beside this file

from nbx.memory.fakes import FakeDevice  # noqa: E402
from nbx.memory.pool import NBX, Pool  # noqa: E402
from host_timing import per_call_us  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20


class StreamLike:
    """Hashes and compares as nbx.devices.nvidia.streams.Stream does (Python __eq__ / __hash__)."""

    __slots__ = ("device", "handle")

    def __init__(self, device: int, handle: int):
        self.device, self.handle = device, handle

    @property
    def is_default(self) -> bool:
        return self.handle in (0, 1)

    def __eq__(self, other) -> bool:
        if not isinstance(other, StreamLike) or other.device != self.device:
            return False
        return other.handle == self.handle or (other.is_default and self.is_default)

    def __hash__(self) -> int:
        return hash((self.device, 0 if self.is_default else self.handle))


def per_pair_us(fn, pairs: int) -> float:
    return per_call_us(fn, pairs, batches=15)  # the least disturbed of 15 batches: a shared machine


def make_pool(general: bool) -> Pool:
    pool = Pool(FakeDevice().segments, NBX, parked_fraction=1.0)
    if general:
        if not hasattr(pool, "_fast"):
            raise SystemExit("this pool has no fast path to turn off (--general needs the fast-path pool)")
        pool._fast = False
    return pool


def cases(general: bool, stream):
    """(name, pool, size, keep): keep holds the live neighbours so the case stays what it says."""
    exact = make_pool(general)
    keep = [exact.allocate(4 * KiB, stream) for _ in range(3)]
    keep[1].release()  # a 4 KiB hole between two live blocks
    yield "exact 4 KiB", exact, 4 * KiB, keep
    exact_1m = make_pool(general)
    keep = [exact_1m.allocate(512 * KiB, stream) for _ in range(3)]
    keep[1].release()
    yield "exact 512 KiB", exact_1m, 512 * KiB, keep
    seg = make_pool(general)
    seg.allocate(16 * MiB, stream).release()
    yield "segment 16 MiB", seg, 16 * MiB, []
    lone = make_pool(general)
    yield "lone 4 KiB (split+merge)", lone, 4 * KiB, []


def run(pairs: int, general: bool) -> None:
    print(f"pool fast paths {'OFF (general path)' if general else 'on'}; microseconds per allocate+free pair, "
          f"best of 15 batches of {pairs}")
    print(f"{'case':26} {'stream':>8} {'release()':>10} {'collected':>10} {'_malloc/_free':>14}")
    for stream_name, stream in (("Stream", StreamLike(0, 0)), ("None", None)):
        for name, pool, size, keep in cases(general, stream):
            released = per_pair_us(lambda: pool.allocate(size, stream).release(), pairs)
            collected = per_pair_us(lambda: pool.allocate(size, stream), pairs)
            malloc, free = pool._malloc, pool._free
            internal = per_pair_us(lambda: free(malloc(size, stream)), pairs)
            print(f"{name:26} {stream_name:>8} {released:>10.2f} {collected:>10.2f} {internal:>14.2f}", flush=True)
            del keep


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--general", action="store_true", help="turn the pool's fast paths off")
    args = parser.parse_args()
    run(args.pairs, args.general)
    return 0


if __name__ == "__main__":
    sys.exit(main())
