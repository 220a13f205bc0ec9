"""Certified settings of the routing and alignment kernels (kernel.py: route_kernel, and
align_count_kernel with align_place_kernel, which share one setting).

Two tunables, each screened on its integer table, compared exactly (the device file's screen
tolerance for int32 is 0): `moe_route` (block_tokens tokens a program, num_warps) on the experts
each token chose, and `moe_align` (block pairs a step, num_warps) on the pairs sorted by expert.
Their keys: moe_route the tokens (the power of two at or above the count, as the expert GEMMs key
them), the experts, top_k, the logits' dtype and the routing (route_label: the scoring, the groups
kept and how they are scored, a correction bias: each compiles another kernel); moe_align the pairs
(tokens x top_k, to the power of two at or above) and the experts. The alignment's screen compares
all four of its tables in one output. The band (BAND_TOKENS tokens or fewer) routes and aligns in
one program of route_align_kernel, whose warps follow from its sizes: it takes neither setting.
"""
from __future__ import annotations

import numpy as np

from nbx import autotune
from nbx.core.dtypes import as_dtype
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from ..rows import pow2_at_least

ROUTE_PARAMS = {"block_tokens": (1, 2, 4, 8, 16, 32), "num_warps": (1, 2, 4, 8)}
ROUTE_KEY = {"tokens": "exact", "experts": "exact", "top_k": "exact", "dtype": "dtype", "routing": "label"}
ALIGN_PARAMS = {"block": (256, 512, 1024, 2048, 4096), "num_warps": (1, 2, 4, 8)}
ALIGN_KEY = {"pairs": "exact", "experts": "exact"}
# a routing program's logits a thread: 16 at most (sm_90's ptxas spilled the band's 32 a thread at 4 warps)
ROUTE_ELEMENTS_A_THREAD = 16
ALIGN_PAIRS_A_THREAD = 32
ALIGN_WORKLOAD_BLOCK_M = 64   # the workload's row block: the alignment's tiles walk pairs, not rows


def route_fits(setting, rep, facts):
    """Each thread holds 1 to ROUTE_ELEMENTS_A_THREAD of a program's [block_tokens, experts] logits
    (within the device file's max_elements, which the launch would otherwise cut block_tokens to),
    and a program takes no more tokens than the key has. Idle threads are refused only above the
    fewest warps: a key smaller than one warp (one token of 8 experts) is run by one warp."""
    elements = setting["block_tokens"] * pow2_at_least(rep["experts"])
    if elements > facts.value("tiles.moe_route")["max_elements"]:
        return f"{elements} logits a program pass tiles.moe_route's max_elements"
    if setting["block_tokens"] > rep["tokens"]:
        return f"block_tokens {setting['block_tokens']} pads the key's {rep['tokens']} tokens"
    threads = _threads(setting, facts)
    if threads and elements < threads and setting["num_warps"] > min(ROUTE_PARAMS["num_warps"]):
        return f"{threads} threads over {elements} logits: idle threads"
    if threads and elements > ROUTE_ELEMENTS_A_THREAD * threads:
        return f"{elements // threads} logits a thread (above {ROUTE_ELEMENTS_A_THREAD}: registers spill)"
    return True


def _threads(setting, facts) -> int:
    """A program's threads, or 0 where the device file states no warp size (the interpreter's)."""
    return setting["num_warps"] * facts.value("compute.warp_size") if "compute.warp_size" in facts else 0


def align_fits(setting, rep, facts):
    """Each thread takes 1 to ALIGN_PAIRS_A_THREAD pairs of a step, and a step does not pass the
    key's pairs twice over."""
    if setting["block"] > min(ALIGN_PARAMS["block"]) and setting["block"] // 2 > rep["pairs"]:
        return f"a step of {setting['block']} pairs covers the key's {rep['pairs']} twice over"
    threads = _threads(setting, facts)
    if threads and setting["block"] < threads:
        return f"{threads} threads over a step of {setting['block']} pairs: idle threads"
    if threads and setting["block"] > ALIGN_PAIRS_A_THREAD * threads:
        return f"{setting['block'] // threads} pairs a thread (above {ALIGN_PAIRS_A_THREAD})"
    return True


def route_label(scoring: str, groups: int, kept: int, group_score: str, has_bias: bool) -> str:
    """The routing key's label: "softmax", "sigmoid", with "-g<groups>k<kept>-<group_score>" for
    grouped top-k and "-bias" for a correction bias (DeepSeek-V3: "sigmoid-g8k4-top2-bias")."""
    grouped = f"-g{groups}k{kept}-{group_score}" if groups > 1 else ""
    return f"{scoring}{grouped}{'-bias' if has_bias else ''}"


