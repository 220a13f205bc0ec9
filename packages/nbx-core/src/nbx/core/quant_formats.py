"""The public int4 checkpoint layouts, GPTQ and AWQ, read into nbx's QuantizedTensor.

Both store a linear layer's weight as W[in, out] (K x N) of 4-bit q with, per group of
`group_size` input rows and per output column, a float16 scale s and a 4-bit zero point z:
w = (q - z) * s. nbx's asymmetric type stores q with scale = s and minimum = -z * s over its own
[out, in] layout (two q a byte, the even input index in the low nibble). The minima are computed
in float32 by default, where -z * s is exact (a 4-bit integer times a float16), so the loaded
weight dequantizes to exactly (q - z) * s; scale_dtype="float16" halves the scales' memory at the
price of minima rounded to float16.

GPTQ (AutoGPTQ / Optimum, format "gptq", 4 bits), from its format description:
    qweight  int32 [K / 8, N]          eight q of rows 8i .. 8i + 7 of a column, row 8i + j in bits 4j..4j+3
    qzeros   int32 [K / group, N / 8]  eight z of columns 8i .. 8i + 7 of a group, column 8i + j in bits 4j
                                       (the format stores z - 1: the zero point is the stored nibble + 1,
                                       1 .. 16, as AutoGPTQ's own unpacking reads it)
    scales   float16 [K / group, N]
    g_idx    int32 [K] (optional)      the group of each input row; nbx's groups are contiguous, so an
                                       act-order checkpoint (desc_act: g_idx not k // group) is refused
AWQ (AutoAWQ "GEMM" layout, 4 bits):
    qweight  int32 [K, N / 8]          eight q of columns 8i .. 8i + 7 of a row, interleaved: bits 4s..4s+3
                                       hold column 8i + AWQ_ORDER[s], AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
    qzeros   int32 [K / group, N / 8]  the zero points, packed the same way (no offset)
    scales   float16 [K / group, N]
"""
from __future__ import annotations

import numpy as np

from .device import as_device
from .dtypes import as_dtype
from .errors import DTypeError, FileFormatError, NotSupportedError, ShapeError
from .quant import QuantizedTensor, pack_int4
from .tensor import Tensor, from_numpy

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
NIBBLES = 8   # 4-bit values an int32 holds


def _host(name: str, t, dtype_kind: str) -> np.ndarray:
    a = t.numpy() if isinstance(t, Tensor) else np.asarray(t)
    if dtype_kind == "int" and a.dtype not in (np.int32, np.uint32):
        raise DTypeError(f"{name} is packed int32, got {a.dtype}")
    if dtype_kind == "float" and a.dtype.kind != "f" and str(a.dtype) != "bfloat16":
        raise DTypeError(f"{name} is a float tensor, got {a.dtype}")
    return a


def _nibbles(packed: np.ndarray, axis: int) -> np.ndarray:
    """The eight 4-bit values of each int32 along axis (value j from bits 4j), that axis 8x longer."""
    words = packed.astype(np.uint32)
    parts = [(words >> np.uint32(4 * j)) & np.uint32(0xF) for j in range(NIBBLES)]
    stacked = np.stack(parts, axis=axis + 1)   # value j right after its word along axis
    shape = list(packed.shape)
    shape[axis] *= NIBBLES
    return stacked.reshape(shape).astype(np.int16)


