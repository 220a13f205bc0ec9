"""linear, gated_linear, addmm, bmm, baddbmm, einsum and nbx.linalg on the CPU: numpy's (torch's)
definitions, the epilogue's order, the shapes they take and the refusals of what they do not."""
from __future__ import annotations

import math

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, DTypeError, NotSupportedError, ShapeError

rng = np.random.default_rng(18)


def t(*shape, dtype="float32"):
    return nbx.asarray(rng.standard_normal(shape).astype(nbx.as_dtype(dtype).host))


def close(out, expected, tol=2e-6):
    expected = np.asarray(expected, np.float64)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy().astype(np.float64), expected, rtol=tol, atol=tol * max(1, np.abs(expected).max()))


def gelu(a):
    return 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2)))


ACTS = {None: lambda a: a, "relu": lambda a: np.maximum(a, 0), "silu": lambda a: a / (1 + np.exp(-a)),
        "gelu": gelu, "gelu_tanh": lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))}


@pytest.mark.parametrize("activation", list(ACTS))
def test_linear_reads_the_weight_as_out_by_in_and_applies_its_epilogue_in_order(activation):
    x, w, b, r = t(2, 3, 6), t(5, 6), t(5), t(3, 5)
    out = nbx.linear(x, w, b, activation=activation, residual=r, alpha=0.5, beta=-2.0)
    ref = ACTS[activation](0.5 * (x.numpy() @ w.numpy().T) + b.numpy()) - 2.0 * r.numpy()
    close(out, ref)
    close(nbx.linear(x, w), x.numpy() @ w.numpy().T)


def test_linear_takes_a_per_row_bias_of_any_number_of_rows_and_one_dimensional_inputs():
    x, w = t(9, 4), t(3, 4)
    bias = t(9, 3)
    close(nbx.linear(x, w, bias), x.numpy() @ w.numpy().T + bias.numpy())
    v = t(4)
    close(nbx.linear(v, w), w.numpy() @ v.numpy())


def test_linear_of_half_operands_gives_their_dtype_and_out_dtype_casts_once():
    x, w = t(4, 8, dtype="bfloat16"), t(3, 8, dtype="bfloat16")
    assert nbx.linear(x, w).dtype is nbx.bfloat16
    out = nbx.linear(x, w, out_dtype="float32")
    assert out.dtype is nbx.float32
    close(out, x.numpy().astype(np.float64) @ w.numpy().astype(np.float64).T)


def test_linear_refuses_mismatched_shapes_and_non_float_operands_by_name():
    with pytest.raises(ShapeError, match="last dim must be in=4"):
        nbx.linear(t(2, 5), t(3, 4))
    with pytest.raises(ShapeError, match=r"weight is \[out, in\]"):
        nbx.linear(t(2, 4), t(4))
    with pytest.raises(ShapeError, match="bias of shape"):
        nbx.linear(t(2, 4), t(3, 4), t(4))
    with pytest.raises(ArgumentError, match="activation is one of"):
        nbx.linear(t(2, 4), t(3, 4), activation="tanh")
    ints = nbx.asarray(np.ones((2, 4), np.int32))
    with pytest.raises(DTypeError, match="linear does not accept int32"):
        nbx.linear(ints, ints)


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_gated_linear_is_the_activated_gate_times_the_up_projection(activation):
    x, wg, wu = t(3, 7, 8), t(5, 8), t(5, 8)
    ref = ACTS[activation](x.numpy() @ wg.numpy().T) * (x.numpy() @ wu.numpy().T)
    close(nbx.gated_linear(x, wg, wu, activation=activation), ref)
    with pytest.raises(ShapeError, match="of one shape"):
        nbx.gated_linear(x, wg, t(4, 8))


