"""GPTQ and AWQ int4 layers (packed as their format descriptions state) load into QuantizedTensor
and dequantize to exactly (q - z) * s; act-order GPTQ and malformed layers are refused by name."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import quant_formats

rng = np.random.default_rng(41)
K, N, GROUP = 64, 16, 32


def layer():
    q = rng.integers(0, 16, (K, N))
    z = rng.integers(1, 16, (K // GROUP, N))        # GPTQ stores z - 1 in 4 bits: zero points 1 .. 16
    s = rng.uniform(0.001, 0.02, (K // GROUP, N)).astype(np.float16)
    expected = (q - np.repeat(z, GROUP, axis=0)) * np.repeat(s.astype(np.float64), GROUP, axis=0)
    return q, z, s, expected.T                       # the [out, in] weight


def pack_rows(values):                            # [R, C] -> int32 [R / 8, C]: row 8i + j in bits 4j
    r, c = values.shape
    v = values.reshape(r // 8, 8, c).astype(np.uint32)
    return sum(v[:, j] << np.uint32(4 * j) for j in range(8)).astype(np.int32)


def pack_columns(values, order=tuple(range(8))):  # [R, C] -> int32 [R, C / 8]: slot s holds column order[s]
    r, c = values.shape
    v = values.reshape(r, c // 8, 8).astype(np.uint32)
    return sum(v[:, :, order[s]] << np.uint32(4 * s) for s in range(8)).astype(np.int32)


def test_a_gptq_layer_dequantizes_to_q_minus_z_times_s_exactly():
    q, z, s, expected = layer()
    w = quant_formats.from_gptq(pack_rows(q), pack_columns(z - 1), s, np.arange(K) // GROUP)
    assert w.shape == (N, K) and w.group_size == GROUP and w.scheme == "asymmetric"
    np.testing.assert_array_equal(w.dequantize("float64").numpy(), expected)
    half = quant_formats.from_gptq(pack_rows(q), pack_columns(z - 1), s, scale_dtype="float16")
    np.testing.assert_allclose(half.dequantize("float64").numpy(), expected, atol=2e-3 * np.abs(expected).max())


def test_an_awq_layer_with_its_interleaved_columns_dequantizes_exactly():
    q, z, s, expected = layer()
    order = quant_formats.AWQ_ORDER
    w = quant_formats.from_awq(pack_columns(q, order), pack_columns(z, order), s)
    np.testing.assert_array_equal(w.dequantize("float64").numpy(), expected)
    mapping = {"l.qweight": nbx.asarray(pack_columns(q, order)), "l.qzeros": nbx.asarray(pack_columns(z, order)),
               "l.scales": nbx.asarray(s)}
    np.testing.assert_array_equal(quant_formats.load(mapping, "l", "awq").dequantize("float64").numpy(), expected)


def test_act_order_gptq_and_malformed_layers_are_refused_by_name():
    q, z, s, _ = layer()
    shuffled = rng.permutation(np.arange(K) // GROUP)
    with pytest.raises(nbx.errors.NotSupportedError, match="desc_act"):
        quant_formats.from_gptq(pack_rows(q), pack_columns(z - 1), s, shuffled)
    with pytest.raises(nbx.errors.ShapeError, match="do not divide"):
        quant_formats.from_gptq(pack_rows(q), pack_columns(z - 1), s[:, :5][:0])
    with pytest.raises(nbx.errors.DTypeError, match="packed int32"):
        quant_formats.from_awq(q.astype(np.float32), pack_columns(z), s)
    with pytest.raises(nbx.errors.FileFormatError, match="'l.qzeros'"):
        quant_formats.load({"l.qweight": nbx.asarray(pack_rows(q)), "l.scales": nbx.asarray(s)}, "l", "gptq")
