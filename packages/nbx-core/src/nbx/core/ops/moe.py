"""Mixture of experts: routing, alignment, the expert layer and the whole MoE block.

    route = moe_route(logits, top_k, ...)           # (weights float32 [T, k], experts int32 [T, k])
    y     = moe_experts(x, route.weights, route.experts, w_gate, w_up, w_down)
    y     = moe_block(x, router, w_gate, w_up, w_down, top_k, ..., shared=(g, u, d))  # the three together

Weights are stacked per expert as Hugging Face stores each expert's [out, in] matrix: w_gate and
w_up [E, I, H], w_down [E, H, I]. Token t's output is sum_j weights[t, j] * down_e(silu(gate_e(x_t))
* up_e(x_t)) with e = experts[t, j], summed in the order j = 0, 1, ..., k - 1 (every device).

Routing (capacity-free: no token is dropped). Scores are softmax over all E logits (Mixtral,
Qwen3-MoE) or sigmoid (DeepSeek-V3). The experts are chosen by a selection key: the logits
themselves (softmax and sigmoid are monotone, so the choice is exact on every device), or, with a
correction bias (DeepSeek-V3's e_score_correction_bias), score + bias computed in float32. Grouped
top-k (n_group groups of E / n_group experts, DeepSeek-V2/V3) first keeps the topk_group groups of
the highest group score, the max of the group's keys ("max", V2) or the sum of its two highest
("top2", V3), then picks top_k experts in them. **Ties go to the lower expert index** (and to the
lower group index), on every device. The weights are the chosen experts' scores (without the
bias), divided by their sum when renormalize, times scaling. Logits are expected finite.

Alignment (moe_align): the T * k (token, slot) pairs, pair p = t * k + j, sorted by expert (stably:
in pair order within an expert) and each expert's run padded to a multiple of block_m, the row block
of the expert GEMM, with pad entries = T * k. Exact integers, the same on every device and run.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes, reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from ..tensor import Tensor
from ._common import check_category, common_device, compute_dtype, oracle_dtype, wrap

SCORINGS = ("softmax", "sigmoid")
GROUP_SCORES = ("max", "top2")


class Routing(NamedTuple):
    weights: Tensor   # float32 [T, k]: each chosen expert's weight
    experts: Tensor   # int32 [T, k]: the chosen experts, in order of selection (highest key first)


class Alignment(NamedTuple):
    sorted_pairs: Tensor   # int32 [capacity]: pair ids by expert, each expert's run padded with T * k
    block_experts: Tensor  # int32 [capacity // block_m]: each row block's expert, -1 past the used blocks
    inverse: Tensor        # int32 [T * k]: the position of each pair in sorted_pairs
    padded_count: Tensor   # int32 [1]: the used length of sorted_pairs (a multiple of block_m)


def align_capacity(pairs: int, num_experts: int, block_m: int) -> int:
    """The length of sorted_pairs: the most the padded runs can take (only experts that get a pair
    are padded, each by at most block_m - 1), a multiple of block_m."""
    most = pairs + min(num_experts, pairs) * (block_m - 1)
    return -(-most // block_m) * block_m


def _check_route(logits, top_k, scoring, n_group, topk_group, group_score, correction_bias):
    if not isinstance(logits, Tensor) or logits.ndim != 2:
        raise ShapeError(f"moe_route takes logits [tokens, experts], got {getattr(logits, 'shape', logits)}")
    check_category("moe_route", logits.dtype, "real_floating")
    experts = logits.shape[1]
    if scoring not in SCORINGS:
        raise ArgumentError(f"moe_route scoring {scoring!r} is not one of {SCORINGS}")
    if not 1 <= int(top_k) <= experts:
        raise ArgumentError(f"moe_route top_k={top_k} is outside [1, {experts}]")
    if group_score not in GROUP_SCORES:
        raise ArgumentError(f"moe_route group_score {group_score!r} is not one of {GROUP_SCORES}")
    if n_group is not None:
        if n_group < 1 or experts % n_group:
            raise ArgumentError(f"moe_route n_group={n_group} does not divide the {experts} experts")
        if topk_group is None or not 1 <= topk_group <= n_group:
            raise ArgumentError(f"moe_route topk_group={topk_group} is outside [1, n_group={n_group}]")
        if top_k > topk_group * (experts // n_group):
            raise ArgumentError(f"moe_route top_k={top_k} exceeds the {topk_group} kept groups' experts")
        if group_score == "top2" and experts // n_group < 2:
            raise ArgumentError("moe_route group_score 'top2' needs groups of two experts or more")
    if correction_bias is not None:
        if not isinstance(correction_bias, Tensor) or correction_bias.shape != (experts,):
            raise ShapeError(f"moe_route's correction_bias is [experts={experts}]")
        if correction_bias.dtype is not dtypes.float32:
            raise DTypeError(f"moe_route's correction_bias is float32, got {correction_bias.dtype.name}")


def _route_groups(n_group, topk_group) -> tuple[int, int]:
    """(groups, groups kept): one group of all experts, all kept, when the routing has no groups."""
    groups = 1 if n_group is None else int(n_group)
    return groups, groups if n_group is None else int(topk_group)


def moe_route(logits: Tensor, top_k: int, *, scoring: str = "softmax", renormalize: bool = True,
              n_group: int | None = None, topk_group: int | None = None, group_score: str = "max",
              correction_bias: Tensor | None = None, scaling: float = 1.0) -> Routing:
    """Each token's top_k experts and their weights (see the module's doc for the rules)."""
    _check_route(logits, top_k, scoring, n_group, topk_group, group_score, correction_bias)
    device = common_device(logits, correction_bias)
    groups, kept = _route_groups(n_group, topk_group)
    weights, experts = implementation("moe_route", device)(
        logits, int(top_k), scoring, bool(renormalize), groups, kept, group_score, correction_bias, float(scaling))
    return Routing(weights, experts)


def _scores(a: np.ndarray, scoring: str) -> np.ndarray:
    if scoring == "softmax":
        shifted = np.exp(a - a.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    return 1.0 / (1.0 + np.exp(-a))


def _descending(keys: np.ndarray) -> np.ndarray:
    """Indices of each row's keys from the highest, ties to the lower index."""
    return np.argsort(-keys, axis=1, kind="stable")


