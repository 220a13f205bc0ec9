"""Grouped int4 weights: quantize, pack two per byte, unpack, dequantize.

A weight of shape (..., K) (K = the input dim, the last one) is cut into groups of `group_size`
consecutive elements along K; every group has its own scale (and, asymmetric, its minimum):

    asymmetric  q in 0..15   w ~ q * scale + minimum    scale = (max - minimum) / 15
    symmetric   q in -8..7   w ~ q * scale              scale = max(-min / 8, max / 7)

q = round-to-nearest-even((w - minimum) / scale), resp. of w / scale. The stored minimum is w's
minimum rounded down to the scale dtype and the stored scale rounded up, so every w of the group
lies inside the grid and |dequantize(q) - w| <= scale / 2 holds for the stored values.

Packing: byte j of a row holds q[2j] in its low nibble and q[2j+1] in its high nibble; symmetric
q are two's-complement nibbles (q & 0xF). On disk (safetensors), for a prefix such as
`model.layers.0.mlp.up_proj`:

    <prefix>.qweight  uint8   (..., K // 2)
    <prefix>.scales   float   (..., K // group_size)
    <prefix>.zeros    float   (..., K // group_size)   the group minima; absent when symmetric

Dequantization computes q * scale (+ minimum) in float32 (float64 for a float64 result) and
casts; large weights are spread over the host's cores by rows.
"""
from __future__ import annotations

from math import prod

import numpy as np

from . import dtypes
from .device import CPU, as_device
from .dispatch import has_implementation, implementation
from .errors import ArgumentError, CrossDeviceError, DTypeError, FileFormatError, ShapeError
from .host import parallel_map, row_chunks
from .tensor import Tensor, empty, from_numpy

SCHEMES = {"asymmetric": (0, 15), "symmetric": (-8, 7)}  # scheme -> range of q
SCALE_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _check_scheme(scheme: str) -> tuple[int, int]:
    try:
        return SCHEMES[scheme]
    except (KeyError, TypeError):
        raise ArgumentError(f"unknown quantization scheme {scheme!r} (known: {', '.join(SCHEMES)})") from None


def _check_grouping(shape: tuple, group_size) -> None:
    if not shape:
        raise ShapeError("an int4 weight has at least one dim (the input dim is the last)")
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size <= 0:
        raise ArgumentError(f"group_size is a positive integer, got {group_size!r}")
    if shape[-1] % 2:
        raise ShapeError(f"the input dim {shape[-1]} is odd: two int4 values pack into each byte")
    if shape[-1] % group_size:
        raise ShapeError(f"group size {group_size} does not divide the input dim {shape[-1]}")


# ---- packing -----------------------------------------------------------------------------------
def pack_int4(q: np.ndarray, signed: bool = False) -> np.ndarray:
    """Two int4 per uint8 along the last dim: low nibble = even index, high nibble = odd index."""
    q = np.asarray(q)
    if q.ndim == 0 or q.shape[-1] % 2:
        raise ShapeError(f"int4 packing needs an even last dim, got shape {q.shape}")
    lo, hi = (-8, 7) if signed else (0, 15)
    if q.size and (q.min() < lo or q.max() > hi):
        raise ArgumentError(f"{'signed' if signed else 'unsigned'} int4 values lie in [{lo}, {hi}], "
                            f"got [{q.min()}, {q.max()}]")
    nibbles = q.astype(np.uint8) & np.uint8(0xF)
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << np.uint8(4))


