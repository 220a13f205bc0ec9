"""Random kernels: nbx.core.random's draws on the device, on the same Philox stream as the host.

nbx.core.random's front-ends validate, take the counters from the generator and call
"random.<op>"(out, seed, offset, *args) with a fresh contiguous `out`; these wrappers fill it with
one launch of kernel.random_kernel.

What is promised (same seed and offset -> same bits on cpu, interp and a GPU):
- rand, randint, uniform, bernoulli, dropout_mask and dropout: bit for bit everywhere. Launches
  keep multiplies and adds apart (enable_fp_fusion=False), as the host rounds them.
- randn and normal: bit for bit on interp (numpy's log/cos/sin, as the host). On a GPU, log, cos and
  sin are libdevice's: the words and the uniforms are exact, the normals differ in their last bits.
  Measured on the H200 with the cosine branch alone (the stream before normals took both branches;
  Triton 3.6, 16M draws): randn float32 82.6% bit-equal, at most 5 ulp apart (7.2e-7); normal(2, 3)
  at most 1.9e-6 apart. The tests hold randn to 8 ulp (NORMAL_ULPS in test_random_kernels_draws.py);
  tools/bench/bench_random.py prints the figures of the sine branch too.
- float8 outputs of rand, randn, uniform, normal and dropout are drawn on the host and uploaded:
  the GPU's float8 conversion saturates where the host's gives NaN/inf, so only the host keeps the
  bits. bernoulli and dropout_mask (values 0 and 1) take every real dtype in the kernel.

Speed: one Philox4x32-10 (ten rounds of two 32x32-bit multiplies) serves four elements (randint:
two), as torch's generator spends a counter. With one counter per element, as the stream was
first defined, the kernels were bound by those multiplies: on the H200, rand float32 of 256 MiB took
0.267 ms (1.0 TB/s), 0.44x torch.rand, and rand/randn/dropout ran at 0.40-0.67x torch. A program
takes tiles.elementwise.block words (block // 4 counters) and writes them with vector stores
(kernel.py). This layout on the H200 (2026-11-29, 256 MiB, tools/bench/bench_random.py): rand
float32 0.86x torch, randn float32 0.68x, dropout float32 1.00x, rand bfloat16 1.08x, randn
bfloat16 0.79x, dropout bfloat16 0.85x; the tile barely matters (2.08-2.19 TB/s for rand float32
over blocks 512-8192 and 4 or 8 warps): the Philox rounds and, for randn, log/cos/sin bind.
"""
from __future__ import annotations

from math import prod

import numpy as np
import triton
import triton.language as tl

from nbx.core import dtypes, layout as core_layout
from nbx.core.device import CPU, get_backend
from nbx.core.dispatch import implementation
from nbx.core.dtypes import DType
from nbx.core.errors import NotSupportedError
from nbx.core.random.philox import WORDS_PER_COUNTER
from nbx.core.tensor import Tensor, empty

from .. import launch, plans
from ..cost import Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..elementwise import layout
from ..registry import implements
from ..types import tl_type
from . import kernel as k

TILES = "elementwise"  # a random launch is one element per lane like an elementwise one
INT32_LIMIT = 2**31 - 1
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")


# ---- arguments ---------------------------------------------------------------------------------
def _words(value: int) -> tuple[int, int]:
    """A 64-bit value as (low, high) 32-bit words, each passed as int32 (see kernel.py)."""
    def signed(word: int) -> int:
        return word - (1 << 32) if word >= 1 << 31 else word
    value %= 1 << 64
    return signed(value & 0xFFFFFFFF), signed(value >> 32)


def _float_words(value: float, compute) -> tuple[int, int]:
    """A float parameter rounded once to the compute dtype, as the words of its bits."""
    if compute == tl.float64:
        return _words(int(np.float64(value).view(np.uint64)))
    return _words(int(np.float32(value).view(np.uint32)))


def _compute(dtype: DType):
    """The Triton type a draw's arithmetic runs in (nbx.core.dtypes.statistics_dtype, as the host)."""
    return tl_type(dtypes.statistics_dtype(dtype))