def test_addmm_and_baddbmm_are_beta_input_plus_alpha_product_and_beta_zero_ignores_input():
    a, b, c = t(4, 6), t(6, 5), t(5)
    close(nbx.addmm(c, a, b, beta=0.5, alpha=3), 0.5 * c.numpy() + 3 * (a.numpy() @ b.numpy()))
    nan = nbx.asarray(np.full((4, 5), np.nan, np.float32))
    close(nbx.addmm(nan, a, b, beta=0), a.numpy() @ b.numpy())
    x, y, z = t(3, 4, 6), t(3, 6, 2), t(3, 4, 2)
    close(nbx.baddbmm(z, x, y, beta=2, alpha=-1), 2 * z.numpy() - x.numpy() @ y.numpy())
    with pytest.raises(ShapeError, match="3-D batches of equal size"):
        nbx.baddbmm(z, x, t(2, 6, 2))


def test_bmm_multiplies_equal_batches_and_refuses_broadcasting():
    x, y = t(3, 4, 6), t(3, 6, 2)
    close(nbx.bmm(x, y), x.numpy() @ y.numpy())
    with pytest.raises(ShapeError, match="3-D batches"):
        nbx.bmm(x, t(6, 2))


@pytest.mark.parametrize("subscripts,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 5), (2, 3, 5, 8)]), ("...d,ed->...e", [(2, 3, 6), (4, 6)]),
    ("i,j->ij", [(3,), (4,)]), ("bi,bi->b", [(5, 6), (5, 6)]), ("ij,jk", [(3, 4), (4, 2)]),
    ("bij->bji", [(2, 3, 4)]), ("ij->", [(3, 4)]), ("bsd,d->bs", [(2, 3, 4), (4,)]), ("ij,kj->ik", [(3, 4), (5, 4)]),
])
def test_einsum_computes_the_contractions_models_use_as_numpy_does(subscripts, shapes):
    operands = [t(*s) for s in shapes]
    close(nbx.einsum(subscripts, *operands), np.einsum(subscripts, *(o.numpy() for o in operands)))


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("i,i,i->", [(4,), (4,), (4,)]), ("ij,jk,kl", [(2, 3), (3, 4), (4, 5)]),
    ("ii", [(3, 3)]), ("ii->i", [(3, 3)]), ("bii->bi", [(2, 3, 3)]), ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]), ("...ij,...jk", [(1, 3, 4), (2, 4, 5)]),
    ("ij,ij,ij->ij", [(2, 3), (2, 3), (1, 3)]), ("Aij,jk", [(2, 3, 4), (4, 5)]), ("...Bj,jk", [(2, 3, 4), (4, 5)]),
])
def test_einsum_takes_any_number_of_operands_diagonals_and_size_one_broadcasts_as_numpy_does(subscripts, shapes):
    operands = [t(*s) for s in shapes]
    close(nbx.einsum(subscripts, *operands), np.einsum(subscripts, *(o.numpy() for o in operands)))


def test_einsum_takes_torchs_list_of_operands_and_its_oracle_does_too():
    a, b = t(2, 3), t(3, 4)
    close(nbx.einsum("ij,jk->ik", [a, b]), a.numpy() @ b.numpy())
    close(nbx.einsum("ij,jk->ik", (a, b)), nbx.oracle("einsum", "ij,jk->ik", [a, b]))


def test_einsum_refuses_mismatched_sizes_diagonals_and_operand_counts_by_name():
    with pytest.raises(ShapeError, match="index 'j' has sizes 3 and 4"):
        nbx.einsum("ij,jk->ik", t(2, 3), t(4, 5))
    with pytest.raises(ShapeError, match="repeats index 'i' over dims of sizes 2 and 3"):
        nbx.einsum("ii->i", t(2, 3))
    with pytest.raises(ArgumentError, match="2 terms for 3 operands"):
        nbx.einsum("ij,jk->ik", t(2, 3), t(3, 4), t(4, 5))
    with pytest.raises(ArgumentError, match="repeats an index or names one no operand has"):
        nbx.einsum("ij,jk->iz", t(2, 3), t(3, 4))


@pytest.mark.parametrize("ord", ["fro", 1, -1, math.inf, -math.inf, "nuc", 2, -2])
def test_matrix_norm_matches_numpy_for_every_order(ord):
    x = t(3, 4, 5)
    close(nbx.linalg.matrix_norm(x, ord=ord), np.linalg.norm(x.numpy(), ord=ord, axis=(-2, -1)), 1e-5)
    assert nbx.linalg.matrix_norm(x, ord=ord, keepdims=True).shape == (3, 1, 1)


