"""nbx.sample's draw on Triton devices over rows x C programs (sampling/kernel.py says the passes),
the row's uniform drawn by the random family's kernel from the same Philox counters the CPU
reference reads.

tiles.sampling of the device file: `block`, the logits a program reads a step; `programs`, the
programs a launch aims for (a row gets about programs / rows chunks, as top-k's select splits it);
`candidates`, the band weights a row may copy out for the top-p bisection (a wider band is bisected
over the row instead); num_warps. Served per launch key by the `sampling` tunable (sampling/tuning.py):
a certified setting, else the device file's tile."""
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
from ..sort.select import zero_kernel
from ..sort.topk import lanes, split
from .kernel import (BAND, BINS, FINE, band_kernel, chunk_max_kernel, compact_kernel, draw_kernel, kept_kernel,
                     mass_kernel, resolve_kernel, top_k_digits_kernel)
from .tuning import SAMPLING, sampling_setting


@implements("sample")
def sample(logits: Tensor, temperature: float, k: int, p: float, floor: float, seed: int, offset: int) -> Tensor:
    rows = logits.shape[0]
    uniforms = empty((rows,), dtypes.float32, logits.device)
    implementation("random.rand", logits.device)(uniforms, seed, offset)
    return launch_sample(logits, uniforms, temperature, k, p, floor)


def launch_sample(logits: Tensor, uniforms: Tensor, temperature: float, k: int, p: float, floor: float,
                  setting=None, tokens: Tensor | None = None) -> Tensor:
    """The step's launches over logits [rows, vocab] with the rows' uniforms; `setting` (the
    certifier's) overrides the served tile, `tokens` (int64 [rows]) receives the draw."""
    rows, vocab = logits.shape
    x = logits.contiguous()
    plan = _cached_plan(rows, vocab, x.dtype, k < vocab, p < 1.0, floor > 0.0, logits.device, setting)
    # the scalars as the float32 values the reference uses (the interpreter would keep doubles)
    return plans.execute(plan, {"x": x, "u": uniforms, "inv_t": _f32(1.0 / temperature), "k": k, "p": _f32(p),
                                "floor": floor_weight(floor), "tokens": tokens})["tokens"]


def _f32(value: float) -> float:
    return float(np.float32(value))


def _cached_plan(rows: int, vocab: int, dtype, top_k: bool, top_p: bool, min_p: bool, device,
                 setting=None) -> LaunchPlan:
    """sample_plan through the one plan cache (the launch and its cost share it)."""
    signature = (rows, vocab, dtype, top_k, top_p, min_p, device)
    return plans.cached("sample", signature + (plans.setting_key(setting),),
                        lambda: sample_plan(*signature, setting=setting))


