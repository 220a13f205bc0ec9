"""Loading a safetensors file with nbx against a plain sequential read of the same file, cold cache.

    python tools/bench/safetensors_read.py --size 2GiB --path /tmp/nbx-bench.safetensors

Writes a checkpoint-like file (bfloat16 tensors of --tensor-mib each), then for each case drops the
file from the page cache (posix_fadvise DONTNEED, checked with mincore) and times:
  plain        f.readinto() of the whole file into a preallocated, pre-faulted buffer
  nbx copy     load_safetensors + every tensor copied into the same kind of buffer
  nbx touch    load_safetensors + one byte of every page of every tensor read (zero-copy views)
  nbx bf16->f32  load_safetensors(dtype=float32): every tensor converted on the host's cores
Rates are file bytes per second; ratios are against `plain` (goal >= 0.8). The file is deleted
at the end unless --keep.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import mmap
import os
import re
import statistics
import sys
import time

import numpy as np

import nbx.core as nbx
from nbx.core.host import compute_cores

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"a size such as 2GiB, 1500MB or 1073741824; got {text!r}")
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


def write_checkpoint(path: str, size: int, tensor_bytes: int) -> float:
    """bf16 tensors totalling about size bytes; they share one block of values (the writer reads
    each as if it were distinct), so building the file takes little memory. Returns seconds."""
    rows = max(1, tensor_bytes // (4096 * 2))
    block = np.random.default_rng(0).standard_normal((rows, 4096), np.float32).astype(nbx.bfloat16.host)
    source = nbx.from_numpy(block)
    count = max(1, size // block.nbytes)
    start = time.perf_counter()
    nbx.save_safetensors({f"layers.{i:04d}.weight": source for i in range(count)}, path)
    return time.perf_counter() - start


def drop_from_page_cache(path: str) -> float:
    """Ask the kernel to forget the file's cached pages; returns the fraction still resident."""
    gc.collect()  # no map of the file may survive, or its pages stay
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return resident_fraction(path)


def resident_fraction(path: str) -> float:
    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(mapping, np.uint8)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = np.zeros(pages, np.uint8)
    rc = libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), ctypes.c_void_p(vec.ctypes.data))
    del view
    mapping.close()
    if rc != 0:
        return float("nan")
    return float((vec & 1).mean())


def plain_read(path: str, out: np.ndarray) -> None:
    view = memoryview(out)
    done = 0
    with open(path, "rb", buffering=0) as f:
        while done < len(view):
            n = f.readinto(view[done:])
            if not n:
                break
            done += n


def nbx_copy(path: str, out: np.ndarray) -> None:
    loaded = nbx.load_safetensors(path)
    done = 0
    for name in loaded:
        raw = loaded[name].numpy().reshape(-1).view(np.uint8)
        out[done:done + raw.nbytes] = raw
        done += raw.nbytes


def nbx_touch(path: str, out: np.ndarray) -> None:
    loaded = nbx.load_safetensors(path)
    total = 0
    for name in loaded:
        total += int(loaded[name].numpy().reshape(-1).view(np.uint8)[::mmap.PAGESIZE].sum())
    out[0] = total & 0xFF


def nbx_convert(path: str, out: np.ndarray) -> None:
    loaded = nbx.load_safetensors(path, dtype=nbx.float32)
    for name in loaded:
        loaded[name]  # converted on load; dropped at once so memory stays bounded


CASES = {"plain": plain_read, "nbx copy": nbx_copy, "nbx touch": nbx_touch, "nbx bf16->f32": nbx_convert}


def measure(case, path: str, out: np.ndarray, size: int, cold: bool) -> tuple[float, float]:
    resident = drop_from_page_cache(path) if cold else resident_fraction(path)
    start = time.perf_counter()
    case(path, out)
    seconds = time.perf_counter() - start
    gc.collect()
    return size / seconds / 1e9, resident


def report(label: str, rates: dict[str, list[float]], resident: dict[str, float]) -> dict[str, float]:
    """Median and best of each case; ratios of medians against plain (the disk varies between runs)."""
    medians = {name: statistics.median(runs) for name, runs in rates.items()}
    for name, runs in rates.items():
        print(f"{label}  {name:14s} median {medians[name]:6.2f} GB/s  x{medians[name] / medians['plain']:.2f} "
              f"of plain   best {max(runs):6.2f}   (runs {', '.join(f'{r:.2f}' for r in runs)}; "
              f"resident before: {resident[name]:.0%})")
    return medians


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="/tmp/nbx-safetensors-bench.safetensors")
    parser.add_argument("--size", type=parse_size, default=2 << 30, help="file size (default 2GiB)")
    parser.add_argument("--tensor-mib", type=int, default=64, help="size of each tensor in MiB")
    parser.add_argument("--repeats", type=int, default=5,
                        help="rounds; each round runs every case once, interleaved, so drift hits all alike")
    parser.add_argument("--warm", action="store_true", help="also time each case with the file cached")
    parser.add_argument("--keep", action="store_true", help="do not delete the file at the end")
    args = parser.parse_args(argv)
    try:
        write_s = write_checkpoint(args.path, args.size, args.tensor_mib << 20)
        size = os.path.getsize(args.path)
        print(f"file {args.path}: {size / 2**30:.2f} GiB in {args.tensor_mib} MiB bf16 tensors, "
              f"written at {size / write_s / 1e9:.2f} GB/s; host compute cores: {compute_cores()}")
        out = np.ones(size, np.uint8)  # pre-faulted destination, shared by the copying cases
        medians = {}
        for cold in [True] + ([False] if args.warm else []):
            rates = {name: [] for name in CASES}
            resident = dict.fromkeys(CASES, 0.0)
            for _ in range(args.repeats):
                for name, case in CASES.items():
                    rate, res = measure(case, args.path, out, size, cold)
                    rates[name].append(rate)
                    resident[name] = max(resident[name], res)
            medians[cold] = report("cold" if cold else "warm", rates, resident)
        ratio = medians[True]["nbx copy"] / medians[True]["plain"]
        verdict = "met" if ratio >= 0.8 else "NOT met"
        print(f"goal: nbx copy >= 0.8x plain read (cold, medians): x{ratio:.2f}, {verdict}")
        return 0
    finally:
        if not args.keep and os.path.exists(args.path):
            os.unlink(args.path)


if __name__ == "__main__":
    sys.exit(main())
