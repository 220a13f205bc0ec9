"""Which certificates a device may be served: its vendor, its device class, and the compiler.

The device class is the device's name and memory, normalized: 'NVIDIA H200' is 'nvidia-h200-140gb',
an 'NVIDIA H100 80GB HBM3' is 'nvidia-h100-hbm3-80gb'. Memory is the nearest whole GiB to what the
device reports, and a size written in the name is dropped for it. Nearest, not the GiB that holds
it: what a card reports leaves out what the driver reserves, which varies with the driver and the
virtualisation (an H200 reported 143 771 MiB, 140.4 GiB, bare, and 143 155 MiB, 139.8 GiB, in the
GPU machine's VM on 2026-11-29), and one card must be one class. The class always starts with the vendor. The compiler names Triton's version and backend
('triton-3.6.0-cuda'): a setting proven under one Triton build is not served by another.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from nbx.core.errors import DeviceClassError

VENDOR_OF_DEVICE_TYPE = {"cuda": "nvidia", "hip": "amd", "metal": "apple", "interp": "triton"}
_MEMORY_IN_NAME = re.compile(r"(?<![a-z0-9])\d+\s*(gb|gib)(?![a-z0-9])")
_CLASS = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_COMPILER = re.compile(r"[a-z]+-[0-9][A-Za-z0-9.+_]*-[a-z]+")


@dataclass(frozen=True)
class Identity:
    vendor: str
    device_class: str
    compiler: str


def normalize(vendor: str, name: str, total_memory: int) -> str:
    """'<vendor>-<name words>-<memory>gb' from a device's reported name and memory in bytes."""
    if not isinstance(name, str) or not name.strip():
        raise DeviceClassError(f"a {vendor} device with no name cannot be classed")
    if not isinstance(total_memory, int) or total_memory <= 0:
        raise DeviceClassError(f"device {name!r} reports {total_memory!r} bytes of memory; its class needs them")
    words = _MEMORY_IN_NAME.sub(" ", name.lower())
    words = re.sub(r"[^a-z0-9]+", "-", words).strip("-")
    words = re.sub(rf"^{re.escape(vendor)}(-|$)", "", words)
    gib = max(1, round(total_memory / 2**30))
    return "-".join(p for p in (vendor, words, f"{gib}gb") if p)


def check_class(text: str) -> str:
    if not isinstance(text, str) or not _CLASS.fullmatch(text) or "-" not in text:
        raise DeviceClassError(f"{text!r} is not a device class ('<vendor>-<name>-<memory>gb', lowercase, "
                               f"e.g. 'nvidia-h200-140gb')")
    return text


def vendor_of_class(text: str) -> str:
    return check_class(text).split("-", 1)[0]


def check_compiler(text: str) -> str:
    if not isinstance(text, str) or not _COMPILER.fullmatch(text):
        raise DeviceClassError(f"{text!r} is not a compiler name ('triton-<version>-<backend>', e.g. "
                               f"'triton-3.6.0-cuda')")
    return text


def compiler_id(device_type: str) -> str:
    """'triton-<version>-<backend>' of the Triton this process compiles kernels with."""
    try:
        import triton
    except ImportError as exc:
        raise DeviceClassError(f"no Triton in this process, so no compiler to name for {device_type!r}: "
                               f"{exc}") from exc
    return check_compiler(f"triton-{triton.__version__}-{device_type}")


def describe(device) -> tuple[str, str, int]:
    """(vendor, name, total memory in bytes) that the device's backend reports."""
    vendor = VENDOR_OF_DEVICE_TYPE.get(device.type)
    if vendor is None:
        raise DeviceClassError(f"device {device} has no vendor known to nbx.autotune "
                               f"(known device types: {sorted(VENDOR_OF_DEVICE_TYPE)})")
    from nbx.core.device import get_backend
    backend = get_backend(device.type)
    name_of = getattr(backend, "device_name", None)
    memory_of = getattr(backend, "total_memory", None)
    if not callable(name_of) or not callable(memory_of):
        raise DeviceClassError(f"the {device.type!r} backend reports no device_name and total_memory, so "
                               f"{device} cannot be classed for its certificates")
    index = device.index if device.index is not None else backend.current_device()
    return vendor, name_of(index), memory_of(index)


def identify(device) -> Identity:
    """The vendor, device class and compiler of a device, as certificates are filed by."""
    vendor, name, memory = describe(device)
    return Identity(vendor, normalize(vendor, name, memory), compiler_id(device.type))
