"""The random kernels draw nbx.core's Philox stream: the same seed and offset give the host's bits.

Every draw on a kernel device is compared with the same draw on the cpu (the numpy implementation
of nbx.core.random). Bit for bit on interp for every op; on a GPU bit for bit for rand, randint,
uniform, bernoulli, dropout_mask and dropout, and randn/normal within the bound the GPU's log/cos
allow (NORMAL_ULPS, measured on the H200: see test_random_kernels_gpu.py).
"""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import DTypeError
from nbx.kernels.cost import price
from random_checks import NORMAL_ULPS, assert_normals_agree, assert_same_bits, float32_ulps

R = nbx.random
FLOATS = ["float16", "bfloat16", "float32", "float64"]
SHAPES = [(0,), (1,), (1023,), (3, 0, 2), (7, 3, 5), (2, 3, 4, 5, 6)]
SEED = (0xA4093822 << 32) | 0x299F31D0  # both key words set
OFFSET = 2**32 - 70                      # the counters of a draw (four elements each) cross into the high word
rng = np.random.default_rng(7)


def gen(seed=SEED, offset=OFFSET):
    return nbx.Generator(seed, offset)


def assert_normal_within_the_bound(got, expected, std):
    """normal = randn * std + mean: randn's GPU error (NORMAL_ULPS float32 ulps of |n| < 8) times std,
    plus one step of the output dtype where the two sides round apart."""
    step = np.abs(np.nextafter(expected, np.full_like(expected, np.inf)).astype(np.float64) - expected.astype(np.float64))
    difference = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    bound = std * NORMAL_ULPS * 2.0**-20 + step
    assert np.all(difference <= bound), f"normal differs by up to {difference.max():.3g} (over the bound at {np.argmax(difference > bound)})"


def both(draw, device, **kw):
    """The same draw from the same generator state on the cpu and on the device (numpy arrays)."""
    host = draw(device="cpu", generator=gen(**kw))
    there = draw(device=device, generator=gen(**kw))
    assert there.device == device and there.dtype is host.dtype and there.shape == host.shape
    return there.numpy(), host.numpy()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_rand_gives_the_hosts_bits_for_every_float_dtype_and_shape(device, dtype, shape):
    got, expected = both(lambda **kw: nbx.rand(*shape, dtype=dtype, **kw), device)
    assert_same_bits(got, expected)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_randn_gives_the_hosts_bits_on_interp_and_its_values_within_the_bound_on_a_gpu(device, dtype, shape):
    got, expected = both(lambda **kw: nbx.randn(*shape, dtype=dtype, **kw), device)
    assert_normals_agree(got, expected, device)


@pytest.mark.parametrize("dtype, low, high", [
    ("int8", -128, 128), ("int8", -5, 7), ("uint8", 0, 256), ("int16", -1000, 1001), ("uint16", 3, 60000),
    ("int32", -2**31, 2**31), ("uint32", 0, 2**32), ("int32", 7, 8),
    ("int64", -2**63, 2**63), ("int64", 2**40, 2**40 + 3), ("int64", -10**18, 3 * 10**18),
    ("uint64", 0, 2**64), ("uint64", 2**63 + 5, 2**64 - 7),
])
def test_randint_gives_the_hosts_bits_for_every_integer_dtype_and_range(device, dtype, low, high):
    for shape in [(0,), (1,), (5, 7, 3), (1031,)]:
        got, expected = both(lambda **kw: R.randint(low, high, shape, dtype=dtype, **kw), device)
        assert_same_bits(got, expected)
        assert got.size == 0 or (int(got.min()) >= low and int(got.max()) < high)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("low, high", [(-3.7, 11.2), (0.1, 0.1), (1e4, 1e4 + 1.0)])
def test_uniform_gives_the_hosts_bits_with_the_product_and_sum_rounded_apart(device, dtype, low, high):
    got, expected = both(lambda **kw: R.uniform(low, high, (9, 119), dtype=dtype, **kw), device)
    assert_same_bits(got, expected)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mean, std", [(1.5, 0.3), (-2.0, 0.0), (1e3, 7.0)])
def test_normal_gives_the_hosts_bits_on_interp_and_its_values_within_the_bound_on_a_gpu(device, dtype, mean, std):
    got, expected = both(lambda **kw: R.normal(mean, std, (9, 119), dtype=dtype, **kw), device)
    if device.type == "interp" or std == 0.0:
        assert_same_bits(got, expected)
    else:
        assert_normal_within_the_bound(got, expected, std)