def _routing_of(label: str) -> dict:
    """route_label's fields back: moe_route's scoring, groups, kept, group_score and whether a bias."""
    scoring, *parts = label.split("-")
    out = dict(scoring=scoring, groups=1, kept=1, group_score="max", bias=False)
    for part in parts:
        if part == "bias":
            out["bias"] = True
        elif part in ("max", "top2"):
            out["group_score"] = part
        else:
            out["groups"], out["kept"] = map(int, part[1:].split("k"))
    return out


def route_workload(rep, device):
    """The key's routing of its tokens over seeded normal logits (in the key's dtype; a seeded
    float32 bias where the label has one), screened on the chosen experts [tokens, top_k] (int32:
    exactly; ties go to the lower index in the kernel as in the oracle)."""
    from . import route_experts
    tokens, count, k = rep["tokens"], rep["experts"], rep["top_k"]
    how = _routing_of(rep["routing"])
    host = np.random.default_rng(41).standard_normal((tokens, count), dtype=np.float32)
    logits = asarray(host.astype(as_dtype(rep["dtype"]).host), device=device)
    bias = (asarray(np.random.default_rng(47).standard_normal(count).astype(np.float32) * 0.1, device=device)
            if how["bias"] else None)
    routing = (how["scoring"], True, how["groups"], how["kept"], how["group_score"], bias)
    out = asarray(np.zeros((tokens, k), np.int32), device=device)
    expected = np.asarray(oracle("moe_route", logits, k, *routing, 1.0)[1])
    return autotune.TensorWorkload(out, lambda setting: route_experts(logits, k, routing, setting=setting,
                                                                      experts=out),
                                   lambda rows: expected[rows])


ALIGN_TABLES = ("sorted_pairs", "block_experts", "inverse", "padded_count")


def align_workload(rep, device):
    """The alignment of the key's pairs to seeded expert ids (some experts left without a pair
    where the pairs are few), screened on its four tables laid end to end in one output (int32:
    exactly): the sorted pairs, each block's expert, each pair's place and the padded count."""
    from . import align_plan
    from .. import plans
    pairs, count = rep["pairs"], rep["experts"]
    ids = np.random.default_rng(43).integers(0, count, (pairs, 1)).astype(np.int32)
    experts = asarray(ids, device=device)
    reference = [np.asarray(t) for t in oracle("moe_align", experts, count, ALIGN_WORKLOAD_BLOCK_M)]
    expected = np.concatenate(reference)
    out = asarray(np.zeros(expected.size, np.int32), device=device)
    starts = np.cumsum([0, *(t.size for t in reference)])
    tables = {name: out[int(a):int(b)] for name, a, b in zip(ALIGN_TABLES, starts[:-1], starts[1:])}
    return autotune.TensorWorkload(
        out, lambda setting: plans.execute(align_plan(experts, count, ALIGN_WORKLOAD_BLOCK_M, setting),
                                           {"experts": experts, **tables}),
        lambda rows: expected[rows])


ROUTE = autotune.declare(autotune.Tunable(
    "moe_route", params=ROUTE_PARAMS, key=ROUTE_KEY, default_from="tiles.moe_route", workload=route_workload,
    fits=route_fits))
ALIGN = autotune.declare(autotune.Tunable(
    "moe_align", params=ALIGN_PARAMS, key=ALIGN_KEY, default_from="tiles.moe_align", workload=align_workload,
    fits=align_fits))


def route_key(tokens: int, experts: int, top_k: int, dtype, routing: str = "softmax") -> dict:
    return dict(tokens=pow2_at_least(max(1, tokens)), experts=experts, top_k=top_k, dtype=as_dtype(dtype),
                routing=routing)


def align_key(pairs: int, experts: int) -> dict:
    return dict(pairs=pow2_at_least(max(1, pairs)), experts=experts)


def route_setting(device, tokens: int, experts: int, top_k: int, dtype, routing: str) -> dict:
    """The served setting of a routing launch (routing: route_label's)."""
    return autotune.setting(ROUTE, device, **route_key(tokens, experts, top_k, dtype, routing))


def align_setting(device, pairs: int, experts: int) -> dict:
    """The served setting of an alignment's two launches."""
    return autotune.setting(ALIGN, device, **align_key(pairs, experts))


__all__ = ["ROUTE", "ALIGN", "route_label", "route_key", "align_key", "route_setting", "align_setting"]
