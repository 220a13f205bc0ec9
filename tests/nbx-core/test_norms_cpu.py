"""The CPU references of scaled/masked softmax and the normalizations, and their refusals."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import DTypeError, ShapeError

rng = np.random.default_rng(11)


def test_layer_norm_of_a_known_row_subtracts_the_mean_and_divides_by_the_biased_std():
    x = nbx.asarray([[1.0, 2.0, 3.0, 4.0]], dtype="float64")
    out = nbx.layer_norm(x, (4,), eps=0.0)
    expected = (np.array([1, 2, 3, 4]) - 2.5) / np.sqrt(1.25)
    np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-15)


def test_layer_norm_applies_weight_and_bias_over_two_trailing_dims():
    a = rng.standard_normal((3, 4, 5))
    w, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    out = nbx.layer_norm(nbx.asarray(a), (4, 5), nbx.asarray(w), nbx.asarray(b), eps=1e-5)
    flat = a.reshape(3, 20)
    norm = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), norm.reshape(3, 4, 5) * w + b, rtol=1e-10, atol=1e-12)


def test_rms_norm_defaults_eps_to_the_machine_epsilon_of_the_dtype_as_torch_does():
    a = rng.standard_normal((2, 8)).astype(np.float32)
    out = nbx.rms_norm(nbx.asarray(a), 8)
    eps = np.finfo(np.float32).eps
    expected = a / np.sqrt((a.astype(np.float64) ** 2).mean(1, keepdims=True) + eps)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_group_norm_normalizes_each_group_of_channels_and_scales_per_channel():
    a = rng.standard_normal((2, 6, 3, 2))
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    out = nbx.group_norm(nbx.asarray(a), 3, nbx.asarray(w), nbx.asarray(b), eps=1e-5).numpy()
    g = a.reshape(2, 3, 12)
    norm = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5)).reshape(a.shape)
    np.testing.assert_allclose(out, norm * w[:, None, None] + b[:, None, None], rtol=1e-10, atol=1e-12)


def test_batch_norm_in_inference_uses_the_running_statistics_per_channel():
    a = rng.standard_normal((4, 3, 5))
    mean, var = rng.standard_normal(3), rng.uniform(0.5, 2.0, 3)
    w, b = rng.standard_normal(3), rng.standard_normal(3)
    out = nbx.batch_norm(nbx.asarray(a), nbx.asarray(mean), nbx.asarray(var), nbx.asarray(w), nbx.asarray(b), 1e-3)
    expected = (a - mean[:, None]) / np.sqrt(var[:, None] + 1e-3) * w[:, None] + b[:, None]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


def test_add_rms_norm_returns_the_new_residual_rounded_to_the_dtype_and_its_norm():
    x = nbx.asarray(rng.standard_normal((3, 16)), dtype="bfloat16")
    r = nbx.asarray(rng.standard_normal((3, 16)), dtype="bfloat16")
    w = nbx.asarray(rng.standard_normal(16), dtype="float32")
    normed, residual = nbx.add_rms_norm(x, r, w, eps=1e-6)
    total = (x.numpy().astype(np.float32) + r.numpy().astype(np.float32)).astype(x.dtype.host)
    np.testing.assert_array_equal(residual.numpy(), total)
    assert normed.dtype is nbx.bfloat16 and residual.dtype is nbx.bfloat16
    expected = nbx.rms_norm(residual, 16, w, eps=1e-6)
    np.testing.assert_array_equal(normed.numpy(), expected.numpy())


def test_scaled_masked_softmax_drops_false_elements_and_adds_a_floating_mask():
    a = rng.standard_normal((2, 5))
    keep = np.array([True, False, True, True, False])
    out = nbx.scaled_masked_softmax(nbx.asarray(a), 0.5, nbx.asarray(keep)).numpy()
    logits = np.where(keep, a * 0.5, -np.inf)
    expected = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(out, expected / expected.sum(1, keepdims=True), rtol=1e-12)
    additive = nbx.asarray(np.where(keep, 0.0, -np.inf))
    np.testing.assert_allclose(nbx.scaled_masked_softmax(nbx.asarray(a), 0.5, additive).numpy(), out, rtol=1e-12)


def test_a_row_with_every_element_masked_is_nan_as_the_reference_defines():
    a = nbx.asarray(rng.standard_normal((2, 3)))
    keep = nbx.asarray(np.array([[True, True, False], [False, False, False]]))
    out = nbx.scaled_masked_softmax(a, 1.0, keep).numpy()
    assert np.isfinite(out[0]).all() and np.isnan(out[1]).all()


def test_half_precision_cpu_results_agree_with_the_float64_oracle():
    x = nbx.asarray(rng.standard_normal((4, 33)), dtype="float16")
    w = nbx.asarray(rng.standard_normal(33), dtype="float16")
    out = nbx.layer_norm(x, 33, w)
    np.testing.assert_allclose(out.numpy().astype(np.float64), nbx.oracle("layer_norm", x, (33,), w), atol=4e-3)


@pytest.mark.parametrize("call,error,message", [
    (lambda x: nbx.layer_norm(x, (5,)), ShapeError, r"normalized_shape \(5,\) does not match the trailing dims"),
    (lambda x: nbx.rms_norm(x, (3, 4), nbx.ones((4,))), ShapeError, r"rms_norm: weight has shape \(4,\), expected \(3, 4\)"),
    (lambda x: nbx.group_norm(x, 5), ShapeError, r"num_groups 5 does not divide the 3 channels"),
    (lambda x: nbx.group_norm(x[0, 0], 1), ShapeError, r"group_norm takes x of shape \(N, C, \*\)"),
    (lambda x: nbx.batch_norm(x, nbx.zeros((4,)), nbx.ones((3,))), ShapeError, r"running_mean has shape \(4,\)"),
    (lambda x: nbx.add_rms_norm(x, x[:, :2]), ShapeError, r"residual has shape \(2, 2, 4\), expected x's"),
    (lambda x: nbx.add_rms_norm(x, x.to(dtype="float16")), DTypeError, r"residual is float16, x is float32"),
    (lambda x: nbx.layer_norm(x.to(dtype="int32"), 4), DTypeError, r"layer_norm \(x\) does not accept int32"),
    (lambda x: nbx.rms_norm(x, 4, nbx.ones((4,), dtype="int64")), DTypeError, r"rms_norm \(weight\) does not accept int64"),
    (lambda x: nbx.scaled_masked_softmax(x, 1.0, nbx.ones((4,), dtype="int8")), DTypeError, r"a mask is bool \(keep\) or floating"),
    (lambda x: nbx.scaled_masked_softmax(x, 1.0, nbx.ones((3,), dtype="bool")), ShapeError, r"mask of shape \(3,\) does not broadcast to x.s shape \(2, 3, 4\)"),
    (lambda x: nbx.scaled_masked_softmax(x.to(dtype="int16")), DTypeError, r"scaled_masked_softmax \(x\) does not accept int16"),
])
def test_refusals_name_what_is_wrong(call, error, message):
    x = nbx.asarray(rng.standard_normal((2, 3, 4)), dtype="float32")
    with pytest.raises(error, match=message):
        call(x)
