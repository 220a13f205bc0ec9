"""Generators: a (seed, offset) pair names the numbers; each draw moves the offset past its counters.

The stream: word j at counter `offset` is lane j % 4 of Philox(seed, offset + j // 4). Element i of
a draw takes word i (randint: words 2i, 2i + 1); a draw of n elements uses ceil(n / 4) counters.
"""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, CrossDeviceError, DTypeError, ShapeError
from nbx.core.random import philox

R = nbx.random


def _bits(t):
    return t.numpy().tobytes()


def _host_device(name: str) -> str:
    """A host-memory device type of its own, for the dispatch paths of non-cpu devices."""
    from nbx.core.cpu import HostMemoryBackend
    from nbx.core.device import register_backend
    register_backend(HostMemoryBackend(name))
    return name


def test_the_same_seed_and_offset_give_the_same_bits():
    a = nbx.rand(1000, generator=nbx.Generator(42, 7))
    b = nbx.rand(1000, generator=nbx.Generator(42, 7))
    assert _bits(a) == _bits(b)


def test_a_different_offset_or_seed_gives_different_numbers():
    base = nbx.rand(1000, generator=nbx.Generator(42, 0)).numpy()
    shifted = nbx.rand(1000, generator=nbx.Generator(42, 1)).numpy()
    reseeded = nbx.rand(1000, generator=nbx.Generator(43, 0)).numpy()
    assert np.mean(base == shifted) < 0.01 and np.mean(base == reseeded) < 0.01
    # offset 1 is the stream of offset 0 moved by one counter: four words
    assert _bits(nbx.rand(996, generator=nbx.Generator(42, 1))) == base[4:].tobytes()


@pytest.mark.parametrize("draw, counters", [
    (lambda g: nbx.rand(3, 5, generator=g), 4),           # 15 words: four counters, the last one part-used
    (lambda g: nbx.randn((3, 5), generator=g), 4),
    (lambda g: nbx.randint(0, 7, (3, 5), generator=g), 8),  # two words an element
    (lambda g: R.uniform(-1, 1, (3, 5), generator=g), 4),
    (lambda g: R.normal(2, 3, (3, 5), generator=g), 4),
    (lambda g: R.bernoulli(0.5, (3, 5), generator=g), 4),
    (lambda g: R.dropout_mask((3, 5), 0.5, generator=g), 4),
    (lambda g: R.dropout(nbx.ones(3, 5), 0.5, generator=g), 4),
    (lambda g: nbx.rand(0, generator=g), 0),
])
def test_every_draw_advances_the_offset_by_the_counters_it_used(draw, counters):
    g = nbx.Generator(9, 100)
    draw(g)
    assert g.offset == 100 + counters and g.seed == 9


