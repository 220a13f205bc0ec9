"""Host parallelism: large host work runs on a thread pool sized to the machine's compute cores.

numpy releases the GIL in its loops, so threads scale for conversions and dequantization. The
BLAS is held to the same number of threads while such work runs, so the two do not oversubscribe.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache

import numpy as np
from threadpoolctl import threadpool_limits

MIN_CHUNK_BYTES = 4 << 20  # below this a thread costs more than it saves


def compute_cores() -> int:
    """The cores this process may run on (affinity and cgroup limits respected)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, _cgroup_cpu_limit() or cores))


def _cgroup_cpu_limit() -> int | None:
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()
        return None if quota == "max" else max(1, int(quota) // int(period))
    except (OSError, ValueError):
        return None


@lru_cache(maxsize=1)
def pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=compute_cores(), thread_name_prefix="nbx-host")


@contextmanager
def blas_limited():
    """Hold the BLAS to the host pool's size while nbx's own threads run."""
    with threadpool_limits(limits=compute_cores()):
        yield


def parallel_map(fn: Callable, items: Iterable) -> list:
    items = list(items)
    if len(items) <= 1 or compute_cores() == 1:
        return [fn(item) for item in items]
    with blas_limited():
        return list(pool().map(fn, items))


def row_chunks(n_rows: int, row_bytes: int) -> list[slice]:
    """Split n_rows into at most compute_cores() slices of at least MIN_CHUNK_BYTES each."""
    if n_rows == 0:
        return []
    by_size = max(1, (n_rows * row_bytes) // MIN_CHUNK_BYTES)
    count = max(1, min(compute_cores(), by_size, n_rows))
    bounds = np.linspace(0, n_rows, count + 1).astype(int)
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def parallel_convert(src: np.ndarray, dtype, out: np.ndarray | None = None) -> np.ndarray:
    """src.astype(dtype) with the rows spread over the host's cores."""
    dtype = np.dtype(dtype)
    if out is None:
        out = np.empty(src.shape, dtype)
    flat_src, flat_out = src.reshape(-1), out.reshape(-1)

    def convert(part: slice) -> None:
        np.copyto(flat_out[part], flat_src[part], casting="unsafe")  # no temporary array

    parallel_map(convert, row_chunks(flat_src.size, src.itemsize))
    return out
