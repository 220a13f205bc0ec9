"""Programmatic dependent launch: a kernel's start overlapped with its predecessor's tail.

A decode step is a chain of small kernels (ten a layer), each a few microseconds, and each paid its
own launch, ramp and tail before the next could begin. Where the device file says
`compute.dependent_launch` (Hopper and later), a kernel that takes a `PDL: tl.constexpr` parameter is
launched with the stream's programmatic-serialization attribute (Triton's `launch_pdl`) and compiled
with PDL=True: its programs are scheduled while its predecessor still runs, and `wait_for_predecessor`,
its first statement, holds them until the predecessor has finished and its writes are visible. No
memory is read or written before that wait (a buffer the pool handed on may still be read by the
predecessor), so the order of results is the stream's. Then it lets its own successor be scheduled.

Everywhere else (the interpreter, older GPUs, a kernel without the parameter) PDL keeps its default
False: the branch is compiled out and the launch is a plain one.
"""
from __future__ import annotations

import triton
import triton.language as tl

from nbx.core import device_files
from nbx.core.device import Device


@triton.jit
def wait_for_predecessor(PDL: tl.constexpr):
    """The first statement of a kernel that takes PDL: with PDL, wait for the kernel before it in the
    stream to finish (its writes visible), then let the kernel after it be scheduled."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_rows(w_ptr, rows, row_ok, n, stride_row, stride_col, CHUNK: tl.constexpr):
    """Ask the L2 for rows [rows] x columns [0, n) of w (stride_col 1: each row a contiguous run), one
    128-byte line a lane, CHUNK lines of each row at a time: the only memory instruction a kernel may issue
    before its wait. A prefetch writes no register and changes no memory, and the L2 is where every SM's
    writes meet, so the lines it brings are the predecessor's final ones where it wrote them. Elsewhere
    (another stride_col) nothing: a line would serve one element."""
    if stride_col == 1:
        per_line: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth
        lines = tl.arange(0, CHUNK) * per_line
        starts = w_ptr + rows[:, None].to(tl.int64) * stride_row
        for k in range(0, n, CHUNK * per_line):
            at = k + lines
            wanted = tl.where(row_ok[:, None] & (at < n)[None, :], starts + at[None, :], w_ptr)
            tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [wanted], dtype=tl.int32,
                                      is_pure=False, pack=1)


_ALLOWED: dict = {}


def launch_meta(kernel, device: Device, meta: dict) -> dict:
    """meta, with PDL=True and launch_pdl=True where device allows dependent launch and kernel takes a PDL
    parameter the plan left unset; meta itself otherwise."""
    if "PDL" not in (getattr(kernel, "arg_names", None) or ()) or "PDL" in meta or not allowed(device):
        return meta
    return {**meta, "PDL": True, "launch_pdl": True}


def allowed(device: Device) -> bool:
    """Whether device's file says a kernel may be launched while its predecessor runs (absent: no)."""
    in_force = device_files.in_force(device)
    found = _ALLOWED.get(in_force)  # per facts object: device_files.forget() makes new ones
    if found is None:
        found = _ALLOWED[in_force] = ("compute.dependent_launch" in in_force
                                      and bool(in_force.value("compute.dependent_launch")))
    return found


__all__ = ["wait_for_predecessor", "prefetch_rows", "launch_meta", "allowed"]
