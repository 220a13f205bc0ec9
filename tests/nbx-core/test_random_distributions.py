"""Statistics of the draws with fixed seeds.

Bounds are five standard errors of the statistic for n = 100_000 draws, so a correct generator
fails them with probability below 1e-6 per check, while a wrong map (a shifted mean, a halved
variance, a biased range) misses them by far:
  uniform mean   sd = sqrt(1/12 / n)                 = 0.00091   -> 0.0046
  uniform var    sd = sqrt((1/80 - 1/144) / n)       = 0.00024   -> 0.0012
  normal mean    sd = sqrt(1 / n)                    = 0.0032    -> 0.016
  normal var     sd = sqrt(2 / n)                    = 0.0045    -> 0.023
  a fraction f   sd = sqrt(f (1 - f) / n)            <= 0.0016   -> 0.008
  a count of 1/k sd = sqrt(n (1/k) (1 - 1/k))        (k = 10: 95) -> 475
"""
import numpy as np
import pytest

import nbx.core as nbx

R = nbx.random
N = 100_000


def _gen(seed=1234):
    return nbx.Generator(seed)


def test_rand_is_uniform_on_zero_one_in_mean_and_variance():
    u = nbx.rand(N, generator=_gen()).numpy().astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.0046
    assert abs(u.var() - 1 / 12) < 0.0012
    counts = np.bincount((u * 10).astype(int), minlength=10)
    assert np.all(np.abs(counts - N / 10) < 475)


def test_randn_is_standard_normal_in_mean_variance_and_one_sigma_mass():
    z = nbx.randn(N, generator=_gen()).numpy().astype(np.float64)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.016
    assert abs(z.var() - 1.0) < 0.023
    assert abs(np.mean(np.abs(z) < 1.0) - 0.682689) < 0.008
    assert np.abs(z).max() <= np.sqrt(-2 * np.log(np.float32(1e-7))) + 1e-5  # Box-Muller's floor


def test_normal_and_uniform_shift_and_scale_the_unit_draws():
    z = R.normal(3.0, 2.0, (N,), generator=_gen(5)).numpy().astype(np.float64)
    assert abs(z.mean() - 3.0) < 2 * 0.016 and abs(z.var() - 4.0) < 4 * 0.023
    u = R.uniform(-2.0, 6.0, (N,), generator=_gen(6)).numpy().astype(np.float64)
    assert u.min() >= -2.0 and u.max() <= 6.0
    assert abs(u.mean() - 2.0) < 8 * 0.0046 and abs(u.var() - 64 / 12) < 64 * 0.0012


def test_randint_stays_in_range_and_hits_every_value_evenly():
    v = nbx.randint(-3, 7, (N,), generator=_gen()).numpy()
    assert v.dtype == np.int64 and v.min() == -3 and v.max() == 6
    counts = np.bincount(v + 3, minlength=10)
    assert np.all(np.abs(counts - N / 10) < 475)


@pytest.mark.parametrize("dtype, low, high", [("int8", -128, 128), ("uint8", 0, 256), ("int16", 100, 103),
                                              ("int32", -2**31, 2**31), ("uint64", 2**64 - 5, 2**64),
                                              ("int64", -2**63, 2**63)])
def test_randint_serves_every_integer_dtype_over_its_full_range(dtype, low, high):
    v = nbx.randint(low, high, (20_000,), dtype=dtype, generator=_gen(8)).numpy()
    assert v.dtype == np.dtype(dtype)
    assert int(v.min()) >= low and int(v.max()) <= high - 1
    if high - low <= 256:  # a small range is covered entirely
        assert len(np.unique(v)) == high - low
    else:  # both halves of a wide range are reached
        middle = (low + high) // 2
        assert (v.astype(object) < middle).any() and (v.astype(object) >= middle).any()


def test_bernoulli_hits_with_probability_p_and_serves_a_tensor_of_probabilities():
    hits = R.bernoulli(0.3, (N,), generator=_gen()).numpy()
    assert hits.dtype == np.float32 and set(np.unique(hits)) == {0.0, 1.0}
    assert abs(hits.mean() - 0.3) < 0.008
    probs = nbx.asarray(np.tile(np.array([0.0, 1.0, 0.5], np.float32), N // 3))
    per = R.bernoulli(probs, generator=_gen(2), dtype="bool").numpy().reshape(-1, 3)
    assert not per[:, 0].any() and per[:, 1].all() and abs(per[:, 2].mean() - 0.5) < 0.008


def test_dropout_mask_keeps_the_fraction_one_minus_p():
    keep = R.dropout_mask((N,), 0.1, generator=_gen()).numpy()
    assert keep.dtype == np.bool_
    assert abs(keep.mean() - 0.9) < 0.008
    assert R.dropout_mask((1000,), 0.0, generator=_gen()).numpy().all()
    assert not R.dropout_mask((1000,), 1.0, generator=_gen()).numpy().any()


def test_dropout_zeroes_where_the_mask_drops_and_scales_the_rest_by_one_over_one_minus_p():
    x = nbx.randn(N, generator=_gen(3))
    p = 0.3
    out = R.dropout(x, p, generator=_gen(4)).numpy()
    keep = R.dropout_mask((N,), p, generator=_gen(4)).numpy()
    expected = np.where(keep, x.numpy() * np.float32(1 / (1 - p)), np.float32(0))
    assert out.tobytes() == expected.tobytes()
    assert abs(keep.mean() - 0.7) < 0.008
    assert abs(out.astype(np.float64).mean() - x.numpy().astype(np.float64).mean()) < 0.02  # E[out] = E[x]


def test_dropout_with_p_zero_returns_x_and_with_p_one_zeros():
    x = nbx.randn(1000, generator=_gen(3))
    assert R.dropout(x, 0.0, generator=_gen()).numpy().tobytes() == x.numpy().tobytes()
    assert not R.dropout(x, 1.0, generator=_gen()).numpy().any()


def test_dropout_of_a_half_tensor_keeps_its_dtype_and_shape():
    x = nbx.ones(4, 250, dtype="float16")
    out = R.dropout(x, 0.5, generator=_gen())
    assert out.dtype == nbx.float16 and out.shape == (4, 250)
    assert set(np.unique(out.numpy().astype(np.float32))) == {0.0, 2.0}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rand_in_a_narrow_float_stays_below_one_where_rounding_would_reach_it(dtype):
    f32 = nbx.rand(N, generator=_gen()).numpy()
    narrow = nbx.rand(N, dtype=dtype, generator=_gen()).numpy()
    host = np.dtype(narrow.dtype)
    assert (f32.astype(host) == 1).any()  # plain rounding would produce 1.0 here
    assert narrow.astype(np.float64).max() < 1.0
    below = f32.astype(host).astype(np.float64) < 1.0
    assert narrow[below].tobytes() == f32[below].astype(host).tobytes()  # elsewhere: the cast draw


def test_float64_draws_are_the_float32_draws_cast():
    a = nbx.randn(1000, dtype="float64", generator=_gen()).numpy()
    b = nbx.randn(1000, generator=_gen()).numpy()
    assert a.dtype == np.float64 and np.array_equal(a, b.astype(np.float64))