@pytest.mark.parametrize("dtype", ["bool", "float32", "float16", "bfloat16", "float64", "int8", "uint64",
                                   "float8_e4m3fn"])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_bernoulli_with_a_scalar_p_gives_the_hosts_bits_in_every_real_dtype(device, dtype, p):
    got, expected = both(lambda **kw: R.bernoulli(p, (13, 81), dtype=dtype, **kw), device)
    assert_same_bits(got, expected)


@pytest.mark.parametrize("p_dtype", FLOATS)
def test_bernoulli_reads_broadcast_transposed_and_strided_probabilities_in_place(device, p_dtype):
    base_cpu = nbx.asarray(rng.random((9, 5)), dtype=p_dtype)
    base_dev = base_cpu.to(device)
    cases = [(lambda t: t[:, :1], (9, 5)),                   # broadcast along the last dim
             (lambda t: t.permute(1, 0), None),               # transposed, not contiguous
             (lambda t: t[::-2, 1], (3, 5)),                  # negative stride, broadcast to a new leading dim
             (lambda t: t.reshape(3, 3, 5)[None, :, :, None, :, None], (2, 3, 3, 4, 5, 3))]  # five dims left
    for view, shape in cases:
        host = R.bernoulli(view(base_cpu), shape, generator=gen())
        there = R.bernoulli(view(base_dev), shape, generator=gen())
        assert there.device == device
        assert_same_bits(there.numpy(), host.numpy())


@pytest.mark.parametrize("dtype", ["bool", "float32", "uint8", "bfloat16"])
@pytest.mark.parametrize("p", [0.0, 0.25, 1.0])
def test_dropout_mask_gives_the_hosts_bits(device, dtype, p):
    got, expected = both(lambda **kw: R.dropout_mask((6, 173), p, dtype=dtype, **kw), device)
    assert_same_bits(got, expected)


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")  # the host's inf * 0 at p = 1
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [0.0, 0.5, 0.9, 1.0])
def test_dropout_of_non_contiguous_inputs_gives_the_hosts_bits(device, dtype, p):
    base = rng.standard_normal((6, 10, 4)).astype(np.float32)
    base[0, 0, :3] = [np.inf, -np.inf, np.nan]
    base[1, 1, 0] = -0.0
    x_cpu = nbx.asarray(base, dtype=dtype)
    x_dev = x_cpu.to(device)
    views = [lambda t: t, lambda t: t.permute(2, 0, 1), lambda t: t[::-1, 1:9:3], lambda t: t[:, 0]]
    for view in views:
        host = R.dropout(view(x_cpu), p, generator=gen())
        there = R.dropout(view(x_dev), p, generator=gen())
        assert there.device == device and there.shape == host.shape
        assert_same_bits(there.numpy(), host.numpy())


def test_dropout_of_a_layout_that_keeps_five_dims_is_read_in_place_by_one_launch_per_leading_index(device):
    x = nbx.asarray(rng.standard_normal((2, 3, 2, 3, 5)), dtype="float32")
    reversed_cpu, reversed_dev = (t.permute(4, 3, 2, 1, 0) for t in (x, x.to(device)))  # no two dims merge
    assert_same_bits(R.dropout(reversed_dev, 0.3, generator=gen()).numpy(),
                     R.dropout(reversed_cpu, 0.3, generator=gen()).numpy())
    cost = price("random.dropout", reversed_dev, 0.3)
    assert cost.launches == 5 and cost.allocated == x.nbytes
    assert price("random.dropout", x.to(device).transpose(0, 4), 0.3).launches == 1


def test_consecutive_draws_advance_the_generator_exactly_as_on_the_host(device):
    host_gen, dev_gen = gen(), gen()
    x = nbx.asarray(rng.standard_normal((4, 33)), dtype="float32")
    draws = [lambda g, d: nbx.rand(5, 7, generator=g, device=d),
             lambda g, d: nbx.randn(33, generator=g, device=d),
             lambda g, d: R.randint(-3, 1000, (2, 50), generator=g, device=d),
             lambda g, d: R.uniform(0.5, 2.5, (0,), generator=g, device=d),
             lambda g, d: R.dropout(x.to(d).transpose(0, 1), 0.4, generator=g),
             lambda g, d: R.bernoulli(0.5, (1025,), generator=g, device=d),
             lambda g, d: nbx.rand(3, generator=g, device=d)]
    for i, draw in enumerate(draws):
        host, there = draw(host_gen, "cpu"), draw(dev_gen, device)
        assert dev_gen.get_state() == host_gen.get_state()
        if i == 1:  # randn
            assert_normals_agree(there.numpy(), host.numpy(), device)
        else:
            assert_same_bits(there.numpy(), host.numpy())
    # counters: ceil(n / 4) a draw, ceil(n / 2) for randint's two words an element
    assert dev_gen.offset == OFFSET + 9 + 9 + 50 + 0 + 33 + 257 + 1