@pytest.mark.parametrize("n", [1, 3, 4, 5, 4097])
def test_a_draw_of_n_elements_uses_n_over_four_counters_rounded_up(n):
    g = nbx.Generator(9, 2**32 - 1)
    nbx.randn(n, generator=g)
    nbx.rand(n, generator=g)
    assert g.offset == 2**32 - 1 + 2 * (-(-n // 4))
    R.randint(0, 3, (n,), generator=g)
    assert g.offset == 2**32 - 1 + 2 * (-(-n // 4)) + -(-n // 2)


def test_consecutive_draws_start_on_fresh_counters_and_never_share_a_word():
    g = nbx.Generator(3, 5)
    first, second, third = nbx.rand(2, 3, generator=g), nbx.rand(4, generator=g), nbx.rand(1, generator=g)
    whole = nbx.rand(20, generator=nbx.Generator(3, 5)).numpy()
    # counters 5, 6 (words 0-7, the last two unused), then 7 (words 8-11), then 8 (word 12)
    assert first.numpy().reshape(-1).tobytes() == whole[:6].tobytes()
    assert _bits(second) == whole[8:12].tobytes() and _bits(third) == whole[12:13].tobytes()


def test_element_i_of_a_draw_is_lane_i_mod_4_of_counter_offset_plus_i_over_4_in_row_major_order():
    g = nbx.Generator(11, 2**32 - 1)  # the second counter carries into the high word
    got = nbx.rand(2, 5, generator=g).numpy()
    lanes = np.stack(philox.lanes(11, 2**32 - 1, 3, 4), axis=1).reshape(-1)[:10]
    assert got.reshape(-1).tobytes() == philox.uint32_to_unit_float(lanes).tobytes()
    assert philox.words(11, 2**32 - 1, 10).tobytes() == lanes.tobytes()


def test_randint_element_i_takes_words_2i_and_2i_plus_1_as_the_low_and_high_halves():
    got = nbx.randint(0, 2**64, (5,), dtype="uint64", generator=nbx.Generator(11, 7)).numpy()
    words = philox.words(11, 7, 10).astype(np.uint64)
    assert got.tolist() == (words[0::2] | (words[1::2] << np.uint64(32))).tolist()


def test_randn_element_pairs_are_the_cosine_and_sine_of_one_pair_of_words():
    got = nbx.randn(7, generator=nbx.Generator(11, 7)).numpy()
    u = philox.uint32_to_unit_float(philox.words(11, 7, 8))
    radius = np.sqrt(np.float32(-2) * np.log(np.maximum(np.float32(1e-7), u[0::2])))
    theta = philox.TWO_PI * u[1::2]
    expected = np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=1).reshape(-1)[:7]
    assert got.tobytes() == expected.astype(np.float32).tobytes()


def test_state_round_trips_and_replays_the_stream():
    g = nbx.Generator(5)
    nbx.rand(17, generator=g)
    state = g.get_state()
    assert state == (5, 5)  # 17 words: five counters
    first = nbx.randn(8, generator=g)
    g.set_state(state)
    assert _bits(nbx.randn(8, generator=g)) == _bits(first)


def test_manual_seed_restarts_a_generator_at_counter_zero():
    g = nbx.Generator(1, 1234)
    assert g.manual_seed(77) is g and g.get_state() == (77, 0)


def test_the_default_generator_is_reseeded_by_nbx_manual_seed():
    nbx.manual_seed(2024)
    a = nbx.rand(16)
    assert R.default_generator().get_state() == (2024, 4)
    nbx.manual_seed(2024)
    assert _bits(nbx.rand(16)) == _bits(a)
    assert _bits(nbx.rand(16)) != _bits(a)


def test_a_negative_seed_is_its_uint64_twos_complement_as_in_triton():
    assert nbx.Generator(-1).seed == 2**64 - 1
    assert _bits(nbx.rand(8, generator=nbx.Generator(-5))) == _bits(nbx.rand(8, generator=nbx.Generator(2**64 - 5)))


def test_a_refused_draw_does_not_advance_the_offset():
    g = nbx.Generator(0, 10)
    with pytest.raises(ArgumentError, match="low < high"):
        nbx.randint(5, 5, (4,), generator=g)
    assert g.offset == 10


@pytest.mark.parametrize("call, error, message", [
    (lambda: nbx.Generator(2**64), ArgumentError, r"outside \[-2\*\*63, 2\*\*64\)"),
    (lambda: nbx.Generator(1.5), ArgumentError, "a seed is an integer"),
    (lambda: nbx.Generator(0, -1), ArgumentError, r"offset -1 is outside \[0, 2\*\*64\)"),
    (lambda: nbx.Generator(0).set_state(7), ArgumentError, r"a generator state is \(seed, offset\)"),
    (lambda: nbx.rand(12, generator=nbx.Generator(0, 2**64 - 2)), ArgumentError, "has 2 counters left, the draw needs 3"),
    (lambda: nbx.rand(4, generator="seed"), ArgumentError, "generator must be an nbx.core.random.Generator"),
    (lambda: nbx.rand(4, dtype="int32"), DTypeError, "rand draws floats, not int32"),
    (lambda: nbx.randn(4, dtype="bool"), DTypeError, "randn draws floats, not bool"),
    (lambda: nbx.randint(0, 4, (2,), dtype="float32"), DTypeError, "randint draws integers, not float32"),
    (lambda: nbx.randint(0, 300, (2,), dtype="int8"), ArgumentError, r"does not fit int8 \[-128, 127\]"),
    (lambda: nbx.randint(-1, 3, (2,), dtype="uint8"), ArgumentError, "does not fit uint8"),
    (lambda: nbx.randint(0.5, 3, (2,)), ArgumentError, "randint low is an integer"),
    (lambda: R.uniform(2.0, 1.0, (2,)), ArgumentError, "uniform needs low <= high"),
    (lambda: R.uniform(0.0, float("inf"), (2,)), ArgumentError, "uniform high must be finite"),
    (lambda: R.normal(0.0, -1.0, (2,)), ArgumentError, "normal needs std >= 0"),
    (lambda: R.bernoulli(1.5, (2,)), ArgumentError, r"bernoulli p must lie in \[0, 1\], got 1.5"),
    (lambda: R.bernoulli(0.5), ArgumentError, "bernoulli with a scalar p needs a shape"),
    (lambda: R.bernoulli(nbx.asarray([0.5, -0.1])), ArgumentError, r"probabilities must lie in \[0, 1\]"),
    (lambda: R.bernoulli(nbx.asarray([1, 0])), DTypeError, "bernoulli probabilities are floats"),
    (lambda: R.bernoulli(nbx.asarray([0.5, 0.5]), (3,)), ShapeError, r"do not broadcast to \(3,\)"),
    (lambda: R.bernoulli(0.5, (2,), dtype="complex64"), DTypeError, "bernoulli does not produce complex64"),
    (lambda: R.bernoulli(nbx.asarray([0.5]), device=_host_device("randother")), CrossDeviceError, "probabilities live on cpu"),
    (lambda: R.dropout_mask((2,), -0.1), ArgumentError, r"dropout_mask p must lie in \[0, 1\]"),
    (lambda: R.dropout(nbx.ones(3), float("nan")), ArgumentError, "dropout p must be finite"),
    (lambda: R.dropout(nbx.ones(3, dtype="int32"), 0.5), DTypeError, "dropout takes floating tensors, not int32"),
    (lambda: R.dropout([1.0, 2.0], 0.5), DTypeError, "dropout takes a tensor"),
])
def test_bad_arguments_are_refused_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_device_without_random_kernels_gets_the_host_bits_copied_over():
    on_device = R.normal(1.0, 2.0, (64,), device=_host_device("randhost"), generator=nbx.Generator(4))
    assert str(on_device.device) == "randhost"
    assert _bits(on_device) == _bits(R.normal(1.0, 2.0, (64,), generator=nbx.Generator(4)))


def test_a_registered_device_implementation_receives_the_seed_and_the_first_counter():
    from nbx.core.dispatch import register
    _host_device("randkernel")
    seen = []

    @register("random.rand", "randkernel")
    def fake_kernel(out, seed, offset):
        seen.append((out.shape, str(out.device), seed, offset))
        out._host_view()[...] = 0.25

    g = nbx.Generator(99, 1000)
    out = nbx.rand(2, 3, device="randkernel", generator=g)
    assert seen == [((2, 3), "randkernel", 99, 1000)] and g.offset == 1002
    assert np.all(out.numpy() == 0.25)