def _route_reference(logits, top_k, scoring, renormalize, groups, kept, group_score, correction_bias, scaling,
                     precision=reference.NATIVE):
    compute = oracle_dtype(logits.dtype) if precision == reference.FLOAT64 else compute_dtype(logits.dtype)
    a = logits.numpy().astype(compute)
    with np.errstate(all="ignore"):
        scores = _scores(a, scoring)
        if correction_bias is None:
            keys = a.copy()
        else:   # float32 on every device: the choice it makes is the kernels'
            a32 = logits.numpy().astype(np.float32)
            keys = (_scores(a32, scoring) + correction_bias.numpy()).astype(np.float32).astype(compute)
    tokens, experts = a.shape
    if groups > 1:
        grouped = keys.reshape(tokens, groups, experts // groups)
        if group_score == "max":
            group_keys = grouped.max(axis=2)
        else:
            top = -np.sort(-grouped, axis=2)
            group_keys = (top[:, :, 0].astype(np.float32) + top[:, :, 1].astype(np.float32)).astype(compute)
        dropped = _descending(group_keys)[:, kept:]
        mask = np.zeros((tokens, groups), bool)
        np.put_along_axis(mask, dropped, True, axis=1)
        keys = np.where(np.repeat(mask, experts // groups, axis=1), -np.inf, keys)
    chosen = _descending(keys)[:, :top_k]
    weights = np.take_along_axis(scores, chosen, axis=1)
    if renormalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return weights * scaling, chosen.astype(np.int32)


def _route_cpu(logits, *args):
    weights, experts = _route_reference(logits, *args)
    return wrap(weights, dtypes.float32), wrap(experts, dtypes.int32)


def moe_align(experts: Tensor, num_experts: int, block_m: int) -> Alignment:
    """The pairs of experts ([T, k] int32 or int64) sorted by expert and padded to block_m rows."""
    if not isinstance(experts, Tensor) or experts.ndim != 2:
        raise ShapeError(f"moe_align takes experts [tokens, k], got {getattr(experts, 'shape', experts)}")
    if experts.dtype.name not in ("int32", "int64"):
        raise DTypeError(f"moe_align takes int32 or int64 expert ids, got {experts.dtype.name}")
    if num_experts < 1 or block_m < 1:
        raise ArgumentError(f"moe_align of {num_experts} experts at block_m={block_m}")
    return Alignment(*implementation("moe_align", experts.device)(experts, int(num_experts), int(block_m)))


def _align_reference(experts, num_experts, block_m, precision=reference.NATIVE):
    ids = experts.numpy().reshape(-1).astype(np.int64)
    pairs = ids.size
    if ids.size and (ids.min() < 0 or ids.max() >= num_experts):
        raise ArgumentError(f"moe_align: expert ids outside [0, {num_experts})")
    capacity = align_capacity(pairs, num_experts, block_m)
    sorted_pairs = np.full(capacity, pairs, np.int32)
    block_experts = np.full(capacity // block_m, -1, np.int32)
    inverse = np.zeros(pairs, np.int32)
    start = 0
    for e in range(num_experts):
        members = np.nonzero(ids == e)[0]
        sorted_pairs[start:start + members.size] = members
        inverse[members] = start + np.arange(members.size)
        padded = -(-members.size // block_m) * block_m
        block_experts[start // block_m:(start + padded) // block_m] = e
        start += padded
    return sorted_pairs, block_experts, inverse, np.array([start], np.int32)


def _align_cpu(experts, num_experts, block_m):
    return tuple(wrap(a, dtypes.int32) for a in _align_reference(experts, num_experts, block_m))


def _stored(w):
    """The tensor a weight lives in (an int4 weight's bytes, a float8 weight's values), for its device."""
    return getattr(w, "qweight", getattr(w, "weight", w))


def _check_layer(op, x, w_gate, w_up, w_down):
    """x [T, H] and the stacked expert weights: float of x's dtype, or int4 all three, or
    block-scaled float8 all three (one block)."""
    from ..quant import QuantizedTensor
    from ..quant_float8 import Float8BlockWeight
    if not isinstance(x, Tensor):
        raise ShapeError(f"{op}'s x is a tensor, not {type(x).__name__}")
    matrices = (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down))
    for name, t in matrices:
        if not isinstance(t, (Tensor, QuantizedTensor, Float8BlockWeight)):
            raise ShapeError(f"{op}'s {name} is a tensor, an int4 QuantizedTensor or a Float8BlockWeight, not "
                             f"{type(t).__name__}")
        if isinstance(t, Tensor) and t.dtype.itemsize == 1:
            raise NotSupportedError(f"{op}'s {name}: float8 expert weights take their block scales: pass "
                                    f"Float8BlockWeight(weight, scales, block) (or float or int4 weights)")
    kinds = {type(t) for _, t in matrices}
    quantized = bool(kinds & {QuantizedTensor, Float8BlockWeight})
    if len(kinds) > 1 and quantized:
        raise NotSupportedError(f"{op} takes int4 (or float8) weights for gate, up and down alike, or none")
    if Float8BlockWeight in kinds and len({(t.block, t.dtype) for _, t in matrices}) > 1:
        raise NotSupportedError(f"{op} takes float8 weights of one float8 type and one scale block for gate, up "
                                f"and down")
    if x.ndim != 2 or len(w_gate.shape) != 3 or tuple(w_gate.shape) != tuple(w_up.shape):
        raise ShapeError(f"{op} takes x [T, H] and w_gate, w_up [E, I, H] of one shape; got {x.shape}, "
                         f"{w_gate.shape}, {w_up.shape}")
    count, inter, hidden = w_gate.shape
    if x.shape[1] != hidden or tuple(w_down.shape) != (count, hidden, inter):
        raise ShapeError(f"{op} of x {x.shape}, w_gate {w_gate.shape}: w_down is [E, H, I] = "
                         f"{(count, hidden, inter)}, got {w_down.shape}")
    check_category(op, x.dtype, "real_floating")
    if not quantized and len({x.dtype, w_gate.dtype, w_up.dtype, w_down.dtype}) > 1:
        raise DTypeError(f"{op} takes x and the weights in one dtype, got {x.dtype.name}, "
                         f"{w_gate.dtype.name}, {w_up.dtype.name}, {w_down.dtype.name}")


def _check_experts(x, weights, experts, w_gate, w_up, w_down):
    for name, t in (("weights", weights), ("experts", experts)):
        if not isinstance(t, Tensor):
            raise ShapeError(f"moe_experts' {name} is a tensor, not {type(t).__name__}")
    _check_layer("moe_experts", x, w_gate, w_up, w_down)
    if experts.ndim != 2 or experts.shape[0] != x.shape[0] or weights.shape != experts.shape:
        raise ShapeError(f"moe_experts' weights and experts are [T={x.shape[0]}, k], got {weights.shape} and "
                         f"{experts.shape}")
    if experts.dtype.name not in ("int32", "int64"):
        raise DTypeError(f"moe_experts takes int32 or int64 expert ids, got {experts.dtype.name}")
    check_category("moe_experts", weights.dtype, "real_floating")


def moe_experts(x: Tensor, weights: Tensor, experts: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """The routed experts' SwiGLU MLPs of each token, weighted and summed in slot order: [T, H] of x's dtype.
    The weights are float tensors of x's dtype, or int4 QuantizedTensors (W4A16) all three, or
    block-scaled float8 Float8BlockWeights (W8A16: dequantized per K step in the kernel) all three."""
    _check_experts(x, weights, experts, w_gate, w_up, w_down)
    device = common_device(x, weights, experts, *(_stored(w) for w in (w_gate, w_up, w_down)))
    return implementation("moe_experts", device)(x, weights, experts, w_gate, w_up, w_down)


def moe_routed_experts(x: Tensor, logits: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, top_k: int, *,
                       scoring: str = "softmax", renormalize: bool = True, n_group: int | None = None,
                       topk_group: int | None = None, group_score: str = "max", correction_bias: Tensor | None = None,
                       scaling: float = 1.0) -> Tensor:
    """moe_experts(x, *moe_route(logits, top_k, ...), w_gate, w_up, w_down) as one op, so that a
    device runs the routing, the alignment and the expert layer as one plan (on a GPU, 16 tokens or
    fewer route and align in one launch). The same result, bit for bit, as the two ops."""
    _check_route(logits, top_k, scoring, n_group, topk_group, group_score, correction_bias)
    _check_layer("moe_routed_experts", x, w_gate, w_up, w_down)
    if logits.shape[0] != x.shape[0]:
        raise ShapeError(f"moe_routed_experts' logits are [T, experts] of x's T tokens; got {logits.shape} for "
                         f"x {x.shape}")
    if logits.shape[1] != w_gate.shape[0]:
        raise ShapeError(f"moe_routed_experts' logits score {logits.shape[1]} experts, the weights stack "
                         f"{w_gate.shape[0]}")
    groups, kept = _route_groups(n_group, topk_group)
    device = common_device(x, logits, correction_bias,
                           *(_stored(w) for w in (w_gate, w_up, w_down)))
    return implementation("moe_routed_experts", device)(
        x, logits, w_gate, w_up, w_down, int(top_k), scoring, bool(renormalize), groups, kept, group_score,
        correction_bias, float(scaling))


def _silu(v):
    return v / (1.0 + np.exp(-v))


def _dense(w, compute) -> np.ndarray:
    """A float weight as stored (each expert widened to compute where it is used: Mixtral's three
    float64 weights would take 11 GB at once), or an int4 or float8 one dequantized (in float64)."""
    if isinstance(w, Tensor):
        return w.numpy()
    return w.dequantize("float64").numpy().astype(compute)


def _experts_reference(x, weights, experts, w_gate, w_up, w_down, precision=reference.NATIVE):
    compute = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    a = x.numpy().astype(compute)
    wg, wu, wd = (_dense(w, compute) for w in (w_gate, w_up, w_down))
    ids = experts.numpy().astype(np.int64)
    w = weights.numpy().astype(compute)
    if ids.size and (ids.min() < 0 or ids.max() >= wg.shape[0]):
        raise ArgumentError(f"moe_experts: expert ids outside [0, {wg.shape[0]})")
    tokens, k = ids.shape
    per_slot = np.zeros((tokens, k, a.shape[1]), compute)
    with np.errstate(all="ignore"):
        for e in np.unique(ids):
            t, j = np.nonzero(ids == e)
            h = _silu(a[t] @ wg[e].astype(compute, copy=False).T) * (a[t] @ wu[e].astype(compute, copy=False).T)
            per_slot[t, j] = (h @ wd[e].astype(compute, copy=False).T) * w[t, j][:, None]
    out = np.zeros((tokens, a.shape[1]), compute)
    for j in range(k):   # the fixed order of the combine
        out += per_slot[:, j]
    return out


def _experts_cpu(x, *args):
    return wrap(_experts_reference(x, *args), x.dtype)


def _routed_reference(x, logits, w_gate, w_up, w_down, top_k, scoring, renormalize, groups, kept, group_score,
                      correction_bias, scaling, precision=reference.NATIVE):
    """The routing's reference, then the layer's over its tables."""
    weights, experts = _route_reference(logits, top_k, scoring, renormalize, groups, kept, group_score,
                                        correction_bias, scaling, precision)
    kept_as = dtypes.float64 if precision == reference.FLOAT64 else dtypes.float32
    return _experts_reference(x, wrap(weights, kept_as), wrap(experts, dtypes.int32), w_gate, w_up, w_down,
                              precision)


def _routed_cpu(x, *args):
    return wrap(_routed_reference(x, *args), x.dtype)


def moe_block(x: Tensor, router: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, top_k: int, *,
              shared: tuple | None = None, shared_gate: Tensor | None = None, **routing) -> Tensor:
    """A whole MoE block: router logits (router [E, H]), moe_route(**routing), the routed experts,
    plus the shared experts' SwiGLU MLP (shared = (gate [S, H], up [S, H], down [H, S])), scaled by
    sigmoid(x @ shared_gate.T) when shared_gate [1, H] is given (Qwen2-MoE), added last."""
    from .products import gated_linear, linear
    from .elementwise import sigmoid
    # the routing widens the logits itself (a cast to float32 first would be a launch more, the same values)
    out = moe_routed_experts(x, linear(x, router), w_gate, w_up, w_down, top_k, **routing)
    if shared is not None:
        gate, up, down = shared
        expert = linear(gated_linear(x, gate, up), down)
        if shared_gate is not None:
            expert = expert * sigmoid(linear(x, shared_gate))
        out = out + expert
    return out


reference.register("moe_route", _route_reference)
reference.register("moe_align", _align_reference)
reference.register("moe_experts", _experts_reference)
reference.register("moe_routed_experts", _routed_reference)
register("moe_route", "cpu")(_route_cpu)
register("moe_align", "cpu")(_align_cpu)
register("moe_experts", "cpu")(_experts_cpu)
register("moe_routed_experts", "cpu")(_routed_cpu)

__all__ = ["moe_route", "moe_align", "moe_experts", "moe_routed_experts", "moe_block", "align_capacity", "Routing", "Alignment",
           "SCORINGS", "GROUP_SCORES"]