def sample_plan(rows: int, vocab: int, dtype, top_k: bool, top_p: bool, min_p: bool, device,
                setting=None) -> LaunchPlan:
    # the served tile of the key (certified, a neighbour's, or the device file's); no rows launch nothing
    tiles = setting or (sampling_setting(device, rows, vocab, dtype) if rows else launch.tiles("sampling", device))
    block, cap = tiles["block"], lanes(tiles["candidates"])  # the sort of the copies takes a power of two
    chunks, chunk = split(rows, vocab, block, tiles["programs"])
    grid, C = (rows, chunks), chunks
    meta = dict(BLOCK=block, num_warps=tiles["num_warps"], enable_fp_fusion=False)
    small = min(lanes(block), 256, cap)  # most bands: a short sort
    wide = dict(meta, CB=lanes(chunks))
    x, inv_t = Slot("x"), Slot("inv_t")
    # a kernel told TOP_K / TOP_P False never reads its select-histogram / cut pointer: maxes stands in
    sel = Slot("sel") if top_k else Slot("maxes")
    cut = Slot("cut") if top_p else Slot("maxes")
    flags = dict(TOP_K=top_k, TOP_P=top_p, MIN_P=min_p)
    workspace = [plans.workspace("maxes", (rows * C,), dtypes.float32),
                 plans.workspace("kept", (rows * C,), dtypes.int64),
                 plans.workspace("last", (rows * C,), dtypes.int64)]
    launches = [Launch(chunk_max_kernel, grid, (x, Slot("maxes"), vocab, inv_t, chunk), meta)]
    if top_k:
        hist_words = rows * 4 * 256
        workspace.append(plans.workspace("sel", (hist_words,), dtypes.int32))
        launches.append(Launch(zero_kernel, (-(-hist_words // 1024),), (Slot("sel"), hist_words),
                               dict(BLOCK=1024, num_warps=4)))
        launches += [Launch(top_k_digits_kernel, grid, (x, Slot("sel"), vocab, Slot("k"), chunk),
                            dict(meta, PASS=j)) for j in range(4)]
    if top_p:
        workspace += [plans.workspace("totals", (rows * C,), dtypes.int64),
                      plans.workspace("hist", (rows * C * BINS.value,), dtypes.int32),
                      plans.workspace("band", (rows * BAND.value,), dtypes.int64),
                      plans.workspace("count", (rows,), dtypes.int32),
                      plans.workspace("above", (rows * C,), dtypes.int64),
                      plans.workspace("candidates", (rows * cap,), dtypes.int64),
                      plans.workspace("fine", (rows * C * FINE.value,), dtypes.int32),
                      plans.workspace("cut", (rows,), dtypes.int64)]
        launches += [
            Launch(mass_kernel, grid, (x, Slot("maxes"), sel, Slot("totals"), Slot("hist"), vocab, inv_t, Slot("k"),
                                       chunk), dict(wide, TOP_K=top_k)),
            Launch(band_kernel, (rows,), (Slot("totals"), Slot("hist"), Slot("band"), Slot("count"), Slot("p"), C),
                   dict(CB=lanes(chunks), num_warps=4)),
            Launch(compact_kernel, grid, (x, Slot("maxes"), sel, Slot("band"), Slot("count"), Slot("above"),
                                          Slot("candidates"), Slot("fine"), vocab, inv_t, Slot("k"), chunk, cap),
                   dict(wide, TOP_K=top_k)),
            Launch(resolve_kernel, (rows,), (x, Slot("maxes"), sel, Slot("totals"), Slot("band"), Slot("count"),
                                             Slot("above"), Slot("candidates"), Slot("fine"), Slot("cut"), vocab,
                                             inv_t, Slot("k"), Slot("p"), C),
                   dict(wide, TOP_K=top_k, SMALL=small, CAP=cap))]
    launches += [
        Launch(kept_kernel, grid, (x, Slot("maxes"), sel, cut, Slot("kept"), Slot("last"), vocab, inv_t, Slot("k"),
                                   Slot("floor"), chunk), dict(wide, **flags)),
        Launch(draw_kernel, (rows,), (x, Slot("maxes"), sel, cut, Slot("kept"), Slot("last"), Slot("u"),
                                      Slot("tokens"), vocab, inv_t, Slot("k"), Slot("floor"), chunk, C),
               dict(wide, **flags))]
    return LaunchPlan(device, tuple(launches) if rows else (), outputs=(plans.output("tokens", (rows,), dtypes.INDEX),),
                      workspace=tuple(workspace) if rows else ())


@declares("sample")
def _sample_cost(logits: Tensor, temperature=1.0, k=None, p=1.0, floor=0.0, seed=0, offset=0) -> Cost:
    """The plan's buffers and launches (and the uniforms' draw); the passes over the logits."""
    vocab = logits.shape[-1]
    rows = logits.size // max(vocab, 1)
    top_k, top_p = k is not None and k < vocab, p < 1.0
    plan = _cached_plan(rows, vocab, logits.dtype, top_k, top_p, floor > 0.0, logits.device)
    passes = 2 + (4 if top_k else 0) + (2 if top_p else 0)  # max, kept; select's 4; mass, compact (the draw: one chunk)
    return Cost(buffers=plan.buffers() + (Buffer("uniforms", rows * 4, LAUNCH),),
                bytes_moved=passes * logits.nbytes + rows * 12, launches=len(plan.launches) + 1,
                notes=(f"{passes} passes over each row, split over programs (the later ones L2-resident); "
                       "top-p's threshold is found among the copied weights of the band that holds it (a band "
                       "past the cap: one more sweep of the row, by one program, copies its fine steps that hold it)",))


__all__ = ["SAMPLING", "sample", "launch_sample", "sample_plan"]
