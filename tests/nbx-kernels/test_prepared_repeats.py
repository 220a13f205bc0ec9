"""A signature's repeats take the prepared path (nbx.core.spec): they compute what the first call does."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import spec

pytestmark = pytest.mark.usefixtures("fresh_signatures")


@pytest.fixture
def fresh_signatures():
    spec.forget()
    yield
    spec.forget()


def _on_interp(a):
    return nbx.asarray(np.asarray(a, np.float32)).to("interp")


def test_repeats_of_elementwise_ops_read_each_calls_operands_and_scalars():
    rng = np.random.default_rng(1)
    for _ in range(3):
        a, b, s = rng.standard_normal(33), rng.standard_normal(33), float(rng.standard_normal())
        np.testing.assert_allclose((_on_interp(a) + _on_interp(b)).numpy(), (a + b).astype(np.float32), rtol=1e-6)
        np.testing.assert_allclose((_on_interp(a) * s).numpy(), (a * s).astype(np.float32), rtol=1e-6)


def test_repeats_of_softmax_rms_norm_and_sum_match_the_cpu_and_take_a_new_eps_as_a_new_signature():
    rng = np.random.default_rng(2)
    w = rng.standard_normal(16)
    for eps in (1e-6, 1e-6, 0.5):
        x = rng.standard_normal((4, 16))
        cpu, dev = nbx.asarray(x.astype(np.float32)), _on_interp(x)
        for op in (lambda t: nbx.softmax(t, dim=-1), lambda t: nbx.sum(t, axis=1),
                   lambda t: nbx.rms_norm(t, (16,), nbx.asarray(w.astype(np.float32)).to(t.device), eps)):
            np.testing.assert_allclose(op(dev).numpy(), op(cpu).numpy(), rtol=2e-6, atol=1e-6)


def test_a_repeated_product_by_a_weight_whose_x_is_misaligned_still_gives_the_product():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((3, 16)).astype(np.float32), rng.standard_normal((8, 16)).astype(np.float32)
    weight = _on_interp(w)
    for _ in range(2):
        np.testing.assert_allclose((_on_interp(x) @ weight.T).numpy(), x @ w.T, rtol=1e-5, atol=1e-5)
    shifted = _on_interp(np.concatenate([np.zeros(1, np.float32), x.ravel()]))[1:].reshape(3, 16)
    assert shifted.data_ptr() % 16
    np.testing.assert_allclose((shifted @ weight.T).numpy(), x @ w.T, rtol=1e-5, atol=1e-5)