def _below_one(dtype: DType) -> float:
    """The largest value below 1.0 of a dtype narrower than float32 (0.0: no hold needed)."""
    if dtype.itemsize >= 4:
        return 0.0
    return float(np.nextafter(np.ones((), dtype.host), np.zeros((), dtype.host)))


def _operand_layout(x: Tensor, shape):
    """x read as `shape` (broadcast), its dims merged where both x and the output walk them as one:
    (sizes, x's strides), fewest dims first-to-last."""
    strides = core_layout.broadcast_strides(x.shape, x.strides, shape)
    sizes, (_, x_strides) = layout.collapse(shape, [core_layout.contiguous_strides(shape), strides])
    return sizes, x_strides


def _split_launches(x: Tensor, shape) -> int:
    """How many launches read x as `shape`: one, or one per index of the dims beyond the kernel's four."""
    sizes, _ = _operand_layout(x, shape)
    return prod(sizes[:-layout.MAX_RANK]) if len(sizes) > layout.MAX_RANK else 1


def _needs_wide_index(n: int, block: int, sizes, strides) -> bool:
    """Whether an index or an operand offset of the launch can pass 2**31 - 1."""
    extent = core_layout.reach(sizes, strides)
    return max(n, extent) + block > INT32_LIMIT


# ---- the launch --------------------------------------------------------------------------------
def _counters_per_program(device) -> tuple[int, dict]:
    """A program spends tiles.elementwise.block words of the stream: block // 4 Philox counters."""
    settings = launch.tiles(TILES, device)
    block = settings["block"]
    if block < WORDS_PER_COUNTER or block & (block - 1):
        raise NotSupportedError(f"the random kernel needs tiles.{TILES}.block to be a power of two >= "
                                f"{WORDS_PER_COUNTER} (four words a counter), the device file gives {block}")
    return block // WORDS_PER_COUNTER, settings


_SPLIT = "split"   # the detail of a plan whose operand keeps more dims than the kernel's four
_WORDS = tuple(Slot(n) for n in ("seed_lo", "seed_hi", "off_lo", "off_hi", "a_lo", "a_hi", "b_lo", "b_hi"))


def _random_plan(out: Tensor, draw: int, compute, x: Tensor | None, full_range: bool, phase: int) -> LaunchPlan:
    n = out.size
    if x is None:
        sizes, x_strides, x_slot = (1, 1, 1, 1), (0, 0, 0, 0), Slot("out")
    else:
        sizes, x_strides = _operand_layout(x, out.shape)
        if len(sizes) > layout.MAX_RANK:
            return LaunchPlan(out.device, (), detail=_SPLIT)
        lead = layout.MAX_RANK - len(sizes)
        sizes, x_strides, x_slot = (1,) * lead + sizes, (0,) * lead + x_strides, Slot("x")
    counters, settings = _counters_per_program(out.device)
    words = phase + n * (2 if draw == k.RANDINT else 1)  # randint: 64 bits an element (nbx.core.random.ops)
    grid = (triton.cdiv(triton.cdiv(words, WORDS_PER_COUNTER), counters),)
    return LaunchPlan(out.device, (Launch(k.random_kernel, grid, (
        Slot("out"), n, *_WORDS, x_slot, *sizes[1:], *x_strides), dict(
        DRAW=draw, COMPUTE=compute, BELOW_ONE=_below_one(out.dtype) if draw == k.RAND else 0.0,
        FULL_RANGE=full_range, X_DENSE=layout.is_dense(sizes, x_strides),
        WIDE=_needs_wide_index(n + phase, settings["block"], sizes, x_strides), PHASE=phase, BLOCK=counters,
        num_warps=settings["num_warps"], enable_fp_fusion=False)),))


def _launch(out: Tensor, seed: int, offset: int, draw: int, *, compute=tl.float32, a=(0, 0), b=(0, 0),
            x: Tensor | None = None, full_range: bool = False, phase: int = 0) -> None:
    """Fill the contiguous out with one launch; an operand whose layout keeps more than four dims
    after merging is read in place by one launch per index of its leading dims (no dense copy).
    phase: how many words of counter `offset` the draw has already spent (split launches only)."""
    if out.size == 0:
        return
    key = (draw, out.shape, out.dtype, out.device, compute, None if x is None else (x.shape, x.strides, x.dtype),
           full_range, phase)
    lp = plans.cached("random", key, lambda: _random_plan(out, draw, compute, x, full_range, phase))
    if lp.detail == _SPLIT:
        sizes, x_strides = _operand_layout(x, out.shape)
        return _launch_split(out, seed, offset, draw, sizes, x_strides, x, compute=compute, a=a, b=b)
    words = (*_words(seed), *_words(offset), *a, *b)
    plans.execute(lp, {"out": out, "x": x, **{slot.name: w for slot, w in zip(_WORDS, words)}})