def test_vector_norm_vecdot_and_matrix_transpose_are_in_linalg():
    x = t(4, 5)
    close(nbx.linalg.vector_norm(x, 2, dim=-1), np.linalg.norm(x.numpy(), axis=-1))
    close(nbx.linalg.vecdot(x, x), np.sum(x.numpy() ** 2, axis=-1), 1e-5)
    assert nbx.linalg.matrix_transpose(x).shape == (5, 4)


def test_solve_inv_and_cholesky_invert_a_positive_definite_matrix_on_the_cpu():
    a = t(5, 5).numpy().astype(np.float64)
    spd = nbx.asarray(a @ a.T + 5 * np.eye(5))
    rhs = t(5, 2, dtype="float64")
    close(nbx.linalg.solve(spd, rhs), np.linalg.solve(spd.numpy(), rhs.numpy()), 1e-10)
    close(nbx.linalg.solve(spd, rhs[:, 0]), np.linalg.solve(spd.numpy(), rhs.numpy()[:, 0]), 1e-10)
    close(nbx.linalg.inv(spd), np.linalg.inv(spd.numpy()), 1e-10)
    lower = nbx.linalg.cholesky(spd)
    close(nbx.matmul(lower, lower.mT), spd.numpy(), 1e-10)
    close(nbx.linalg.cholesky(spd, upper=True), np.linalg.cholesky(spd.numpy()).T, 1e-10)
    with pytest.raises(ArgumentError, match="linalg.cholesky"):
        nbx.linalg.cholesky(nbx.asarray(-np.eye(3)))
    with pytest.raises(ShapeError, match="square matrices"):
        nbx.linalg.inv(t(3, 4))


def test_the_factorisations_are_refused_by_name_off_the_cpu():
    pytest.importorskip("nbx.kernels")
    from nbx.core.device import backends
    if "interp" not in backends():
        pytest.skip("no interp device here (a GPU run)")
    x = nbx.asarray(np.eye(3, dtype=np.float32), device="interp")
    for fn in (nbx.linalg.inv, nbx.linalg.cholesky, lambda a: nbx.linalg.solve(a, a),
               lambda a: nbx.linalg.matrix_norm(a, ord="nuc")):
        with pytest.raises(NotSupportedError, match="runs on the CPU only"):
            fn(x)


def test_linear_with_an_int4_weight_is_linear_with_the_dequantized_weight():
    from nbx.core.quant import QuantizedTensor
    w = QuantizedTensor.quantize(rng.standard_normal((6, 64)), 32, "symmetric")
    x, b = t(3, 64), t(6)
    dense = w.dequantize().numpy().astype(np.float64)
    close(nbx.linear(x, w, b, activation="relu"), np.maximum(x.numpy() @ dense.T + b.numpy(), 0), 1e-5)
    with pytest.raises(ShapeError, match="in=64"):
        nbx.linear(t(3, 32), w)


def test_an_int4_weight_refuses_an_input_precision_it_would_ignore_and_a_mixed_gated_pair_by_name():
    from nbx.core.quant import QuantizedTensor
    w = QuantizedTensor.quantize(rng.standard_normal((6, 64)), 32)
    x = t(3, 64)
    close(nbx.linear(x, w, input_precision="ieee"), x.numpy() @ w.dequantize().numpy().astype(np.float64).T, 1e-5)
    with pytest.raises(NotSupportedError, match="input_precision='tf32' is not supported yet"):
        nbx.linear(x, w, input_precision="tf32")
    with pytest.raises(ArgumentError, match="bfloat16 operands take none"):
        nbx.linear(x.astype("bfloat16"), w, input_precision="ieee")
    up = QuantizedTensor.quantize(rng.standard_normal((6, 64)), 32)
    g, u = (q.dequantize().numpy().astype(np.float64) for q in (w, up))
    y = x.numpy() @ g.T
    close(nbx.gated_linear(x, w, up), y / (1 + np.exp(-y)) * (x.numpy() @ u.T), 1e-5)
    with pytest.raises(NotSupportedError, match="one int4 .* and one Tensor"):
        nbx.gated_linear(x, w, t(6, 64))
