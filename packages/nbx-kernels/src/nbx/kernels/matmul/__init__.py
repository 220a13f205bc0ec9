"""matmul: the Array API's matrix product on the kernel devices.

A 1-D x1 is read as one row and a 1-D x2 as one column (the added dim is not in the result);
batch dims broadcast. Operands are read in place through their strides (kernel.py): a transposed
view costs no copy, and a broadcast batch dim is stride 0. Batch dims that merge (for both
operands and the output at once) are merged; the kernel indexes up to three, and a product whose
batch keeps more is launched once per index of the leading ones. Float dtypes only: float16,
bfloat16 and float32 accumulate in float32, float64 in float64.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod

import triton.language as tl

from nbx.core import dtypes
from nbx.core.dispatch import implementation
from nbx.core.dtypes import DType
from nbx.core.errors import NotSupportedError
from nbx.core.layout import broadcast_shapes, collapse_dims
from nbx.core.promotion import result_type
from nbx.core.tensor import Tensor

from .. import launch, plans
from ..cost import Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..elementwise.casts import COMPILED
from ..registry import implements
from ..rows import float_bits
from ..types import tl_type
from .kernel import matmul_kernel
from .tuning import block_k_that_fits, matmul_setting, stages_that_fit

SUPPORTED = ("float16", "bfloat16", "float32", "float64")
KERNEL_BATCH_DIMS = 3
INT32_MAX = 2**31 - 1


def check_dtypes(a_dtype: DType, b_dtype: DType, dtype: DType, device) -> None:
    """Refuse, by name, a product the kernel does not compute (integers, bool, float8, complex)."""
    for what, dt in (("x1", a_dtype), ("x2", b_dtype), ("the result", dtype)):
        if dt.name not in SUPPORTED:
            raise NotSupportedError(f"matmul on {device.type} does not take {dt.name} ({what}); it computes "
                                    f"products of {', '.join(SUPPORTED[:-1])} and {SUPPORTED[-1]}")


def _as_matrices(a_shape, a_strides, b_shape, b_strides):
    """Both operands as (batch..., rows, cols) shapes and strides: a 1-D x1 a row, a 1-D x2 a column."""
    if len(a_shape) == 1:
        a_shape, a_strides = (1, a_shape[0]), (0, a_strides[0])
    if len(b_shape) == 1:
        b_shape, b_strides = (b_shape[0], 1), (b_strides[0], 0)
    return a_shape, a_strides, b_shape, b_strides


def _batch_strides(shape, strides, batch) -> list[int]:
    """An operand's strides over the broadcast batch dims (0 where it is broadcast)."""
    lead = len(batch) - (len(shape) - 2)
    own = list(zip(shape[:-2], strides[:-2], strict=True))
    return [0 if i < lead or own[i - lead][0] == 1 else own[i - lead][1] for i in range(len(batch))]


def _merged_batch(batch, a_strides, b_strides, c_strides) -> list[tuple[int, int, int, int]]:
    """(size, a stride, b stride, c stride) per batch dim, collapsed (nbx.core.layout.collapse_dims)."""
    sizes, strides = collapse_dims(batch, [a_strides, b_strides, c_strides])
    return list(zip(sizes, *strides))


