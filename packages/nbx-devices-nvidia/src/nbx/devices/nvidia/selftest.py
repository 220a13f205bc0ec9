"""Two tiny Triton kernels and a self-test that proves a device computes with nbx and no torch.

`add` is the smallest useful launch (nbx tensors as Triton pointer arguments, on nbx's current
stream); `spin` keeps the SMs busy for a chosen number of iterations (the overlap test needs a
kernel whose length it can set). Triton is optional: without it `run_selftest` says so by name.
"""
from __future__ import annotations

import time

import numpy as np
from nbx.core.errors import NotSupportedError

try:
    import triton
    import triton.language as tl
except ImportError:  # Triton is optional; the self-test then reports it missing
    triton = tl = None

BLOCK = 1024

if triton is not None:
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)

    @triton.jit
    def spin_kernel(out_ptr, iterations, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = offsets.to(tl.float32)
        for _ in range(iterations):
            x = x * 0.999999 + 0.5
        tl.store(out_ptr + offsets, x)


def _need_triton() -> None:
    if triton is None:
        raise NotSupportedError("the self-test kernels need Triton (pip install triton)")


def add(x, y, out=None):
    """out = x + y by a Triton kernel on x's device and current stream (same dtype, contiguous)."""
    _need_triton()
    from nbx.core.tensor import empty

    from .runtime import device_guard
    if out is None:
        out = empty(x.shape, x.dtype, x.device)
    n = x.size
    with device_guard(x.device.index):
        add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out


def spin(out, iterations: int) -> None:
    """Busy the device: every element of float32 out runs `iterations` dependent multiply-adds."""
    _need_triton()
    from .runtime import device_guard
    with device_guard(out.device.index):
        spin_kernel[(triton.cdiv(out.size, BLOCK),)](out, iterations, BLOCK=BLOCK)


def run_selftest(index: int = 0, n: int = 1 << 20) -> dict:
    """Upload, add by Triton, download, compare with numpy; figures for `nbx info`."""
    import nbx.core as nbx
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    device = f"cuda:{index}"
    result = add(nbx.from_numpy(a, device), nbx.from_numpy(b, device)).numpy()
    ok = bool(np.array_equal(result, a + b))
    return {"device": device, "ok": ok, "elements": n, "seconds": time.perf_counter() - start,
            "triton": triton.__version__}
