"""The CPU references of scaled_dot_product_attention and varlen_attention: each option against an
independent per-row loop, the alignments, GQA, LSE, fully masked rows, and the refusals."""
import math

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, DTypeError, ShapeError

rng = np.random.default_rng(19)


def naive(q, k, v, scale=None, keep=None, bias=None, softcap=0.0):
    """One head, row by row in float64: q (L, E), k (S, E), v (S, Ev); keep (L, S) bool, bias (L, S)."""
    scale = 1 / math.sqrt(q.shape[1]) if scale is None else scale
    out = np.zeros((q.shape[0], v.shape[1]))
    lse = np.full(q.shape[0], -np.inf)
    for i in range(q.shape[0]):
        s = (k @ q[i]) * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        if bias is not None:
            s = s + bias[i]
        if keep is not None:
            s = np.where(keep[i], s, -np.inf)
        if np.all(np.isneginf(s)):
            continue
        m = s.max()
        p = np.exp(s - m)
        out[i] = p @ v / p.sum()
        lse[i] = m + np.log(p.sum())
    return out, lse


def t(a):
    return nbx.asarray(a)


def test_plain_attention_is_the_softmax_of_scaled_scores_times_v():
    q, k, v = rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((2, 3, 7, 8)), rng.standard_normal((2, 3, 7, 4))
    out, lse = nbx.scaled_dot_product_attention(t(q), t(k), t(v), return_lse=True)
    for b in range(2):
        for h in range(3):
            o, l = naive(q[b, h], k[b, h], v[b, h])
            np.testing.assert_allclose(out.numpy()[b, h], o, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(lse.numpy()[b, h], l, rtol=1e-6)
    assert lse.dtype == nbx.float32


@pytest.mark.parametrize("q_len,k_len", [(5, 5), (3, 7), (7, 3), (1, 9)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_attention_sees_keys_up_to_the_aligned_position(q_len, k_len, alignment):
    q, k, v = (rng.standard_normal((1, n, 8)) for n in (q_len, k_len, k_len))
    out = nbx.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True, causal_alignment=alignment).numpy()
    offset = 0 if alignment == "top_left" else k_len - q_len
    keep = np.tril(np.ones((q_len, k_len), bool), k=offset)  # torch's is_causal is the top-left tril
    np.testing.assert_allclose(out[0], naive(q[0], k[0], v[0], keep=keep)[0], rtol=1e-12, atol=1e-12)


def test_bottom_right_causal_lets_a_single_decode_query_see_every_key():
    q, k, v = rng.standard_normal((1, 1, 8)), rng.standard_normal((1, 6, 8)), rng.standard_normal((1, 6, 8))
    causal = nbx.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True, causal_alignment="bottom_right")
    np.testing.assert_allclose(causal.numpy(), nbx.scaled_dot_product_attention(t(q), t(k), t(v)).numpy())


def test_a_fully_masked_row_has_zero_output_and_minus_infinite_lse_not_nan():
    q, k, v = rng.standard_normal((1, 4, 8)), rng.standard_normal((1, 2, 8)), rng.standard_normal((1, 2, 8))
    out, lse = nbx.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True, causal_alignment="bottom_right",
                                                return_lse=True)  # rows 0 and 1 sit before every key
    assert not np.isnan(out.numpy()).any()
    np.testing.assert_array_equal(out.numpy()[0, :2], 0)
    assert np.isneginf(lse.numpy()[0, :2]).all() and np.isfinite(lse.numpy()[0, 2:]).all()


def test_bool_and_additive_masks_broadcast_over_batch_and_heads():
    q, k, v = rng.standard_normal((2, 3, 4, 8)), rng.standard_normal((2, 3, 6, 8)), rng.standard_normal((2, 3, 6, 8))
    keep = rng.random((4, 6)) > 0.3
    keep[:, 0] = True
    bias = rng.standard_normal((2, 1, 4, 6))
    with_keep = nbx.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=nbx.asarray(keep)).numpy()
    with_bias = nbx.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(bias)).numpy()
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(with_keep[b, h], naive(q[b, h], k[b, h], v[b, h], keep=keep)[0], atol=1e-12)
            np.testing.assert_allclose(with_bias[b, h], naive(q[b, h], k[b, h], v[b, h], bias=bias[b, 0])[0],
                                       atol=1e-12)


