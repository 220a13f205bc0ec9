"""Generators: a (seed, offset) pair names the numbers; each draw moves the offset past its counters."""
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
    # offset 1 is the stream of offset 0 moved by one counter
    assert _bits(nbx.rand(999, generator=nbx.Generator(42, 1))) == base[1:].tobytes()


@pytest.mark.parametrize("draw", [
    lambda g: nbx.rand(3, 5, generator=g),
    lambda g: nbx.randn((3, 5), generator=g),
    lambda g: nbx.randint(0, 7, (3, 5), generator=g),
    lambda g: R.uniform(-1, 1, (3, 5), generator=g),
    lambda g: R.normal(2, 3, (3, 5), generator=g),
    lambda g: R.bernoulli(0.5, (3, 5), generator=g),
    lambda g: R.dropout_mask((3, 5), 0.5, generator=g),
    lambda g: R.dropout(nbx.ones(3, 5), 0.5, generator=g),
])
def test_every_draw_advances_the_offset_by_the_counters_it_used(draw):
    g = nbx.Generator(9, 100)
    draw(g)
    assert g.offset == 115 and g.seed == 9


def test_consecutive_draws_are_the_stream_of_one_larger_draw():
    g = nbx.Generator(3)
    first, second = nbx.rand(2, 3, generator=g), nbx.rand(4, generator=g)
    whole = nbx.rand(10, generator=nbx.Generator(3)).numpy()
    assert first.numpy().reshape(-1).tobytes() + _bits(second) == whole.tobytes()


def test_element_i_of_a_draw_uses_counter_offset_plus_i_in_row_major_order():
    g = nbx.Generator(11, 2**40 - 3)  # crosses into the counter's high word
    got = nbx.rand(2, 4, generator=g).numpy()
    (word,) = philox.lanes(11, 2**40 - 3, 8, 1)
    assert got.reshape(-1).tobytes() == philox.uint32_to_unit_float(word).tobytes()


def test_state_round_trips_and_replays_the_stream():
    g = nbx.Generator(5)
    nbx.rand(17, generator=g)
    state = g.get_state()
    assert state == (5, 17)
    first = nbx.randn(8, generator=g)
    g.set_state(state)
    assert _bits(nbx.randn(8, generator=g)) == _bits(first)


def test_manual_seed_restarts_a_generator_at_counter_zero():
    g = nbx.Generator(1, 1234)
    assert g.manual_seed(77) is g and g.get_state() == (77, 0)


def test_the_default_generator_is_reseeded_by_nbx_manual_seed():
    nbx.manual_seed(2024)
    a = nbx.rand(16)
    assert R.default_generator().get_state() == (2024, 16)
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
    (lambda: nbx.rand(4, generator=nbx.Generator(0, 2**64 - 2)), ArgumentError, "has 2 counters left, the draw needs 4"),
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
    assert seen == [((2, 3), "randkernel", 99, 1000)] and g.offset == 1006
    assert np.all(out.numpy() == 0.25)
