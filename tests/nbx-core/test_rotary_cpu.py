"""rotary_embedding's CPU reference (both layouts, partial rotary dims) and the rope tables of each
scaling, against the closed forms the checkpoints' papers and Hugging Face define."""
import math

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import IndexingError, NotSupportedError, ShapeError

rng = np.random.default_rng(7)
LLAMA = {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64, "rope_theta": 10000.0}


def test_half_split_rotation_is_a_complex_multiplication_of_dim_i_with_dim_i_plus_half():
    cos, sin = nbx.rope_tables(LLAMA, dtype=nbx.float64)
    x = rng.standard_normal((5, 3, 16))
    positions = np.array([0, 3, 7, 63, 1])
    out = nbx.rotary_embedding(nbx.asarray(x), cos, sin, nbx.asarray(positions)).numpy()
    inv_freq = 1 / 10000.0 ** (np.arange(0, 16, 2) / 16)
    z = (x[..., :8] + 1j * x[..., 8:]) * np.exp(1j * positions[:, None, None] * inv_freq)
    np.testing.assert_allclose(out, np.concatenate([z.real, z.imag], -1), atol=1e-12)


def test_interleaved_rotation_pairs_dims_2i_and_2i_plus_1():
    cos, sin = nbx.rope_tables(LLAMA, interleaved=True, dtype=nbx.float64)
    x = rng.standard_normal((4, 2, 16))
    positions = np.array([5, 0, 2, 9])
    out = nbx.rotary_embedding(nbx.asarray(x), cos, sin, nbx.asarray(positions), interleaved=True).numpy()
    inv_freq = 1 / 10000.0 ** (np.arange(0, 16, 2) / 16)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * positions[:, None, None] * inv_freq)
    expected = np.stack([z.real, z.imag], -1).reshape(x.shape)
    np.testing.assert_allclose(out, expected, atol=1e-12)


def test_partial_rotary_dims_rotate_the_first_dims_and_pass_the_rest_through():
    config = {**LLAMA, "partial_rotary_factor": 0.5}
    cos, sin = nbx.rope_tables(config, dtype=nbx.float64)
    assert cos.shape == (64, 8)
    x = rng.standard_normal((3, 2, 16))
    positions = nbx.asarray(np.array([1, 2, 3]))
    out = nbx.rotary_embedding(nbx.asarray(x), cos, sin, positions).numpy()
    np.testing.assert_array_equal(out[..., 8:], x[..., 8:])
    full = nbx.rotary_embedding(nbx.asarray(x[..., :8].copy()), cos, sin, positions).numpy()
    np.testing.assert_allclose(out[..., :8], full, atol=1e-15)


def test_positions_may_have_batch_dims_matching_x():
    cos, sin = nbx.rope_tables(LLAMA)
    x = rng.standard_normal((2, 3, 4, 16)).astype(np.float32)
    positions = np.arange(6).reshape(2, 3)
    out = nbx.rotary_embedding(nbx.asarray(x), cos, sin, nbx.asarray(positions)).numpy()
    flat = nbx.rotary_embedding(nbx.asarray(x.reshape(6, 4, 16)), cos, sin, nbx.asarray(positions.ravel())).numpy()
    np.testing.assert_array_equal(out.reshape(6, 4, 16), flat)


def test_linear_scaling_divides_every_frequency_by_the_factor():
    plain, _ = nbx.rope_frequencies(LLAMA)
    linear, factor = nbx.rope_frequencies({**LLAMA, "rope_scaling": {"type": "linear", "factor": 4.0}})
    np.testing.assert_allclose(linear, plain / 4)
    assert factor == 1.0


def test_dynamic_ntk_keeps_the_base_within_the_trained_length_and_raises_it_beyond():
    config = {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    plain, _ = nbx.rope_frequencies(LLAMA)
    np.testing.assert_allclose(nbx.rope_frequencies(config, seq_len=32)[0], plain)
    longer, _ = nbx.rope_frequencies(config, seq_len=128)
    base = 10000.0 * (2.0 * 128 / 64 - 1) ** (16 / 14)
    np.testing.assert_allclose(longer, 1 / base ** (np.arange(0, 16, 2) / 16))


def test_llama3_scaling_keeps_high_frequencies_and_divides_low_ones_by_the_factor():
    config = {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}}
    scaled, _ = nbx.rope_frequencies(config)
    plain = 1 / 500000.0 ** (np.arange(0, 128, 2) / 128)
    wavelen = 2 * np.pi / plain
    high, low = wavelen < 8192 / 4, wavelen > 8192
    np.testing.assert_allclose(scaled[high], plain[high])
    np.testing.assert_allclose(scaled[low], plain[low] / 8)
    medium = ~high & ~low
    assert medium.any() and np.all((scaled[medium] < plain[medium]) & (scaled[medium] > plain[medium] / 8))


def test_yarn_blends_interpolated_and_extrapolated_frequencies_and_scales_the_tables():
    config = {**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}}
    inv_freq, attention = nbx.rope_frequencies(config)
    plain, _ = nbx.rope_frequencies(LLAMA)
    assert attention == pytest.approx(0.1 * math.log(4.0) + 1)
    assert inv_freq[0] == pytest.approx(plain[0]) and inv_freq[-1] == pytest.approx(plain[-1] / 4)
    cos, _ = nbx.rope_tables(config, dtype=nbx.float64)
    assert cos.numpy()[0, 0] == pytest.approx(attention)


def test_rope_parameters_of_transformers_5_are_read_like_rope_scaling():
    old = {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    new = {k: v for k, v in LLAMA.items() if k != "rope_theta"}
    new["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    np.testing.assert_array_equal(nbx.rope_frequencies(old)[0], nbx.rope_frequencies(new)[0])


def test_unknown_scalings_positions_past_the_table_and_odd_rotary_dims_are_refused():
    with pytest.raises(NotSupportedError):
        nbx.rope_tables({**LLAMA, "rope_scaling": {"rope_type": "longrope", "factor": 2.0}})
    cos, sin = nbx.rope_tables(LLAMA)
    x = nbx.asarray(rng.standard_normal((2, 1, 16)).astype(np.float32))
    with pytest.raises(IndexingError):
        nbx.rotary_embedding(x, cos, sin, nbx.asarray(np.array([0, 64])))
    with pytest.raises(ShapeError):
        nbx.rotary_embedding(x, cos[:, :15], sin[:, :15], nbx.asarray(np.array([0, 1])))
    with pytest.raises(ShapeError):
        nbx.rotary_embedding(x, cos, sin, nbx.asarray(np.array([0, 1, 2])))