@dataclass(frozen=True)
class Plan:
    m: int
    n: int
    k: int
    a_strides: tuple[int, int]                        # of the (m, k) operand
    b_strides: tuple[int, int]                        # of the (k, n) operand
    kernel_batch: tuple[tuple[int, int, int, int], ...]   # three dims: (size, a, b, c strides)
    looped: tuple[tuple[int, int, int, int], ...]     # leading dims launched one index at a time
    meta: tuple                                       # the kernel's constants and launch options

    @property
    def launches(self) -> int:
        return prod(d[0] for d in self.looped)

    @property
    def grid(self) -> tuple[int]:
        meta = dict(self.meta)
        tiles = -(-self.m // meta["BLOCK_M"]) * -(-self.n // meta["BLOCK_N"])
        return (prod(d[0] for d in self.kernel_batch) * tiles,)


def _decide(a_shape, a_strides, a_dtype, b_shape, b_strides, b_dtype, dtype: DType, device, setting) -> Plan:
    a_shape, a_strides, b_shape, b_strides = _as_matrices(a_shape, a_strides, b_shape, b_strides)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    c_strides = [prod(batch[i + 1:]) * m * n for i in range(len(batch))]
    dims = _merged_batch(batch, _batch_strides(a_shape, a_strides, batch), _batch_strides(b_shape, b_strides, batch),
                         c_strides)
    split = max(0, len(dims) - KERNEL_BATCH_DIMS)
    kernel_batch = [(1, 0, 0, 0)] * (KERNEL_BATCH_DIMS - len(dims[split:])) + dims[split:]
    am, bk = tuple(a_strides[-2:]), tuple(b_strides[-2:])
    if setting is None:  # certified for the launch key (the device file's tile on interp)
        setting = matmul_setting(device, m, n, k, dtype, am, bk)
    s = dict(setting)
    facts = launch.facts(device)
    s["block_k"] = block_k_that_fits(s["block_k"], dtype.itemsize, facts)   # the dot's operands are of dtype
    stages = s["num_stages"]
    if COMPILED:  # the interpreter has no shared memory (and no pipeline)
        stages = stages_that_fit(s, a_dtype.itemsize, b_dtype.itemsize, facts)
    reach_m, reach_n, reach_k = m + s["block_m"], n + s["block_n"], s["block_k"]  # the tiles' overhang
    wide = max(reach_m * abs(am[0]) + reach_k * abs(am[1]), reach_k * abs(bk[0]) + reach_n * abs(bk[1]),
               reach_m * n + reach_n) > INT32_MAX
    # the operands meet in the result dtype (a half type is the result only of two operands of it)
    meta = dict(DOT=tl_type(dtype), ACC=tl.float64 if dtype is dtypes.float64 else tl.float32,
                IEEE=dtype in (dtypes.float32, dtypes.float64), EVEN_K=k % s["block_k"] == 0, WIDE=wide,
                BLOCK_M=s["block_m"], BLOCK_N=s["block_n"], BLOCK_K=s["block_k"], GROUP_M=s["group_m"],
                num_warps=s["num_warps"], num_stages=stages)
    return Plan(m, n, k, am, bk, tuple(kernel_batch), tuple(dims[:split]), tuple(meta.items()))


def plan(x1: Tensor, x2: Tensor, dtype: DType, setting=None) -> Plan:
    """The decisions of x1 @ x2 (result dtype): tile, batch dims, constants. setting overrides the
    served one (the certifier's)."""
    return launch_plan(x1, x2, dtype, setting).detail


def _build(x1: Tensor, x2: Tensor, dtype: DType, setting) -> LaunchPlan:
    """One launch, or one per index of the batch dims beyond the kernel's three (each reading its
    operands and writing its output from that index's offset)."""
    p = _decide(tuple(x1.shape), tuple(x1.strides), x1.dtype, tuple(x2.shape), tuple(x2.strides), x2.dtype, dtype,
                x1.device, setting)
    (_, sa0, sb0, _), (d1, sa1, sb1, _), (d2, sa2, sb2, _) = p.kernel_batch
    args = (p.m, p.n, p.k, d1, d2, sa0, sa1, sa2, *p.a_strides, sb0, sb1, sb2, *p.b_strides)
    meta = dict(p.meta)
    launches = []
    for index in itertools.product(*(range(d[0]) for d in p.looped)):
        at = [sum(i * d[j] for i, d in zip(index, p.looped, strict=True)) for j in (1, 2, 3)]
        launches.append(Launch(matmul_kernel, p.grid, (Slot("x1", offset=at[0]), Slot("x2", offset=at[1]),
                                                       Slot("out", offset=at[2]), *args), meta))
    return LaunchPlan(x1.device, tuple(launches), (plans.output("out", result_shape(x1, x2), dtype),), detail=p)


def launch_plan(x1: Tensor, x2: Tensor, dtype: DType, setting=None) -> LaunchPlan:
    """The launches of x1 @ x2, kept per layout: a call site that repeats its shapes plans once."""
    key = (x1.shape, x1.strides, x1.dtype, x2.shape, x2.strides, x2.dtype, dtype, x1.device,
           plans.setting_key(setting))
    return plans.cached("matmul", key, lambda: _build(x1, x2, dtype, setting))


def result_shape(x1: Tensor, x2: Tensor) -> tuple[int, ...]:
    a_shape, _, b_shape, _ = _as_matrices(tuple(x1.shape), tuple(x1.strides), tuple(x2.shape), tuple(x2.strides))
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return tuple(batch) + tuple(x1.shape[-2:-1] if x1.ndim > 1 else ()) + tuple(x2.shape[-1:] if x2.ndim > 1 else ())


def launch_matmul(x1: Tensor, x2: Tensor, dtype: DType | None = None, out: Tensor | None = None,
                  setting=None) -> Tensor:
    """x1 @ x2 into out (a new tensor, or a given contiguous one of the result's shape and dtype);
    setting overrides the served (certified) one: the certifier launches this very path with it."""
    device = x1.device
    dtype = result_type(x1, x2) if dtype is None else dtype
    check_dtypes(x1.dtype, x2.dtype, dtype, device)
    out = launch.output(result_shape(x1, x2), dtype, device, out)
    if out.size == 0:
        return out
    if x1.shape[-1] == 0:  # an empty sum: zeros, with no launch key formed for a product of nothing
        implementation("fill_", device)(out, 0)
        return out
    plans.execute(launch_plan(x1, x2, dtype, setting), {"x1": x1, "x2": x2, "out": out})
    return out


def matmul_cost(x1: Tensor, x2: Tensor) -> Cost:
    """The output; the operands read and the output written once; 2 m n k flops per batch entry."""
    dtype = result_type(x1, x2)
    check_dtypes(x1.dtype, x2.dtype, dtype, x1.device)
    shape = result_shape(x1, x2)
    out_bytes = prod(shape) * dtype.itemsize
    buffers = (Buffer("out", out_bytes),)
    if out_bytes == 0:
        return Cost(buffers, 0, 0, launches=0)
    if x1.shape[-1] == 0:  # zeros written by one fill
        return Cost(buffers, out_bytes, 0)
    p = plan(x1, x2, dtype)
    entries = prod(shape) // (p.m * p.n)
    return Cost(buffers, x1.nbytes + x2.nbytes + out_bytes, 2 * p.m * p.n * p.k * entries, p.launches)


def by_weight(x1: Tensor, x2: Tensor) -> bool:
    """A product of a 2-D x2 (a weight) with rows of x1: the fused kernel's (epilogue.py), whose
    certified setting splits K for decode rows; batched products take the tiled kernel."""
    return x2.ndim == 2


def paired_batch(x1: Tensor, x2: Tensor) -> bool:
    """bmm's product, two 3-D operands of one batch size entry by entry: the fused kernel's batched
    form, whose key is certified over a batch that fills the device (linear_tuning.batch_entries);
    other batches (broadcast, more dims) take the tiled kernel."""
    return x1.ndim == 3 and x2.ndim == 3 and x1.shape[0] == x2.shape[0]


@implements("matmul")
def _matmul(call) -> Tensor:
    """A checked matmul (nbx.core.ops.linalg's spec)."""
    x1, x2 = call.x1, call.x2
    if by_weight(x1, x2) or paired_batch(x1, x2):
        return epilogue.launch_linear(x1, x2.mT, dtype=call.out_dtype)
    return launch_matmul(x1, x2, call.out_dtype)


def _prepare(call):
    """The repeats of a product by a weight (x @ W.T): its plan's launcher. The plan also reads the
    operands' alignment, which the signature does not hold: a repeat whose alignment differs takes
    the full path."""
    x1, x2 = call.x1, call.x2
    if not by_weight(x1, x2) or x1.ndim < 2 or prod(call.shape) == 0:
        return None
    run = plans.prepared(epilogue.launch_plan(x1, x2.mT, dtype=call.out_dtype))
    if run is None:
        return None
    aligned, one, make = (_address_aligned(x1), _address_aligned(x2)), float_bits(1.0), Tensor._of

    def repeat(c):
        x, w = c.x1, c.x2
        if (_address_aligned(x), _address_aligned(w)) != aligned:
            return _matmul(c)
        weight = make(w._storage, w.dtype, w.shape[::-1], w._strides[::-1], w._offset)   # w.mT, unchecked
        return run({"x": x, "weight": weight, "up": None, "out": None, "alpha": one, "beta": one, "bias": None,
                    "residual": None, "norm_weight": None, "eps": 0})["out"]
    return repeat


def _address_aligned(t: Tensor) -> bool:
    return t.data_ptr() % epilogue.TMA_ALIGN == 0


_matmul.prepare = _prepare


@declares("matmul")
def _matmul_cost(call) -> Cost:
    x1, x2 = call.x1, call.x2
    return epilogue.linear_cost(x1, x2.mT) if by_weight(x1, x2) or paired_batch(x1, x2) else matmul_cost(x1, x2)

from . import epilogue, int4  # noqa: E402,F401  (linear, gated_linear; linear_int4)

__all__ = ["launch_matmul", "matmul_cost", "plan", "result_shape", "check_dtypes", "SUPPORTED"]
