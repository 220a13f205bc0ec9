"""Random draws: rand, randn, randint, uniform, normal, bernoulli, dropout_mask, dropout.

The stream (philox.py): word j at counter `offset` is lane j % 4 of Philox4x32-10(seed, offset + j // 4),
so one Philox call serves four words. Element i of a draw (row-major order of the output) takes
word i, except randint, whose element i takes words 2i and 2i + 1. A draw of n elements uses
ceil(n / 4) counters (randint: ceil(n / 2)) and moves the generator's offset past them: every draw
starts on a fresh counter, so consecutive draws never share a word, and a kernel's first element is
lane 0 (its stores aligned). In a Triton kernel, with `c = offset + i // 4` for counter i // 4 of
the draw (int64 once it can pass 2**31 - 1) and `seed` the generator's seed:

    rand          tl.rand4x(seed, c)[i % 4]
    randn         tl.randn4x(seed, c)[i % 4]: lanes (0, 1) give normals 4k, 4k+1 (cos, sin),
                  lanes (2, 3) normals 4k+2, 4k+3
    randint       u = lane(2h) | lane(2h+1) << 32 of counter offset + i // 2, h = i % 2 (uint64);
                  low + u % (high - low)  (uint64 arithmetic; u itself when high - low == 2**64);
                  total bias at most (high - low) / 2**64
    uniform       rand * float32(high - low) + float32(low)
    normal        randn * float32(std) + float32(mean)
    bernoulli     rand < float32(p)        (a float64 tensor p compares in float64)
    dropout_mask  rand >= float32(p)       (True = keep; p=0 keeps all, p=1 none)
    dropout       where(keep, x * float32(1 / (1 - p)), 0)

The affine maps (uniform, normal) round the product and the sum separately, in float32 (float64
when the output is float64): a kernel keeps them unfused, with enable_fp_fusion=False at launch
(or libdevice's fmul_rn/fadd_rn), to match the bits; with Triton's default fusion into an FMA only
59% of uniform draws matched (H200, Triton 3.6, 4M draws). Outputs other than float32 are the
float32 value cast (round to nearest); rand in a narrower float dtype is then held below 1.0.

The words and everything built on the uniforms (rand, uniform, bernoulli, dropout masks, randint)
are bit-equal on every device. randn goes through the device's log/sqrt/cos/sin: on a GPU its last
bits may differ (see nbx.kernels.random); under TRITON_INTERPRET=1 (numpy's math) it is bit-equal.

Kernels take over a device type by registering "random.<op>" with nbx.core.dispatch.register:
fn(out, seed, offset, *args) fills the fresh contiguous `out`. Without one, the numbers are drawn
on the host and copied over (the same stream; randn's last ulps aside, see above).
"""
from __future__ import annotations

from math import prod

import numpy as np

from .. import dtypes, layout
from ..device import CPU, as_device
from ..dispatch import has_implementation, implementation, register
from ..errors import ArgumentError, CrossDeviceError, DTypeError, ShapeError
from ..tensor import Tensor, empty
from . import philox
from .generator import UINT64_LIMIT, resolve

__all__ = ["rand", "randn", "randint", "uniform", "normal", "bernoulli", "dropout_mask", "dropout"]


# ---- front-ends --------------------------------------------------------------------------------
def rand(*shape, dtype=None, device=None, generator=None) -> Tensor:
    """Uniform floats in [0, 1): word i of the stream, tl.rand4x(seed, offset + i // 4)[i % 4]."""
    return _draw("rand", shape, _float_dtype("rand", dtype), device, generator)


def randn(*shape, dtype=None, device=None, generator=None) -> Tensor:
    """Standard normal floats: tl.randn4x(seed, offset + i // 4)[i % 4]."""
    return _draw("randn", shape, _float_dtype("randn", dtype), device, generator)


def randint(low: int, high: int, shape, *, dtype=None, device=None, generator=None) -> Tensor:
    """Integers uniform in [low, high); int64 unless dtype says otherwise."""
    dt = dtypes.DEFAULT_INT if dtype is None else dtypes.as_dtype(dtype)
    if dt.kind not in ("int", "uint"):
        raise DTypeError(f"randint draws integers, not {dt.name}")
    low, high = _integer("randint low", low), _integer("randint high", high)
    if high <= low:
        raise ArgumentError(f"randint needs low < high, got [{low}, {high})")
    info = np.iinfo(dt.host)
    if low < int(info.min) or high - 1 > int(info.max):
        raise ArgumentError(f"randint range [{low}, {high}) does not fit {dt.name} "
                            f"[{int(info.min)}, {int(info.max)}]")
    return _draw("randint", (shape,), dt, device, generator, low, high)


