"""The kernels spend all four words of a Philox counter and still draw nbx.core's stream bit for bit.

Element i of a draw is lane i % 4 of counter offset + i // 4 (randint: lanes 2h, 2h + 1 of counter
offset + i // 2); a program takes tiles.elementwise.block // 4 counters. These tests hold the kernel
to the host at the places the layout can slip: odd sizes that leave a counter part-used, offsets
that are not multiples of four and cross 2**32, program boundaries (tiny tiles), operands read
through strides, launches split inside a counter, and consecutive draws. randn on a GPU is held
within random_checks.NORMAL_ULPS instead: its log, cos and sin are not numpy's (the H200 failures
of the first run of these tests were this, 47 and 187 bytes of randn, not the layout).
"""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import NotSupportedError
from nbx.core.random import philox
from nbx.kernels.cost import price
from random_checks import assert_normals_agree, assert_same_bits

R = nbx.random
SEED = (0x1BD11BDA << 32) | 0xA9FC1A22
ODD_SIZES = [1, 3, 5, 4097]
OFFSETS = [7, 2**32 - 3]  # not multiples of four; the second carries into the counter's high word

rng = np.random.default_rng(11)


def on_both(draw, device, offset):
    """The draw from one generator state on the cpu and on the device; both generators must advance alike."""
    host_gen, dev_gen = nbx.Generator(SEED, offset), nbx.Generator(SEED, offset)
    host, there = draw(device="cpu", generator=host_gen), draw(device=device, generator=dev_gen)
    assert there.device == device and dev_gen.get_state() == host_gen.get_state()
    return there.numpy(), host.numpy(), host_gen.offset - offset


