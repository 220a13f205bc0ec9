"""linear, addmm, baddbmm and gated_linear on the kernel devices: every epilogue (bias [N] and per
row [M, N], activation, residual, alpha/beta, the SwiGLU pair, the output cast) against the float64
oracle of the unfused ops, in every float dtype, at odd sizes and the empty ones."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx

rng = np.random.default_rng(18)
FLOATS = ("float16", "bfloat16", "float32", "float64")


def on(device, shape, dtype="float32", scale=1.0):
    return nbx.asarray((scale * rng.standard_normal(shape)).astype(nbx.as_dtype(dtype).host), device=device)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m,k,n", [(1, 7, 33), (7, 33, 5), (33, 20, 17)])
def test_linear_with_bias_matches_the_oracle_in_every_float_dtype(device, check, dtype, m, k, n):
    x, w, b = on(device, (m, k), dtype), on(device, (n, k), dtype), on(device, (n,), dtype)
    out = nbx.linear(x, w, b)
    assert out.dtype.name == dtype and out.shape == (m, n)
    check(out, nbx.oracle("linear", x, w, b), device)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu"])
def test_every_activation_with_a_per_row_bias_a_residual_and_alpha_beta_matches_the_unfused_ops(
        device, check, activation):
    x, w = on(device, (9, 24), "bfloat16"), on(device, (40, 24), "bfloat16", 0.3)
    bias, residual = on(device, (9, 40), "bfloat16"), on(device, (9, 40), "bfloat16")
    out = nbx.linear(x, w, bias, activation=activation, residual=residual, alpha=0.5, beta=-1.5)
    check(out, nbx.oracle("linear", x, w, bias, activation, residual, 0.5, -1.5), device)


def test_linear_over_leading_dims_with_a_broadcast_residual_and_a_float32_output(device, check):
    x, w = on(device, (2, 3, 16), "float16"), on(device, (12, 16), "float16")
    residual = on(device, (3, 12), "float32")
    out = nbx.linear(x, w, residual=residual, out_dtype="float32")
    assert out.dtype.name == "float32" and out.shape == (2, 3, 12)
    check(out, nbx.oracle("linear", x, w, None, None, residual), device)


def test_addmm_and_baddbmm_scale_the_input_and_the_product(device, check):
    a, b, c = on(device, (5, 18)), on(device, (18, 7)), on(device, (7,))
    check(nbx.addmm(c, a, b, beta=0.25, alpha=2.0), nbx.oracle("addmm", c, a, b, 0.25, 2.0), device)
    x, y, z = on(device, (3, 4, 10)), on(device, (3, 10, 6)), on(device, (3, 4, 6))
    check(nbx.baddbmm(z, x, y, beta=-1.0, alpha=0.5), nbx.oracle("baddbmm", z, x, y, -1.0, 0.5), device)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("m", [1, 7, 33])
def test_the_swiglu_pair_matches_silu_of_the_gate_times_the_up_projection(device, check, dtype, m):
    x, wg, wu = on(device, (m, 40), dtype), on(device, (24, 40), dtype, 0.3), on(device, (24, 40), dtype, 0.3)
    out = nbx.gated_linear(x, wg, wu)
    assert out.dtype.name == dtype and out.shape == (m, 24)
    check(out, nbx.oracle("gated_linear", x, wg, wu, "silu"), device)


def test_empty_rows_give_an_empty_result_and_an_empty_sum_gives_the_epilogue_of_zero(device, check):
    assert nbx.linear(on(device, (0, 8)), on(device, (4, 8)), on(device, (4,))).shape == (0, 4)
    x, w, b, r = on(device, (3, 0)), on(device, (4, 0)), on(device, (4,)), on(device, (3, 4))
    check(nbx.linear(x, w, b, activation="relu", residual=r), nbx.oracle("linear", x, w, b, "relu", r), device)
    check(nbx.gated_linear(x, w, w), np.zeros((3, 4)), device)