def test_gqa_query_heads_read_the_kv_head_of_their_group():
    q, k, v = rng.standard_normal((2, 8, 5, 8)), rng.standard_normal((2, 2, 5, 8)), rng.standard_normal((2, 2, 5, 6))
    out = nbx.scaled_dot_product_attention(t(q), t(k), t(v), enable_gqa=True, is_causal=True)
    repeated = nbx.scaled_dot_product_attention(t(q), t(np.repeat(k, 4, 1)), t(np.repeat(v, 4, 1)), is_causal=True)
    np.testing.assert_allclose(out.numpy(), repeated.numpy(), rtol=1e-13)
    assert out.shape == (2, 8, 5, 6)


def test_sliding_window_keeps_keys_within_left_and_right_of_the_position():
    q, k, v = rng.standard_normal((1, 6, 8)), rng.standard_normal((1, 9, 8)), rng.standard_normal((1, 9, 8))
    out = nbx.scaled_dot_product_attention(t(q), t(k), t(v), window=(2, 1), causal_alignment="bottom_right")
    pos, j = np.arange(6)[:, None] + 3, np.arange(9)[None, :]
    keep = (j >= pos - 2) & (j <= pos + 1)
    np.testing.assert_allclose(out.numpy()[0], naive(q[0], k[0], v[0], keep=keep)[0], atol=1e-12)
    causal = nbx.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True, window=(2, None))
    keep = (j >= np.arange(6)[:, None] - 2) & (j <= np.arange(6)[:, None])
    np.testing.assert_allclose(causal.numpy()[0], naive(q[0], k[0], v[0], keep=keep)[0], atol=1e-12)


def test_softcap_and_alibi_enter_the_scores_before_the_softmax():
    q, k, v = rng.standard_normal((2, 5, 8)) * 3, rng.standard_normal((2, 7, 8)) * 3, rng.standard_normal((2, 7, 8))
    slopes = np.array([0.5, 0.25])
    out = nbx.scaled_dot_product_attention(t(q), t(k), t(v), softcap=5.0, alibi_slopes=t(slopes), scale=0.3,
                                           is_causal=True, causal_alignment="bottom_right").numpy()
    pos, j = np.arange(5)[:, None] + 2, np.arange(7)[None, :]
    for h in range(2):
        expected = naive(q[h], k[h], v[h], scale=0.3, softcap=5.0, bias=-slopes[h] * np.abs(pos - j), keep=j <= pos)[0]
        np.testing.assert_allclose(out[h], expected, atol=1e-12)


def test_half_inputs_compute_in_float32_and_round_once_to_their_dtype():
    q, k, v = (rng.standard_normal((2, 4, 16)).astype(np.float32) for _ in range(3))
    out = nbx.scaled_dot_product_attention(nbx.asarray(q, dtype=nbx.bfloat16), nbx.asarray(k, dtype=nbx.bfloat16),
                                           nbx.asarray(v, dtype=nbx.bfloat16))
    assert out.dtype == nbx.bfloat16
    exact = nbx.oracle("scaled_dot_product_attention", nbx.asarray(q, dtype=nbx.bfloat16),
                       nbx.asarray(k, dtype=nbx.bfloat16), nbx.asarray(v, dtype=nbx.bfloat16))
    assert np.max(np.abs(out.numpy().astype(np.float64) - exact)) <= 2 ** -8 * np.max(np.abs(exact))


def test_varlen_attention_equals_each_sequence_attended_alone_and_skips_empty_ones():
    lens_q, lens_k = [3, 0, 1, 4], [5, 2, 6, 4]
    cu_q, cu_k = np.concatenate([[0], np.cumsum(lens_q)]), np.concatenate([[0], np.cumsum(lens_k)])
    q, k, v = rng.standard_normal((8, 4, 8)), rng.standard_normal((17, 2, 8)), rng.standard_normal((17, 2, 6))
    slopes = rng.random((4, 4))
    out, lse = nbx.varlen_attention(t(q), t(k), t(v), nbx.asarray(cu_q, dtype=nbx.int32),
                                    nbx.asarray(cu_k, dtype=nbx.int32), is_causal=True,
                                    causal_alignment="bottom_right", alibi_slopes=t(slopes), return_lse=True)
    assert out.shape == (8, 4, 6) and lse.shape == (4, 8)
    for b in range(4):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        one = nbx.scaled_dot_product_attention(
            t(q[qs].transpose(1, 0, 2)), t(k[ks].transpose(1, 0, 2)), t(v[ks].transpose(1, 0, 2)), enable_gqa=True,
            is_causal=True, causal_alignment="bottom_right", alibi_slopes=t(slopes[b]), return_lse=True)
        np.testing.assert_allclose(out.numpy()[qs], one[0].numpy().transpose(1, 0, 2), atol=1e-12)
        np.testing.assert_allclose(lse.numpy()[:, qs], one[1].numpy(), rtol=1e-6)