def _quantized(q_kn: np.ndarray, z_gn: np.ndarray, s_gn: np.ndarray, group: int, scale_dtype, device):
    """QuantizedTensor of w = (q - z) * s from q [K, N], z and s [K / group, N]."""
    k, n = q_kn.shape
    if s_gn.shape != (k // group, n) or z_gn.shape != s_gn.shape:
        raise ShapeError(f"scales {s_gn.shape} and zeros {z_gn.shape} do not hold {k // group} groups of {n} "
                         f"columns (weight {k} x {n}, group size {group})")
    scale = s_gn.astype(np.float32)
    minimum = -z_gn.astype(np.float32) * scale
    sdt = as_dtype(scale_dtype).host
    qweight = pack_int4(np.ascontiguousarray(q_kn.T).astype(np.int8))
    tensors = [from_numpy(np.ascontiguousarray(a), as_device(device), copy=True)
               for a in (qweight, scale.T.astype(sdt), minimum.T.astype(sdt))]
    return QuantizedTensor(*tensors, group_size=group, shape=(n, k), scheme="asymmetric")


def from_gptq(qweight, qzeros, scales, g_idx=None, *, scale_dtype="float32", device="cpu") -> QuantizedTensor:
    """A GPTQ 4-bit linear layer (qweight [K/8, N], qzeros [K/g, N/8], scales [K/g, N]) as an
    asymmetric QuantizedTensor of shape [N, K]."""
    q = _nibbles(_host("qweight", qweight, "int"), 0)                      # [K, N]
    s = _host("scales", scales, "float")
    if s.ndim != 2 or s.shape[0] == 0 or q.shape[0] % s.shape[0]:
        raise ShapeError(f"GPTQ scales {s.shape} do not divide the {q.shape[0]} input rows into groups")
    group = q.shape[0] // s.shape[0]
    if g_idx is not None:
        g = np.asarray(g_idx.numpy() if isinstance(g_idx, Tensor) else g_idx).astype(np.int64)
        if g.shape != (q.shape[0],) or not np.array_equal(g, np.arange(q.shape[0]) // group):
            raise NotSupportedError("this GPTQ checkpoint orders its groups by activation (desc_act: g_idx is not "
                                    "k // group_size); nbx's int4 groups are contiguous runs of input rows")
    z = _nibbles(_host("qzeros", qzeros, "int"), 1) + 1                    # the format stores z - 1
    return _quantized(q, z[:, :s.shape[1]], s, group, scale_dtype, device)


def _awq_columns(packed: np.ndarray) -> np.ndarray:
    """AWQ words [R, N/8] -> values [R, N] in column order (slot s holds column AWQ_ORDER[s])."""
    slots = _nibbles(packed, 1).reshape(packed.shape[0], -1, NIBBLES)
    columns = np.empty_like(slots)
    columns[:, :, list(AWQ_ORDER)] = slots
    return columns.reshape(packed.shape[0], -1)


def from_awq(qweight, qzeros, scales, *, scale_dtype="float32", device="cpu") -> QuantizedTensor:
    """An AWQ (GEMM layout) 4-bit linear layer (qweight [K, N/8], qzeros [K/g, N/8], scales
    [K/g, N]) as an asymmetric QuantizedTensor of shape [N, K]."""
    q = _awq_columns(_host("qweight", qweight, "int"))                    # [K, N]
    s = _host("scales", scales, "float")
    if s.ndim != 2 or s.shape[0] == 0 or q.shape[0] % s.shape[0]:
        raise ShapeError(f"AWQ scales {s.shape} do not divide the {q.shape[0]} input rows into groups")
    z = _awq_columns(_host("qzeros", qzeros, "int"))
    return _quantized(q, z, s, q.shape[0] // s.shape[0], scale_dtype, device)


def load(mapping, prefix: str, layout: str, **kwargs) -> QuantizedTensor:
    """<prefix>.qweight, .qzeros, .scales (and GPTQ's .g_idx) of a name -> Tensor mapping (a
    loaded safetensors file) in layout "gptq" or "awq"."""
    names = {part: f"{prefix}.{part}" for part in ("qweight", "qzeros", "scales", "g_idx")}
    missing = [names[p] for p in ("qweight", "qzeros", "scales") if names[p] not in mapping]
    if missing:
        raise FileFormatError(f"no tensor named {', '.join(map(repr, missing))} (a {layout} layer has qweight, "
                              f"qzeros and scales)")
    parts = [mapping[names[p]] for p in ("qweight", "qzeros", "scales")]
    if layout == "gptq":
        return from_gptq(*parts, mapping.get(names["g_idx"]), **kwargs)
    if layout == "awq":
        return from_awq(*parts, **kwargs)
    raise NotSupportedError(f"int4 layout {layout!r} is not one nbx reads (gptq, awq)")


__all__ = ["from_gptq", "from_awq", "load", "AWQ_ORDER"]
