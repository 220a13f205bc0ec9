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

Measured on the H200 (docs/performance.md, eleventh session): a Llama-3.2-1B decode token 1048 -> 1023
us, the captured rms_norm chain 4.5 us of GPU time against 6.2. Tried and not kept: GEMV programs asking
the L2 for their weight rows before the wait (prefetch.global.L2), which made the token 30-40 % slower.
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


def launch_meta(kernel, device: Device, meta: dict) -> dict:
    """meta, with PDL=True and launch_pdl=True where device allows dependent launch and kernel takes a PDL
    parameter the plan left unset; meta itself otherwise."""
    if "PDL" not in (getattr(kernel, "arg_names", None) or ()) or "PDL" in meta or not allowed(device):
        return meta
    return {**meta, "PDL": True, "launch_pdl": True}


def allowed(device: Device) -> bool:
    """Whether device's file says a kernel may be launched while its predecessor runs (absent: no).
    Read once a runner (a launch's first call), from the facts device_files keeps per device."""
    in_force = device_files.in_force(device)
    return "compute.dependent_launch" in in_force and bool(in_force.value("compute.dependent_launch"))


__all__ = ["wait_for_predecessor", "launch_meta", "allowed"]