def uniform(low: float, high: float, shape, *, dtype=None, device=None, generator=None) -> Tensor:
    """Floats uniform in [low, high): rand * (high - low) + low."""
    low, high = _real("uniform low", low), _real("uniform high", high)
    if not low <= high:
        raise ArgumentError(f"uniform needs low <= high, got [{low}, {high})")
    return _draw("uniform", (shape,), _float_dtype("uniform", dtype), device, generator, low, high)


def normal(mean: float, std: float, shape, *, dtype=None, device=None, generator=None) -> Tensor:
    """Normal floats: randn * std + mean."""
    mean, std = _real("normal mean", mean), _real("normal std", std)
    if std < 0:
        raise ArgumentError(f"normal needs std >= 0, got {std}")
    return _draw("normal", (shape,), _float_dtype("normal", dtype), device, generator, mean, std)


def bernoulli(p, shape=None, *, dtype=None, device=None, generator=None) -> Tensor:
    """1 with probability p, else 0 (float32 unless dtype says otherwise). p: a float or a tensor
    of probabilities, broadcast to shape (which defaults to p's shape)."""
    dt = _real_dtype("bernoulli", dtype, dtypes.DEFAULT_FLOAT)
    if isinstance(p, Tensor):
        _check_probability_tensor(p)
        shape = p.shape if shape is None else layout.as_shape(shape)
        try:
            fits = layout.broadcast_shapes(p.shape, shape) == shape
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(f"bernoulli probabilities of shape {p.shape} do not broadcast to {shape}")
        if device is not None and as_device(device) != p.device:
            raise CrossDeviceError(f"bernoulli probabilities live on {p.device}, the draw was asked on {device}")
        device = p.device
    else:
        p = _probability("bernoulli", p)
        if shape is None:
            raise ArgumentError("bernoulli with a scalar p needs a shape")
    return _draw("bernoulli", (shape,), dt, device, generator, p)


def dropout_mask(shape, p: float, *, dtype=None, device=None, generator=None) -> Tensor:
    """The keep mask of dropout: True (1) with probability 1 - p; bool unless dtype says otherwise."""
    dt = _real_dtype("dropout_mask", dtype, dtypes.bool_)
    return _draw("dropout_mask", (shape,), dt, device, generator, _probability("dropout_mask", p))


def dropout(x: Tensor, p: float, *, generator=None) -> Tensor:
    """x with each element zeroed with probability p and the rest scaled by 1 / (1 - p)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"dropout takes a tensor, got {type(x).__name__}")
    if x.dtype.kind != "float":
        raise DTypeError(f"dropout takes floating tensors, not {x.dtype.name}")
    return _draw("dropout", (x.shape,), x.dtype, x.device, generator, x, _probability("dropout", p))


# ---- validation ----------------------------------------------------------------------------------
def _float_dtype(op: str, dtype):
    dt = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    if dt.kind != "float":
        raise DTypeError(f"{op} draws floats, not {dt.name}")
    return dt


def _real_dtype(op: str, dtype, default):
    dt = default if dtype is None else dtypes.as_dtype(dtype)
    if dt.kind == "complex":
        raise DTypeError(f"{op} does not produce {dt.name}")
    return dt


def _integer(what: str, value) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ArgumentError(f"{what} is an integer, got {value!r}")
    return int(value.__index__())


def _real(what: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{what} is a real number, got {value!r}")
    value = float(value)
    if not np.isfinite(value):
        raise ArgumentError(f"{what} must be finite, got {value}")
    return value


def _probability(op: str, p) -> float:
    p = _real(f"{op} p", p)
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"{op} p must lie in [0, 1], got {p}")
    return p


def _check_probability_tensor(p: Tensor) -> None:
    if p.dtype.kind != "float":
        raise DTypeError(f"bernoulli probabilities are floats, not {p.dtype.name}")
    values = p.numpy()
    if values.size and not (np.all(values >= 0) and np.all(values <= 1)):
        raise ArgumentError("bernoulli probabilities must lie in [0, 1] (a value lies outside, or is NaN)")


# ---- dispatch --------------------------------------------------------------------------------------
WORDS_PER_ELEMENT = {"randint": 2}  # 64 random bits an element; every other draw takes one word


def counters_of(op: str, n: int) -> int:
    """The counters a draw of n elements of `op` uses, and so moves the generator's offset by."""
    return philox.counters_for(n * WORDS_PER_ELEMENT.get(op, 1))


