"""nbx.sample's draw on Triton devices: each row split over programs (sampling/kernel.py), the
row's uniform drawn by the random family's kernel from the same Philox counters the CPU reference
reads. Launches: the tables zeroed, the partial maxima, top-k's 4 digit histograms, top-p's 11
mass histograms, the kept masses, the draw (at most 19, whatever the vocabulary)."""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core import dtypes
from nbx.core.dispatch import implementation
from nbx.core.ops.sampling import floor_weight
from nbx.core.tensor import Tensor, empty

from .. import launch, plans
from ..cost import LAUNCH, Buffer, Cost, declares
from ..plans import Launch, LaunchPlan, Slot
from ..registry import implements
import triton

from ..rows import pow2_at_least
from ..sort.select import select_histogram_kernel, zero_kernel
from ..sort.topk import lanes, split
from .kernel import MASS_DIGITS, draw_kernel, kept_mass_kernel, mass_histogram_kernel, partial_max_kernel


@implements("sample")
def sample(logits: Tensor, temperature: float, k: int, p: float, floor: float, seed: int, offset: int, *,
           setting=None, out: Tensor | None = None) -> Tensor:
    """setting overrides the served one (the certifier's); out is the tokens' output (its workload's)."""
    rows, vocab = logits.shape
    x = logits.contiguous()
    uniforms = empty((rows,), dtypes.float32, logits.device)
    implementation("random.rand", logits.device)(uniforms, seed, offset)
    signature = (rows, vocab, x.dtype, k < vocab, p < 1.0, floor > 0.0, logits.device, plans.setting_key(setting))
    def build():  # the served setting looked up once a plan
        served = setting if setting is not None else autotune.setting(
            SAMPLING, logits.device, width=pow2_at_least(vocab), elements=rows * vocab, dtype=x.dtype)
        return _sample_plan(*signature[:7], served)

    plan = plans.cached("sample", signature, build)
    # the scalars as the float32 values the reference uses (the interpreter would keep doubles)
    values = {"x": x, "u": uniforms, "inv_t": _f32(1.0 / temperature), "k": k, "p": _f32(p),
              "floor": floor_weight(floor), "tokens": out}
    return plans.execute(plan, values)["tokens"]


def _f32(value: float) -> float:
    return float(np.float32(value))


def _sample_plan(rows: int, vocab: int, dtype, top_k: bool, top_p: bool, min_p: bool, device, setting) -> LaunchPlan:
    tiles = {**launch.tiles("sampling", device), **dict(setting)}
    block, warps = tiles["block"], tiles["num_warps"]
    per_row, chunk = split(rows, vocab, block, tiles["programs"])
    if not rows:
        return LaunchPlan(device, (), outputs=(plans.output("tokens", (rows,), dtypes.INDEX),))
    grid = (rows, per_row)
    pb = lanes(per_row)
    state = (Slot("x"), Slot("max"), Slot("hist"), Slot("hist", offset=rows * 4 * 256))  # masses after the counts
    scalars = (vocab, Slot("inv_t"), Slot("k"), Slot("p"))
    common = dict(BLOCK=block, num_warps=warps, enable_fp_fusion=False)
    flags = dict(TOP_K=top_k, TOP_P=top_p, MIN_P=min_p, PB=pb)
    table = rows * (4 * 256 + 11 * 16)
    launches = [Launch(zero_kernel, (triton.cdiv(table, 1024),), (Slot("hist"), table), dict(BLOCK=1024, num_warps=4)),
                Launch(partial_max_kernel, grid, (Slot("x"), Slot("max"), vocab, Slot("inv_t"), chunk), common)]
    if top_k:  # the k-th largest logit: the radix select's digit histograms over x
        launches += [Launch(select_histogram_kernel, grid, (Slot("x"), Slot("hist"), vocab, Slot("k"), chunk),
                            dict(LARGEST=True, PASS=j, BLOCK=block, num_warps=warps)) for j in range(4)]
    if top_p:
        launches += [Launch(mass_histogram_kernel, grid, state + scalars + (chunk,),
                            {**common, "TOP_K": top_k, "PASS": j, "PB": pb}) for j in range(MASS_DIGITS.value)]
    launches += [
        Launch(kept_mass_kernel, grid, state + (Slot("kept"),) + scalars + (Slot("floor"), chunk), {**common, **flags}),
        Launch(draw_kernel, grid, state[:1] + (Slot("u"),) + state[1:] + (Slot("kept"), Slot("tokens")) + scalars
               + (Slot("floor"), chunk), {**common, **flags})]
    return LaunchPlan(device, tuple(launches), outputs=(plans.output("tokens", (rows,), dtypes.INDEX),),
                      workspace=(plans.workspace("hist", (table,), dtypes.int64),
                                 plans.workspace("max", (rows * per_row,), dtypes.float32),
                                 plans.workspace("kept", (rows * per_row * 2,), dtypes.int64)))


@declares("sample")
def _sample_cost(logits: Tensor, temperature=1.0, k=None, p=1.0, floor=0.0, seed=0, offset=0) -> Cost:
    vocab = logits.shape[-1]
    top_k, top_p = k is not None and k < vocab, p < 1.0
    rows = logits.size // max(vocab, 1)
    passes = 3 + 4 * top_k + 11 * top_p  # past top-p's first, its passes skip most blocks after one exp each
    return Cost(buffers=(Buffer("tokens", rows * 8), Buffer("uniforms", rows * 4, LAUNCH),
                         Buffer("tables", rows * (4 * 256 + 11 * 16 + 3 * 1024) * 8, LAUNCH)),
                bytes_moved=passes * logits.nbytes + rows * 12, launches=5 + 4 * top_k + 11 * top_p,
                notes=(f"{passes} passes over each row (L2-resident): the max, top-k's 4 digit histograms, top-p's 11 "
                       "mass histograms, the kept masses, the draw; the uniforms' launch",))


def sampling_workload(rep, device):
    """A top-p step (T = 0.7, p = 0.9) over the key's rows of logits; the tokens are exact."""
    from nbx.core.ops.creation import asarray
    from nbx.core.reference import oracle
    vocab = rep["width"]
    rows = max(1, rep["elements"] // vocab)
    logits = asarray((np.sin(0.37 * np.arange(rows * vocab)).reshape(rows, vocab) * 6.0).astype(rep["dtype"].host),
                     device=device)
    out = launch.output((rows,), dtypes.INDEX, device)
    args = (0.7, vocab, 0.9, 0.0, 7, 0)
    reference = oracle("sample", logits, *args)
    return autotune.TensorWorkload(out, lambda s: sample(logits, *args, setting=s, out=out),
                                   lambda r: np.asarray(reference)[r])


SAMPLING = autotune.declare(autotune.Tunable(
    "sampling", params={"block": (512, 1024, 2048), "num_warps": (4, 8), "programs": (264, 1056, 2112)},
    key={"width": "exact", "elements": "elements", "dtype": "dtype"}, default_from="tiles.sampling",
    workload=sampling_workload))

__all__ = ["sample", "SAMPLING"]
