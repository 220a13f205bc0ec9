"""What every launch reads: its device's facts and tile settings, and its checked output.

Settings (tiles, warps) come from nbx.autotune's certified settings per launch key, or from the
device file in force for the launch's device. The launches themselves go through nbx.kernels.plans
(one path for every family).
"""
from __future__ import annotations

from nbx.core import device_files
from nbx.core.device import Device
from nbx.core.dtypes import DType
from nbx.core.errors import ArgumentError
from nbx.core.tensor import Tensor, empty


def facts(device: Device) -> device_files.DeviceFacts:
    return device_files.in_force(device)


_TILES: dict = {}


def tiles(family: str, device: Device) -> dict:
    """The default launch of a kernel family on this device (tiles.<family> of its device file).

    Kept per facts object: device_files.forget() makes new ones, so a reread file is seen."""
    in_force = facts(device)
    found = _TILES.get((family, in_force))
    if found is None:
        found = _TILES[family, in_force] = in_force.value(f"tiles.{family}")
    return found


def screen_tolerance(dtype: DType, device: Device) -> float:
    """The deviation from the float64 oracle a kernel's output of dtype may show on this device."""
    return facts(device).value("autotune.screen_tolerance")[dtype.name]


def output(shape, dtype: DType, device: Device, out: Tensor | None = None) -> Tensor:
    """A new contiguous output, or out (a caller's, the certifier's) checked to be one like it."""
    if out is None:
        return empty(shape, dtype, device)
    if tuple(out.shape) != tuple(shape) or out.dtype is not dtype or not out.is_contiguous():
        raise ArgumentError(f"this launch writes a contiguous {dtype.name} output of shape {tuple(shape)}; got a "
                            f"{out.dtype.name} output of shape {out.shape}, contiguous: {out.is_contiguous()}")
    return out