@pytest.mark.parametrize("seed", [0, 1, 2**31, 2**32 - 1, 2**63 + 12345, 2**64 - 1, -1])
def test_every_seed_keys_the_same_stream_as_on_the_host(device, seed):
    got, expected = both(lambda **kw: nbx.rand(2, 600, **kw), device, seed=seed, offset=2**64 - 300 - 7)  # 300 counters
    assert_same_bits(got, expected)


def test_indices_and_counters_past_int32_take_the_wide_path_with_the_same_bits(device, monkeypatch):
    import nbx.kernels.random as random_kernels
    monkeypatch.setattr(random_kernels, "INT32_LIMIT", 0)  # every launch takes the int64 index path
    x = nbx.asarray(rng.standard_normal((40, 30)), dtype="bfloat16")
    got, expected = both(lambda **kw: nbx.rand(3000, **kw), device)
    assert_same_bits(got, expected)
    assert_same_bits(R.dropout(x.to(device).T, 0.5, generator=gen()).numpy(),
                     R.dropout(x.T, 0.5, generator=gen()).numpy())


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_draws_give_the_hosts_bits_including_where_the_values_overflow(device, dtype):
    for draw in [lambda **kw: nbx.rand(301, dtype=dtype, **kw), lambda **kw: nbx.randn(301, dtype=dtype, **kw),
                 lambda **kw: R.uniform(-1e5, 1e5, (301,), dtype=dtype, **kw),
                 lambda **kw: R.normal(0.0, 1e4, (301,), dtype=dtype, **kw)]:
        got, expected = both(draw, device)
        assert_same_bits(got, expected)
    x = nbx.asarray(rng.uniform(-440, 440, 301), dtype=dtype)
    assert_same_bits(R.dropout(x.to(device), 0.2, generator=gen()).numpy(), R.dropout(x, 0.2, generator=gen()).numpy())
    assert any("drawn on the host" in note for note in price("random.uniform", 0.0, 1.0, (4,), dtype=dtype).notes)


def test_the_declared_cost_counts_the_output_and_what_the_draw_reads(device):
    assert price("random.rand", 4, 8, dtype="float16").allocated == 64
    assert price("random.rand", (4, 8)).bytes_moved == 128
    assert price("random.randint", 0, 10, (3, 5), dtype="int16").allocated == 30
    assert price("random.dropout_mask", (10,), 0.5).allocated == 10
    x = nbx.ones((6, 7), dtype="bfloat16").to(device)
    cost = price("random.dropout", x.T, 0.1)
    assert cost.allocated == x.nbytes and cost.bytes_moved == 2 * x.nbytes and cost.flops == 3 * 42
    p = nbx.full((6, 1), 0.5, dtype="float64").to(device)
    assert price("random.bernoulli", p, (6, 7)).bytes_moved == p.nbytes + 42 * 4
    assert price("random.randn", 10).flops == 70 and "Philox" in price("random.randn", 10).notes[0]


@pytest.mark.parametrize("op", ["rand", "randn", "randint", "uniform", "normal", "bernoulli", "dropout_mask", "dropout"])
def test_every_draw_has_a_kernel_on_the_kernel_devices(device, op):
    from nbx.core.dispatch import has_implementation
    assert has_implementation(f"random.{op}", device.type)


@pytest.mark.parametrize("call, error, message", [
    (lambda d: nbx.rand(3, dtype="int32", device=d), DTypeError, "rand draws floats, not int32"),
    (lambda d: R.randint(0, 4, (2,), dtype="bfloat16", device=d), DTypeError, "randint draws integers, not bfloat16"),
    (lambda d: R.bernoulli(0.5, (2,), dtype="complex64", device=d), DTypeError, "bernoulli does not produce complex64"),
    (lambda d: R.dropout(nbx.ones(3, dtype="int8").to(d), 0.5), DTypeError, "dropout takes floating tensors"),
])
def test_draws_the_kernels_cannot_serve_are_refused_by_name_on_kernel_devices(device, call, error, message):
    with pytest.raises(error, match=message):
        call(device)


