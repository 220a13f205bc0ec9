"""Mixture of experts on the CPU: the references' rules (ties, groups, alignment) and the refusals."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import nbx.core as nbx
from nbx.core.errors import ArgumentError, DTypeError, NotSupportedError, ShapeError
from nbx.core.ops.creation import asarray


def test_softmax_routing_renormalizes_the_chosen_scores_and_breaks_ties_by_the_lower_index():
    logits = np.array([[1.0, 3.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    route = nbx.moe_route(asarray(logits), 2)
    np.testing.assert_array_equal(route.experts.numpy(), [[1, 2], [0, 1]])
    np.testing.assert_allclose(route.weights.numpy(), 0.5)
    unnormalized = nbx.moe_route(asarray(logits), 1, renormalize=False).weights.numpy()
    np.testing.assert_allclose(unnormalized[0, 0], np.exp(3) / np.exp(logits[0]).sum(), rtol=1e-6)


def test_grouped_routing_chooses_experts_only_inside_the_kept_groups():
    # group 0 holds the single best expert, group 1 the best pair: "max" keeps group 0, "top2" group 1
    logits = np.array([[5.0, -9.0, 4.0, 4.0]], np.float32)
    bias = asarray(np.zeros(4, np.float32))
    by_max = nbx.moe_route(asarray(logits), 2, scoring="sigmoid", n_group=2, topk_group=1, group_score="max")
    by_pair = nbx.moe_route(asarray(logits), 2, scoring="sigmoid", n_group=2, topk_group=1, group_score="top2",
                            correction_bias=bias)
    np.testing.assert_array_equal(by_max.experts.numpy(), [[0, 1]])
    np.testing.assert_array_equal(by_pair.experts.numpy(), [[2, 3]])


def test_the_correction_bias_changes_the_choice_but_not_the_weights():
    logits = np.array([[2.0, 1.0, 0.0]], np.float32)
    bias = asarray(np.array([0.0, 0.0, 1.0], np.float32))
    route = nbx.moe_route(asarray(logits), 1, scoring="sigmoid", correction_bias=bias, renormalize=False)
    np.testing.assert_array_equal(route.experts.numpy(), [[2]])
    np.testing.assert_allclose(route.weights.numpy(), [[0.5]])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(1, 9), st.integers(1, 3), st.sampled_from([1, 4, 16]), st.integers(0, 999))
def test_alignment_sorts_pairs_by_expert_stably_and_pads_each_run_to_the_block(tokens, count, k, block_m, seed):
    k = min(k, count)
    ids = np.random.default_rng(seed).integers(0, count, (tokens, k)).astype(np.int32)
    sorted_pairs, block_experts, inverse, used = (t.numpy() for t in nbx.moe_align(asarray(ids), count, block_m))
    pairs = tokens * k
    assert sorted_pairs.size == nbx.align_capacity(pairs, count, block_m) and used[0] % block_m == 0
    np.testing.assert_array_equal(sorted_pairs[inverse], np.arange(pairs))
    real = sorted_pairs[sorted_pairs < pairs]
    np.testing.assert_array_equal(real, np.argsort(ids.reshape(-1), kind="stable"))
    assert np.all(sorted_pairs[used[0]:] == pairs) and np.all(block_experts[used[0] // block_m:] == -1)
    for b, e in enumerate(block_experts[:used[0] // block_m]):
        rows = sorted_pairs[b * block_m:(b + 1) * block_m]
        assert np.all(ids.reshape(-1)[rows[rows < pairs]] == e) and np.any(rows < pairs)


def test_the_expert_layer_sums_each_tokens_weighted_experts():
    rng = np.random.default_rng(3)
    x, wg, wu, wd = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (2, 5, 4), (2, 5, 4), (2, 4, 5)))
    ids, w = np.array([[1, 0], [0, 1], [1, 1]], np.int32), np.array([[0.7, 0.3], [1, 0], [0.5, 0.5]], np.float32)
    out = nbx.moe_experts(*(asarray(a) for a in (x, w, ids, wg, wu, wd))).numpy()

    def mlp(e, v):
        g = wg[e] @ v
        return wd[e] @ (g / (1 + np.exp(-g)) * (wu[e] @ v))
    expected = [sum(w[t, j] * mlp(ids[t, j], x[t]) for j in range(2)) for t in range(3)]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_moe_ops_refuse_what_they_cannot_serve_by_name():
    logits = asarray(np.zeros((2, 6), np.float32))
    with pytest.raises(ArgumentError):
        nbx.moe_route(logits, 7)
    with pytest.raises(ArgumentError):
        nbx.moe_route(logits, 2, n_group=4, topk_group=1)          # 4 does not divide 6
    with pytest.raises(ArgumentError):
        nbx.moe_route(logits, 4, n_group=3, topk_group=1)          # one group of 2 cannot give 4
    with pytest.raises(DTypeError):
        nbx.moe_route(logits, 2, correction_bias=asarray(np.zeros(6, np.float64)))
    with pytest.raises(ArgumentError):
        nbx.moe_align(asarray(np.array([[6]], np.int32)), 6, 4)    # an id outside the experts
    with pytest.raises(DTypeError):
        nbx.moe_align(asarray(np.array([[1.0]], np.float32)), 6, 4)
    x, w = asarray(np.zeros((2, 4), np.float32)), asarray(np.zeros((3, 5, 4), np.float32))
    with pytest.raises(ShapeError):
        nbx.moe_experts(x, asarray(np.ones((2, 1), np.float32)), asarray(np.zeros((2, 1), np.int32)), w, w, w)
    with pytest.raises(NotSupportedError):
        nbx.moe_experts(x, asarray(np.ones((2, 1), np.float32)), asarray(np.zeros((2, 1), np.int32)),
                        w.to(dtype="float8_e4m3fn"), w, w)
    with pytest.raises(ShapeError):
        nbx.moe_routed_experts(x, logits, w, w, w, 2)                # 6 experts scored, 3 stacked
    with pytest.raises(ShapeError):
        nbx.moe_routed_experts(x, asarray(np.zeros((3, 3), np.float32)), w, w, w, 2)   # 3 tokens' logits, 2 of x


def test_the_routed_layer_is_the_expert_layer_over_the_routings_tables():
    rng = np.random.default_rng(6)
    x, wg, wu, wd, logits = (asarray(rng.standard_normal(s).astype(np.float32))
                             for s in ((5, 4), (6, 3, 4), (6, 3, 4), (6, 4, 3), (5, 6)))
    bias = asarray(np.linspace(-1, 1, 6).astype(np.float32))
    routing = dict(scoring="sigmoid", n_group=3, topk_group=2, correction_bias=bias, scaling=1.5)
    route = nbx.moe_route(logits, 2, **routing)
    expected = nbx.moe_experts(x, route.weights, route.experts, wg, wu, wd).numpy()
    np.testing.assert_array_equal(nbx.moe_routed_experts(x, logits, wg, wu, wd, 2, **routing).numpy(), expected)


def test_float8_block_weights_dequantize_within_their_types_rounding_and_refuse_wrong_scales_by_name():
    from nbx.core import Float8BlockWeight
    w = np.random.default_rng(8).standard_normal((2, 20, 36))
    q = Float8BlockWeight.quantize(asarray(w), (16, 32))
    assert q.weight.dtype.name == "float8_e4m3fn" and q.scales.shape == (2, 2, 2)
    # e4m3 keeps 3 mantissa bits: each value within 2^-4 of itself, relative, after its block's scale
    np.testing.assert_allclose(q.dequantize("float64").numpy(), w, rtol=2.0 ** -4, atol=1e-12)
    assert q.nbytes == 2 * 20 * 36 + 2 * 2 * 2 * 4
    with pytest.raises(ShapeError):
        Float8BlockWeight(q.weight, asarray(np.ones((2, 1, 2), np.float32)), (16, 32))
    with pytest.raises(DTypeError):
        Float8BlockWeight(asarray(w), q.scales, (16, 32))
    with pytest.raises(DTypeError):
        Float8BlockWeight(q.weight, asarray(np.ones((2, 2, 2), np.float64)), (16, 32))


def test_the_layer_over_float8_weights_is_the_layer_over_their_dequantized_values():
    from nbx.core import Float8BlockWeight
    rng = np.random.default_rng(10)
    x = asarray(rng.standard_normal((3, 32)).astype(np.float32))
    ws = [Float8BlockWeight.quantize(asarray(rng.standard_normal(s) / 6), (16, 16))
          for s in ((3, 16, 32), (3, 16, 32), (3, 32, 16))]
    weights, experts = asarray(np.full((3, 2), 0.5, np.float32)), asarray(np.array([[0, 2], [1, 0], [2, 1]], np.int32))
    out = nbx.moe_experts(x, weights, experts, *ws)
    dense = nbx.moe_experts(x, weights, experts, *(w.dequantize("float32") for w in ws))
    np.testing.assert_allclose(out.numpy(), dense.numpy(), rtol=1e-6, atol=1e-7)
    with pytest.raises(NotSupportedError):
        nbx.moe_experts(x, weights, experts, ws[0], ws[1].dequantize("float32"), ws[2])   # float8 and float mixed
    other = Float8BlockWeight.quantize(asarray(rng.standard_normal((3, 32, 16))), (32, 16))
    with pytest.raises(NotSupportedError):
        nbx.moe_experts(x, weights, experts, ws[0], ws[1], other)                          # two scale blocks