def unpack_int4(packed: np.ndarray, signed: bool = False) -> np.ndarray:
    """int8 values (..., 2 * n) from packed bytes (..., n); signed nibbles are sign-extended."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise DTypeError(f"packed int4 data is uint8, got {packed.dtype}")
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), np.int8)
    out[..., 0::2] = packed & np.uint8(0xF)
    out[..., 1::2] = packed >> np.uint8(4)
    if signed:
        out ^= np.int8(8)  # two's-complement nibble -> int8: (n ^ 8) - 8
        out -= np.int8(8)
    return out


# ---- quantization ------------------------------------------------------------------------------
def _rounded(values: np.ndarray, host: np.dtype, direction: float) -> np.ndarray:
    """values cast to host, then moved one step toward `direction` wherever the cast went the other way."""
    with np.errstate(over="ignore"):  # an overflow becomes inf, refused by the caller
        cast = values.astype(host)
    wrong = cast.astype(np.float64) < values if direction > 0 else cast.astype(np.float64) > values
    if wrong.any():
        cast = np.where(wrong, np.nextafter(cast, np.full_like(cast, direction)), cast)
    return cast


def quantize(w, group_size: int, scheme: str = "asymmetric", scale_dtype=None) -> "QuantizedTensor":
    """Quantize a float weight (an nbx Tensor or a numpy array) to grouped int4."""
    lo, hi = _check_scheme(scheme)
    device = w.device if isinstance(w, Tensor) else CPU
    host = w.numpy() if isinstance(w, Tensor) else np.asarray(w)
    source = dtypes.as_dtype(host.dtype)
    if source.kind != "float":
        raise DTypeError(f"int4 quantization takes a float weight, not {source.name}")
    shape = tuple(host.shape)
    _check_grouping(shape, group_size)
    sdt = source if scale_dtype is None else dtypes.as_dtype(scale_dtype)
    if sdt.name not in SCALE_DTYPES:
        raise DTypeError(f"int4 scales are one of {', '.join(SCALE_DTYPES)}, not {sdt.name}")
    w64 = host.astype(np.float64).reshape(-1, shape[-1] // group_size, group_size)
    if not np.isfinite(w64).all():
        raise ArgumentError("int4 quantization needs a finite weight (it holds inf or NaN)")
    top, bottom = w64.max(axis=-1), w64.min(axis=-1)
    if scheme == "asymmetric":
        minima = _rounded(bottom, sdt.host, -np.inf)
        base = minima.astype(np.float64)
        scales = _rounded((top - base) / hi, sdt.host, np.inf)
    else:
        minima, base = None, np.zeros_like(bottom)
        scales = _rounded(np.maximum(np.maximum(-bottom / -lo, top / hi), 0.0), sdt.host, np.inf)
    step = scales.astype(np.float64)
    if not (np.isfinite(step).all() and (minima is None or np.isfinite(base).all())):
        raise ArgumentError(f"the weight's range does not fit the scale dtype {sdt.name}")
    ratio = np.divide(w64 - base[..., None], step[..., None], out=np.zeros_like(w64),
                      where=step[..., None] > 0)
    q = np.clip(np.rint(ratio), lo, hi).astype(np.int8).reshape(shape)
    group_shape = shape[:-1] + (shape[-1] // group_size,)
    tensors = [from_numpy(pack_int4(q, signed=lo < 0), device, copy=True),
               from_numpy(scales.reshape(group_shape), device, copy=True),
               None if minima is None else from_numpy(minima.reshape(group_shape), device, copy=True)]
    return QuantizedTensor(*tensors, group_size=group_size, shape=shape, scheme=scheme)


def _dequantize_host(qweight: np.ndarray, scales: np.ndarray, zeros, group_size: int, signed: bool,
                     out: np.ndarray) -> None:
    """out (rows, K) = q * scale (+ minimum), over the host's cores in row chunks."""
    rows, width = out.shape
    compute = np.float64 if out.dtype == np.float64 else np.float32
    groups = width // group_size

    def work(part: slice) -> None:
        n = part.stop - part.start
        q = unpack_int4(qweight[part], signed).astype(compute).reshape(n, groups, group_size)
        values = q * scales[part].astype(compute)[..., None]
        if zeros is not None:
            values += zeros[part].astype(compute)[..., None]
        out[part] = values.reshape(n, width).astype(out.dtype, copy=False)

    parallel_map(work, row_chunks(rows, width * np.dtype(compute).itemsize))