# ---- on a GPU at realistic sizes (marked gpu): millions of draws, a transposed matrix, int64 indices ----
BIG = 1 << 22
BIG_OFFSET = 2**32 - BIG // 8  # BIG // 4 counters a draw: they cross into the high word halfway


def big_gen(offset=BIG_OFFSET):
    return nbx.Generator(SEED, offset)


def on_both(draw):
    """One draw on the cpu and on cuda from the same state (numpy arrays)."""
    host, there = draw(device="cpu", generator=big_gen()), draw(device="cuda", generator=big_gen())
    assert there.device.type == "cuda"
    return there.numpy(), host.numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_millions_of_rand_uniform_bernoulli_and_mask_draws_are_the_hosts_bits(dtype):
    for draw in [lambda **kw: nbx.rand(BIG, dtype=dtype, **kw),
                 lambda **kw: R.uniform(-3.7, 11.2, (BIG,), dtype=dtype, **kw),  # unfused: the host's rounding
                 lambda **kw: R.bernoulli(0.3, (BIG,), dtype=dtype, **kw),
                 lambda **kw: R.dropout_mask((BIG,), 0.1, dtype=dtype, **kw)]:
        assert_same_bits(*on_both(draw))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, low, high", [("int64", -2**63, 2**63), ("int32", -7, 1000), ("uint8", 0, 256),
                                              ("uint64", 3, 2**64 - 5)])
def test_millions_of_randint_draws_are_the_hosts_bits(dtype, low, high):
    assert_same_bits(*on_both(lambda **kw: R.randint(low, high, (BIG,), dtype=dtype, **kw)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_dropout_of_a_transposed_matrix_is_the_hosts_bits(dtype):
    x = nbx.randn(2048, 1024, dtype=dtype, device="cuda", generator=nbx.Generator(3))
    host = R.dropout(x.to("cpu").T, 0.1, generator=big_gen())
    there = R.dropout(x.T, 0.1, generator=big_gen())
    assert_same_bits(there.numpy(), host.numpy())


@pytest.mark.gpu
def test_randn_and_normal_on_the_gpu_stay_within_the_bound_measured_on_the_h200():
    got, expected = on_both(lambda **kw: nbx.randn(BIG, **kw))
    ulps = float32_ulps(got, expected)
    equal = float(np.mean(ulps == 0))
    print(f"randn float32 on the GPU: {equal:.1%} bit-equal, worst {int(ulps.max())} ulp, "
          f"largest difference {float(np.abs(got - expected).max()):.3g}")
    assert ulps.max() <= NORMAL_ULPS and equal > 0.5
    for dtype in ("float32", "bfloat16"):
        got, expected = on_both(lambda **kw: R.normal(2.0, 3.0, (BIG,), dtype=dtype, **kw))
        assert_normal_within_the_bound(got, expected, 3.0)


@pytest.mark.gpu
def test_a_draw_past_two_to_the_31_elements_takes_int64_indices_and_keeps_the_stream():
    n = 2**31 + 3000
    mask = R.dropout_mask((n,), 0.5, device="cuda", generator=big_gen(offset=5))
    for start in (0, 2**31 - 1500, n - 2000):  # multiples of four: element start is lane 0 of counter start // 4
        part = mask[start:start + 2000].numpy()
        assert_same_bits(part, R.dropout_mask((2000,), 0.5, generator=big_gen(offset=5 + start // 4)).numpy())


@pytest.mark.gpu
def test_an_operand_spanning_past_int32_offsets_is_read_in_place():
    big = nbx.rand(2**31 + 2**20, dtype="float16", device="cuda", generator=nbx.Generator(11))
    spread = big[::2**20]  # 2049 elements, the last past element 2**31
    host = R.dropout(spread.to("cpu"), 0.25, generator=big_gen())
    assert_same_bits(R.dropout(spread, 0.25, generator=big_gen()).numpy(), host.numpy())
    tail = nbx.rand(8, dtype="float16", generator=nbx.Generator(11, (2**31 + 2**20 - 8) // 4))  # the last two counters
    assert_same_bits(big[-8:].numpy(), tail.numpy())