def _launch_split(out, seed, offset, draw, sizes, x_strides, x, **kw) -> None:
    """One launch per index of the dims beyond four. Element e = j * inner of out is word e of the
    draw (only one-word draws take an operand): lane e % 4 of counter offset + e // 4."""
    lead, inner = sizes[:-layout.MAX_RANK], sizes[-layout.MAX_RANK:]
    inner_n = prod(inner)
    for j, index in enumerate(np.ndindex(*lead)):
        at = x.storage_offset + sum(i * st for i, st in zip(index, x_strides))
        part_x = Tensor(x.storage, x.dtype, inner, x_strides[len(lead):], at)
        part_out = Tensor(out.storage, out.dtype, inner, core_layout.contiguous_strides(inner),
                          out.storage_offset + j * inner_n)
        counter, phase = divmod(j * inner_n, WORDS_PER_COUNTER)
        _launch(part_out, seed, (offset + counter) % (1 << 64), draw, x=part_x, phase=phase, **kw)


def _on_host(op: str, out: Tensor, seed: int, offset: int, *args) -> None:
    """Draw with the host's implementation and upload into out (float8 outputs, see above)."""
    host = empty(out.shape, out.dtype, CPU)
    implementation(f"random.{op}", CPU)(host, seed, offset, *(a.to(CPU) if isinstance(a, Tensor) else a
                                                              for a in args))
    get_backend(out.device.type).upload(out.storage, out.storage_offset * out.dtype.itemsize, host._host_view())


# ---- implementations -----------------------------------------------------------------------------
@implements("random.rand")
def _rand(out: Tensor, seed: int, offset: int) -> None:
    if out.dtype.name in _FLOAT8:
        return _on_host("rand", out, seed, offset)
    _launch(out, seed, offset, k.RAND)


@implements("random.randn")
def _randn(out: Tensor, seed: int, offset: int) -> None:
    if out.dtype.name in _FLOAT8:
        return _on_host("randn", out, seed, offset)
    _launch(out, seed, offset, k.RANDN)


@implements("random.randint")
def _randint(out: Tensor, seed: int, offset: int, low: int, high: int) -> None:
    span = high - low
    _launch(out, seed, offset, k.RANDINT, a=_words(span), b=_words(low), full_range=span == 1 << 64)


@implements("random.uniform")
def _uniform(out: Tensor, seed: int, offset: int, low: float, high: float) -> None:
    if out.dtype.name in _FLOAT8:
        return _on_host("uniform", out, seed, offset, low, high)
    ct = _compute(out.dtype)
    _launch(out, seed, offset, k.UNIFORM, compute=ct, a=_float_words(high - low, ct), b=_float_words(low, ct))


@implements("random.normal")
def _normal(out: Tensor, seed: int, offset: int, mean: float, std: float) -> None:
    if out.dtype.name in _FLOAT8:
        return _on_host("normal", out, seed, offset, mean, std)
    ct = _compute(out.dtype)
    _launch(out, seed, offset, k.NORMAL, compute=ct, a=_float_words(std, ct), b=_float_words(mean, ct))


@implements("random.bernoulli")
def _bernoulli(out: Tensor, seed: int, offset: int, p) -> None:
    if isinstance(p, Tensor):  # compared in float64 when p is float64, else in float32
        _launch(out, seed, offset, k.BERNOULLI_TENSOR, compute=_compute(p.dtype), x=p)
    else:
        _launch(out, seed, offset, k.BERNOULLI, a=_float_words(p, tl.float32))


@implements("random.dropout_mask")
def _dropout_mask(out: Tensor, seed: int, offset: int, p: float) -> None:
    _launch(out, seed, offset, k.DROPOUT_MASK, a=_float_words(p, tl.float32))