def _draw(op: str, shape_args, dt, device, generator, *args) -> Tensor:
    """Validate, take the counters, fill a fresh tensor on the device (or on the host, then copy)."""
    shape = layout.as_shape(layout.shape_args(shape_args))
    gen = resolve(generator)
    dev = as_device(device)
    name = f"random.{op}"
    seed, offset = gen.reserve(counters_of(op, prod(shape)))
    if has_implementation(name, dev.type):
        out = empty(shape, dt, dev)
        implementation(name, dev)(out, seed, offset, *args)
        return out
    host_args = [a.to(CPU) if isinstance(a, Tensor) else a for a in args]
    out = empty(shape, dt, CPU)
    implementation(name, CPU)(out, seed, offset, *host_args)
    return out.to(dev)


# ---- CPU implementations -------------------------------------------------------------------------
def _write(out: Tensor, values: np.ndarray) -> None:
    out._host_view().reshape(-1)[...] = values.reshape(-1).astype(out.dtype.host, copy=False)


def _compute_dtype(dt) -> np.dtype:
    return np.dtype(np.float64) if dt.host == np.float64 else np.dtype(np.float32)


@register("random.rand", "cpu")
def _rand_cpu(out: Tensor, seed: int, offset: int) -> None:
    values = philox.uniform_stream(seed, offset, out.size)
    if out.dtype.itemsize < 4:  # rounding may reach 1.0: hold it at the largest value below
        below_one = np.nextafter(np.ones((), out.dtype.host), np.zeros((), out.dtype.host))
        values = np.minimum(values.astype(out.dtype.host), below_one)
    _write(out, values)


@register("random.randn", "cpu")
def _randn_cpu(out: Tensor, seed: int, offset: int) -> None:
    _write(out, philox.normal_stream(seed, offset, out.size))


@register("random.randint", "cpu")
def _randint_cpu(out: Tensor, seed: int, offset: int, low: int, high: int) -> None:
    bits = philox.uint64_stream(seed, offset, out.size)
    span = high - low
    if span < UINT64_LIMIT:
        bits = bits % np.uint64(span)
    values = bits + np.uint64(low % UINT64_LIMIT)  # wraps mod 2**64 as the kernel's uint64 add
    if out.dtype.kind == "int":
        values = values.view(np.int64)
    _write(out, values)


@register("random.uniform", "cpu")
def _uniform_cpu(out: Tensor, seed: int, offset: int, low: float, high: float) -> None:
    ct = _compute_dtype(out.dtype)
    u = philox.uniform_stream(seed, offset, out.size).astype(ct)
    _write(out, u * ct.type(high - low) + ct.type(low))


@register("random.normal", "cpu")
def _normal_cpu(out: Tensor, seed: int, offset: int, mean: float, std: float) -> None:
    ct = _compute_dtype(out.dtype)
    n = philox.normal_stream(seed, offset, out.size).astype(ct)
    _write(out, n * ct.type(std) + ct.type(mean))


@register("random.bernoulli", "cpu")
def _bernoulli_cpu(out: Tensor, seed: int, offset: int, p) -> None:
    u = philox.uniform_stream(seed, offset, out.size).reshape(out.shape)
    if isinstance(p, Tensor):
        probs = p.numpy()
        probs = probs.astype(np.float64 if probs.dtype == np.float64 else np.float32, copy=False)
        hit = u.astype(probs.dtype) < np.broadcast_to(probs, out.shape)
    else:
        hit = u < np.float32(p)
    _write(out, hit)


@register("random.dropout_mask", "cpu")
def _dropout_mask_cpu(out: Tensor, seed: int, offset: int, p: float) -> None:
    _write(out, philox.uniform_stream(seed, offset, out.size) >= np.float32(p))


@register("random.dropout", "cpu")
def _dropout_cpu(out: Tensor, seed: int, offset: int, x: Tensor, p: float) -> None:
    keep = philox.uniform_stream(seed, offset, out.size) >= np.float32(p)
    ct = _compute_dtype(out.dtype)
    values = np.ascontiguousarray(x.numpy()).reshape(-1).astype(ct)
    scale = ct.type(1.0 / (1.0 - p)) if p < 1.0 else ct.type(0.0)
    _write(out, np.where(keep, values * scale, ct.type(0.0)))