class QuantizedTensor:
    """A grouped int4 weight: packed uint8 data, per-group scales and (asymmetric) minima."""

    def __init__(self, qweight: Tensor, scales: Tensor, zeros: Tensor | None, *, group_size: int,
                 shape, scheme: str):
        _check_scheme(scheme)
        shape = tuple(int(s) for s in shape)
        _check_grouping(shape, group_size)
        if not isinstance(qweight, Tensor) or qweight.dtype.name != "uint8":
            raise DTypeError(f"qweight is a uint8 tensor, got {getattr(qweight, 'dtype', type(qweight).__name__)}")
        if qweight.shape != shape[:-1] + (shape[-1] // 2,):
            raise ShapeError(f"qweight of shape {qweight.shape} does not hold a weight of shape {shape}")
        group_shape = shape[:-1] + (shape[-1] // group_size,)
        named = [("scales", scales)] + ([("zeros", zeros)] if scheme == "asymmetric" else [])
        if scheme == "symmetric" and zeros is not None:
            raise ArgumentError("a symmetric int4 weight has no zeros (minima)")
        for name, t in named:
            if not isinstance(t, Tensor):
                raise ArgumentError(f"an {scheme} int4 weight needs {name}, got {type(t).__name__}")
            if t.dtype.name not in SCALE_DTYPES or t.dtype.name != scales.dtype.name:
                raise DTypeError(f"{name} is {t.dtype.name}; scales and zeros share one of {', '.join(SCALE_DTYPES)}")
            if t.shape != group_shape:
                raise ShapeError(f"{name} of shape {t.shape} do not match groups {group_shape} "
                                 f"(weight {shape}, group size {group_size})")
        devices = {t.device for t in (qweight, scales, zeros) if t is not None}
        if len(devices) > 1:
            raise CrossDeviceError(f"qweight, scales and zeros live on different devices: {sorted(map(str, devices))}")
        self.qweight, self.scales, self.zeros = qweight, scales, zeros
        self.group_size, self.shape, self.scheme = int(group_size), shape, scheme

    quantize = staticmethod(quantize)

    @property
    def device(self):
        return self.qweight.device

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.qweight, self.scales, self.zeros) if t is not None)

    def to(self, device) -> "QuantizedTensor":
        dev = as_device(device)
        moved = [None if t is None else t.to(dev) for t in (self.qweight, self.scales, self.zeros)]
        return QuantizedTensor(*moved, group_size=self.group_size, shape=self.shape, scheme=self.scheme)

    def dequantize(self, dtype=None) -> Tensor:
        """The float weight (float32 unless dtype says otherwise) on the same device."""
        dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
        if dt.kind != "float":
            raise DTypeError(f"int4 weights dequantize to a float dtype, not {dt.name}")
        if has_implementation("quant.dequantize_int4", self.device.type):
            out = empty(self.shape, dt, self.device)
            implementation("quant.dequantize_int4", self.device)(out, self)
            return out
        width = self.shape[-1]
        rows = prod(self.shape[:-1])
        host = empty(self.shape, dt, CPU)
        flat = [None if t is None else np.ascontiguousarray(t.numpy()).reshape(rows, -1)
                for t in (self.qweight, self.scales, self.zeros)]
        _dequantize_host(*flat, self.group_size, self.scheme == "symmetric",
                         host._host_view().reshape(rows, width))
        return host.to(self.device)

    # ---- safetensors names --------------------------------------------------------------------
    def to_safetensors_dict(self, prefix: str) -> dict[str, Tensor]:
        out = {f"{prefix}.qweight": self.qweight, f"{prefix}.scales": self.scales}
        if self.zeros is not None:
            out[f"{prefix}.zeros"] = self.zeros
        return out

    @classmethod
    def from_safetensors(cls, mapping, prefix: str) -> "QuantizedTensor":
        """Read <prefix>.qweight, .scales and (asymmetric) .zeros from a name -> Tensor mapping."""
        names = {part: f"{prefix}.{part}" for part in ("qweight", "scales", "zeros")}
        for part in ("qweight", "scales"):
            if names[part] not in mapping:
                raise FileFormatError(f"no tensor named {names[part]!r} (an int4 weight needs "
                                      f"{names['qweight']!r} and {names['scales']!r})")
        qweight, scales = mapping[names["qweight"]], mapping[names["scales"]]
        zeros = mapping[names["zeros"]] if names["zeros"] in mapping else None
        if qweight.ndim == 0 or scales.ndim == 0 or scales.shape[-1] == 0:
            raise ShapeError(f"{prefix}: qweight {qweight.shape} and scales {scales.shape} hold no groups")
        width = 2 * qweight.shape[-1]
        if width % scales.shape[-1]:
            raise ShapeError(f"{prefix}: {scales.shape[-1]} groups do not divide the input dim {width}")
        return cls(qweight, scales, zeros, group_size=width // scales.shape[-1],
                   shape=qweight.shape[:-1] + (width,),
                   scheme="symmetric" if zeros is None else "asymmetric")

    def __repr__(self) -> str:
        return (f"QuantizedTensor(shape={self.shape}, scheme={self.scheme!r}, group_size={self.group_size}, "
                f"scales={self.scales.dtype.name}, device='{self.device}')")