@implements("random.dropout")
def _dropout(out: Tensor, seed: int, offset: int, x: Tensor, p: float) -> None:
    if out.dtype.name in _FLOAT8:
        return _on_host("dropout", out, seed, offset, x, p)
    ct = _compute(out.dtype)
    scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    _launch(out, seed, offset, k.DROPOUT, compute=ct, a=_float_words(p, tl.float32), b=_float_words(scale, ct), x=x)


# ---- declared costs: priced with the front-end's arguments (nbx.core.random.<op>) ----------------
# flops counts the floating-point work per element; each counter also runs Philox4x32-10 (ten rounds
# of two 32x32-bit multiplies), noted rather than counted.
_PHILOX_NOTE = "integer work: one Philox4x32-10 (20 32-bit multiplies) per four elements (randint: per two)"
_HOST_FLOAT8 = ("rand", "randn", "uniform", "normal", "dropout")
_FLOPS = {"rand": 1, "randn": 7, "randint": 0, "uniform": 3, "normal": 9, "bernoulli": 2,
          "dropout_mask": 2, "dropout": 3}


def _draw_cost(op: str, shape, dtype: DType, operand: Tensor | None = None) -> Cost:
    n = prod(shape)
    written = n * dtype.itemsize
    read, launches, notes = 0, 1, [_PHILOX_NOTE]
    if operand is not None:
        read = operand.nbytes
        launches = _split_launches(operand, shape) if n else 1
        if launches > 1:
            notes.append(f"the operand's layout keeps more than {layout.MAX_RANK} dims: {launches} launches")
    if dtype.name in _FLOAT8 and op in _HOST_FLOAT8:
        notes.append(f"{dtype.name} output drawn on the host and uploaded")
    return Cost(buffers=(Buffer("out", written),), bytes_moved=read + written, flops=n * _FLOPS[op],
                launches=launches, notes=tuple(notes))


def _shape(args) -> tuple[int, ...]:
    """The shape as the front-end reads it: f(2, 3), f((2, 3)) or f(shape=...)."""
    return core_layout.as_shape(core_layout.shape_args(args))


def _dtype(dtype, default: DType) -> DType:
    return default if dtype is None else dtypes.as_dtype(dtype)


@declares("random.rand")
def _rand_cost(*shape, dtype=None, **_) -> Cost:
    return _draw_cost("rand", _shape(shape), _dtype(dtype, dtypes.DEFAULT_FLOAT))


@declares("random.randn")
def _randn_cost(*shape, dtype=None, **_) -> Cost:
    return _draw_cost("randn", _shape(shape), _dtype(dtype, dtypes.DEFAULT_FLOAT))


@declares("random.randint")
def _randint_cost(low, high, shape, *, dtype=None, **_) -> Cost:
    return _draw_cost("randint", _shape((shape,)), _dtype(dtype, dtypes.DEFAULT_INT))


@declares("random.uniform")
def _uniform_cost(low, high, shape, *, dtype=None, **_) -> Cost:
    return _draw_cost("uniform", _shape((shape,)), _dtype(dtype, dtypes.DEFAULT_FLOAT))


@declares("random.normal")
def _normal_cost(mean, std, shape, *, dtype=None, **_) -> Cost:
    return _draw_cost("normal", _shape((shape,)), _dtype(dtype, dtypes.DEFAULT_FLOAT))


@declares("random.dropout_mask")
def _dropout_mask_cost(shape, p, *, dtype=None, **_) -> Cost:
    return _draw_cost("dropout_mask", _shape((shape,)), _dtype(dtype, dtypes.bool_))


@declares("random.bernoulli")
def _bernoulli_cost(p, shape=None, *, dtype=None, **_) -> Cost:
    dt = _dtype(dtype, dtypes.DEFAULT_FLOAT)
    if not isinstance(p, Tensor):
        return _draw_cost("bernoulli", _shape((shape,)), dt)
    return _draw_cost("bernoulli", p.shape if shape is None else _shape((shape,)), dt, operand=p)


@declares("random.dropout")
def _dropout_cost(x: Tensor, p: float, **_) -> Cost:
    return _draw_cost("dropout", x.shape, x.dtype, operand=x)


__all__ = ["TILES"]