DRAWS = {
    "rand": (lambda n, **kw: nbx.rand(n, **kw), 4),
    "randn": (lambda n, **kw: nbx.randn(n, dtype="bfloat16", **kw), 4),
    "randint": (lambda n, **kw: R.randint(-7, 2**40, (n,), **kw), 2),
    "dropout_mask": (lambda n, **kw: R.dropout_mask((n,), 0.3, **kw), 4),
}


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.parametrize("op", list(DRAWS))
def test_odd_sizes_at_unaligned_offsets_give_the_hosts_bits_and_use_whole_counters(device, op, n, offset):
    draw, per_counter = DRAWS[op]
    got, expected, used = on_both(lambda **kw: draw(n, **kw), device, offset)
    (assert_normals_agree(got, expected, device) if op == "randn" else assert_same_bits(got, expected))
    assert used == -(-n // per_counter)


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")
@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("n", ODD_SIZES)
def test_dropout_of_odd_sizes_gives_the_hosts_bits(device, n, offset):
    x = nbx.asarray(rng.standard_normal(n), dtype="float16")
    got, expected, used = on_both(lambda device, **kw: R.dropout(x.to(device), 0.4, **kw), device, offset)
    assert_same_bits(got, expected)
    assert used == -(-n // 4)


@pytest.mark.parametrize("view", [
    lambda t: t.T,                    # transposed: 5 x 7 read column by column
    lambda t: t[::-2, 1:6:2],         # negative and step strides: 4 x 3
    lambda t: t[:, 3],                # one column: 7 elements 5 apart
])
def test_dropout_and_bernoulli_read_non_contiguous_operands_on_the_stream(device, view):
    base = nbx.asarray(rng.standard_normal((7, 5)), dtype="float32")
    probs = nbx.asarray(rng.random((7, 5)), dtype="float32")
    for make, source in ((lambda t, **kw: R.dropout(t, 0.5, **kw), base), (lambda t, **kw: R.bernoulli(t, **kw), probs)):
        host = make(view(source), generator=nbx.Generator(SEED, 2**32 - 1))
        there = make(view(source.to(device)), generator=nbx.Generator(SEED, 2**32 - 1))
        assert_same_bits(there.numpy(), host.numpy())


@pytest.mark.parametrize("shape", [(3, 3, 3, 3, 3), (2, 5, 1, 3, 7, 3)])
def test_a_draw_split_into_launches_that_start_inside_a_counter_gives_the_hosts_bits(device, shape):
    # reversed dims never merge: one launch per leading index, each of an odd number of elements,
    # so the launches after the first start on lane 1, 2 or 3 of a counter
    x = nbx.asarray(rng.standard_normal(shape), dtype="float32")
    dims = tuple(reversed(range(len(shape))))
    assert price("random.dropout", x.to(device).permute(*dims), 0.3).launches > 1
    for offset in OFFSETS:
        got = R.dropout(x.to(device).permute(*dims), 0.3, generator=nbx.Generator(SEED, offset)).numpy()
        assert_same_bits(got, R.dropout(x.permute(*dims), 0.3, generator=nbx.Generator(SEED, offset)).numpy())


def test_consecutive_draws_never_share_a_word_on_the_device(device):
    g = nbx.Generator(SEED, 2**32 - 2)
    first = nbx.rand(5, device=device, generator=g).numpy()    # counters +0, +1 (words 0-4)
    second = nbx.rand(3, device=device, generator=g).numpy()   # counter +2 (words 8-10)
    third = R.randint(0, 2**32, (3,), dtype="int64", device=device, generator=g).numpy()  # +3, +4
    assert g.offset == 2**32 - 2 + 5
    stream = philox.words(SEED, 2**32 - 2, 20)
    assert_same_bits(first, philox.uint32_to_unit_float(stream[:5]))
    assert_same_bits(second, philox.uint32_to_unit_float(stream[8:11]))
    assert third.tolist() == stream[12:18:2].astype(np.int64).tolist()  # the low words: the range is 2**32


@pytest.mark.parametrize("block", [4, 16, 64])
def test_every_power_of_two_tile_gives_the_same_bits_across_program_boundaries(device, monkeypatch, block):
    import nbx.kernels.random as random_kernels
    tiles = {"block": block, "num_warps": 1}
    monkeypatch.setattr(random_kernels.launch, "tiles", lambda family, dev: tiles)
    x = nbx.asarray(rng.standard_normal((9, 11)), dtype="bfloat16")
    for draw in (lambda **kw: nbx.rand(203, **kw), lambda **kw: R.randint(0, 1000, (101,), dtype="int16", **kw)):
        got, expected, _ = on_both(draw, device, 2**32 - 5)
        assert_same_bits(got, expected)
    got, expected, _ = on_both(lambda **kw: nbx.randn(203, **kw), device, 2**32 - 5)
    assert_normals_agree(got, expected, device)
    got = R.dropout(x.to(device).T, 0.2, generator=nbx.Generator(SEED, 3)).numpy()
    assert_same_bits(got, R.dropout(x.T, 0.2, generator=nbx.Generator(SEED, 3)).numpy())


@pytest.mark.parametrize("block", [2, 24])
def test_a_tile_that_is_not_a_power_of_two_of_at_least_four_words_is_refused(device, monkeypatch, block):
    import nbx.kernels.random as random_kernels
    monkeypatch.setattr(random_kernels.launch, "tiles", lambda family, dev: {"block": block, "num_warps": 1})
    with pytest.raises(NotSupportedError, match=f"power of two >= 4 .* the device file gives {block}"):
        nbx.rand(10, device=device, generator=nbx.Generator(0))


def test_the_wide_index_path_keeps_the_layout(device, monkeypatch):
    import nbx.kernels.random as random_kernels
    monkeypatch.setattr(random_kernels, "INT32_LIMIT", 0)  # every launch takes the int64 index path
    x = nbx.asarray(rng.standard_normal((3, 3, 3, 3, 3)), dtype="float32")
    got, expected, _ = on_both(lambda **kw: nbx.randn(1027, **kw), device, 2**32 - 3)
    assert_normals_agree(got, expected, device)
    got, expected, _ = on_both(lambda **kw: R.randint(-3, 3, (513,), **kw), device, 2**32 - 3)
    assert_same_bits(got, expected)
    got = R.dropout(x.to(device).permute(4, 3, 2, 1, 0), 0.3, generator=nbx.Generator(SEED, 5)).numpy()
    assert_same_bits(got, R.dropout(x.permute(4, 3, 2, 1, 0), 0.3, generator=nbx.Generator(SEED, 5)).numpy())