def test_differing_qk_and_v_head_dims_give_v_head_dim_outputs():
    q, k, v = rng.standard_normal((1, 3, 192)), rng.standard_normal((1, 4, 192)), rng.standard_normal((1, 4, 128))
    out = nbx.scaled_dot_product_attention(t(q), t(k), t(v))
    assert out.shape == (1, 3, 128)
    np.testing.assert_allclose(out.numpy()[0], naive(q[0], k[0], v[0])[0], atol=1e-12)


@pytest.mark.parametrize("call,error", [
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k[:, :2], v[:, :2]), ShapeError),   # heads differ, no gqa
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k[:, :3], v[:, :3], enable_gqa=True), ShapeError),
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k[..., :4], v), ShapeError),          # qk head dims
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k.astype(nbx.float32), v), DTypeError),
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k, v, causal_alignment="middle"), ArgumentError),
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k, v, window=(-1, 2)), ArgumentError),
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k, v, attn_mask=nbx.ones((3, 3))), ShapeError),
    (lambda q, k, v: nbx.scaled_dot_product_attention(q, k, v, alibi_slopes=nbx.ones((3,))), ShapeError),
])
def test_mismatched_operands_and_options_are_refused_by_name(call, error):
    q, k, v = (nbx.asarray(rng.standard_normal((1, 4, 5, 8))) for _ in range(3))
    with pytest.raises(error):
        call(q, k, v)


def test_varlen_offsets_that_do_not_cover_the_packed_tokens_are_refused():
    q, k = nbx.asarray(rng.standard_normal((5, 2, 8))), nbx.asarray(rng.standard_normal((5, 2, 8)))
    good, bad = nbx.asarray([0, 2, 5], dtype=nbx.int32), nbx.asarray([0, 3, 4], dtype=nbx.int32)
    with pytest.raises(ShapeError):
        nbx.varlen_attention(q, k, k, bad, good)
    with pytest.raises(ShapeError):
        nbx.varlen_attention(q, k, k, good, nbx.asarray([0, 5], dtype=nbx.int32))


def test_torch_calls_with_dropout_p_zero_by_name_run_and_positional_ones_are_refused_not_misread():
    from nbx.core.errors import NotSupportedError
    q, k, v = (nbx.asarray(rng.standard_normal((1, 2, 5, 8))) for _ in range(3))
    ported = nbx.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
    np.testing.assert_array_equal(ported.numpy(), nbx.scaled_dot_product_attention(q, k, v, is_causal=True).numpy())
    with pytest.raises(ArgumentError, match="dropout_p"):   # torch's order: (q, k, v, mask, dropout_p, is_causal)
        nbx.scaled_dot_product_attention(q, k, v, None, 0.0, True)
    with pytest.raises(ArgumentError):
        nbx.scaled_dot_product_attention(q, k, v, None, False, True)   # a bool is no scale
    with pytest.raises(NotSupportedError, match="dropout"):
        nbx.scaled_dot_product_attention(q, k, v, dropout_p=0.1)


@pytest.mark.parametrize("q_len,alignment", [(1, "bottom_right"), (7, "top_left"), (127, "bottom_right")])
def test_odd_lengths_against_4097_keys_match_a_row_by_row_loop(q_len, alignment):
    q, k, v = rng.standard_normal((q_len, 8)), rng.standard_normal((4097, 8)), rng.standard_normal((4097, 4))
    out, lse = nbx.scaled_dot_product_attention(t(q[None]), t(k[None]), t(v[None]), is_causal=True,
                                                causal_alignment=alignment, return_lse=True)
    offset = 0 if alignment == "top_left" else 4097 - q_len
    keep = np.arange(4097)[None, :] <= np.arange(q_len)[:, None] + offset
    expected, expected_lse = naive(q, k, v, keep=keep)
    np.testing.assert_allclose(out.numpy()[0], expected, atol=1e-12)
    np.testing.assert_allclose(lse.numpy()[0], expected_lse, atol=1e-12)


def test_a_varlen_call_in_flash_attentions_positional_order_is_refused_not_misread():
    q = nbx.asarray(rng.standard_normal((5, 2, 8)))
    cu = nbx.asarray([0, 2, 5], dtype=nbx.int32)
    with pytest.raises(ArgumentError, match="max_seqlen"):   # (q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k)
        nbx.varlen_attention(q, q, q, cu, cu, 3, 3)
    out = nbx.varlen_attention(q, q, q, cu, cu, max_seqlen_q=3, max_seqlen_k=3)
    np.testing.assert_array_equal(out.numpy(), nbx.varlen_attention(q, q, q, cu, cu).numpy())
