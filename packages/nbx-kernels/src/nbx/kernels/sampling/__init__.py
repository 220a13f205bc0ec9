"""nbx.sample's draw on Triton devices: one program a row (sampling/kernel.py), the row's uniform
drawn by the random family's kernel from the same Philox counters the CPU reference reads."""
from __future__ import annotations

import numpy as np

from nbx.core import dtypes
from nbx.core.dispatch import implementation
from nbx.core.ops.sampling import floor_weight
from nbx.core.tensor import Tensor, empty

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
from .kernel import sample_kernel


@implements("sample")
def sample(logits: Tensor, temperature: float, k: int, p: float, floor: float, seed: int, offset: int) -> Tensor:
    rows, vocab = logits.shape
    x = logits.contiguous()
    uniforms = empty((rows,), dtypes.float32, logits.device)
    implementation("random.rand", logits.device)(uniforms, seed, offset)
    signature = (rows, vocab, x.dtype, k < vocab, p < 1.0, floor > 0.0, logits.device)
    plan = plans.cached("sample", signature, lambda: _sample_plan(*signature))
    # the scalars as the float32 values the reference uses (the interpreter would keep doubles)
    return plans.execute(plan, {"x": x, "u": uniforms, "inv_t": _f32(1.0 / temperature), "k": k, "p": _f32(p),
                                "floor": floor_weight(floor)})["tokens"]


def _f32(value: float) -> float:
    return float(np.float32(value))


def _sample_plan(rows: int, vocab: int, dtype, top_k: bool, top_p: bool, min_p: bool, device) -> LaunchPlan:
    tiles = launch.tiles("sampling", device)
    launches = () if not rows else (Launch(
        sample_kernel, (rows,), (Slot("x"), Slot("u"), Slot("tokens"), vocab, Slot("inv_t"), Slot("k"), Slot("p"),
                                 Slot("floor")),
        dict(TOP_K=top_k, TOP_P=top_p, MIN_P=min_p, BLOCK=tiles["block"], num_warps=tiles["num_warps"],
             enable_fp_fusion=False)),)
    return LaunchPlan(device, launches, outputs=(plans.output("tokens", (rows,), dtypes.INDEX),))


@declares("sample")
def _sample_cost(logits: Tensor, temperature=1.0, k=None, p=1.0, floor=0.0, seed=0, offset=0) -> Cost:
    vocab = logits.shape[-1]
    passes = 3 + (32 if k is not None and k < vocab else 0) + (42 if p < 1.0 else 0)
    rows = logits.size // max(vocab, 1)
    return Cost(buffers=(Buffer("tokens", rows * 8), Buffer("uniforms", rows * 4, LAUNCH)),
                bytes_moved=passes * logits.nbytes + rows * 12, launches=2,
                notes=(f"{passes} passes over each row (L2-resident): max, top-k and top-p bisections, sums, the draw",))


__all__ = ["sample"]
