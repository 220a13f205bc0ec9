"""Philox4x32-10 against Random123's known answers and against Triton's own tl.rand4x family.

The stream spends all four words of a counter: element i of a draw is lane i % 4 of counter
offset + i // 4, i.e. Triton's tl.rand4x / tl.randn4x of that counter (randint: lanes 2h, 2h + 1
of counter offset + i // 2 for element i, h = i % 2).
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.random import philox

# Known-answer vectors of the Random123 distribution (kat_vectors), philox4x32:
# (rounds, counter c0..c3, key k0 k1, expected four words). Copied into D. E. Shaw Research's
# fs123 unit test core123/ut/ut_philox.cpp, where they were read.
KAT = [
    (7, [0x00000000] * 4, [0x00000000] * 2, [0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48]),
    (7, [0xffffffff] * 4, [0xffffffff] * 2, [0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662]),
    (7, [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0],
     [0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a]),
    (10, [0x00000000] * 4, [0x00000000] * 2, [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
    (10, [0xffffffff] * 4, [0xffffffff] * 2, [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
    (10, [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0],
     [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]),
]


@pytest.mark.parametrize("rounds, counter, key, expected", KAT)
def test_philox4x32_reproduces_the_random123_known_answers(rounds, counter, key, expected):
    words = philox.philox4x32(*([c] for c in counter), *key, rounds=rounds)
    assert [int(w[0]) for w in words] == expected


def test_philox_is_vectorised_over_counters_with_the_same_answer_as_one_counter_at_a_time():
    counters = np.arange(1000, dtype=np.uint32) * np.uint32(2654435761)
    together = philox.philox4x32(counters, counters ^ np.uint32(1), counters >> np.uint32(3), counters, 7, 9)
    for i in (0, 1, 517, 999):
        alone = philox.philox4x32([counters[i]], [counters[i] ^ 1], [counters[i] >> 3], [counters[i]], 7, 9)
        assert [int(w[i]) for w in together] == [int(w[0]) for w in alone]


def test_the_stream_keys_philox_with_the_seed_halves_and_counts_in_the_low_then_high_word():
    seed, offset = (0xA4093822 << 32) | 0x299F31D0, (0x85A308D3 << 32) | 0x243F6A88
    w0, w1, w2, w3 = philox.lanes(seed, offset, 1, 4)
    expected = philox.philox4x32([0x243F6A88], [0x85A308D3], [0], [0], 0x299F31D0, 0xA4093822)
    assert [int(w0[0]), int(w1[0]), int(w2[0]), int(w3[0])] == [int(e[0]) for e in expected]


def test_words_map_to_floats_in_zero_one_as_triton_does_with_the_edges_exact():
    words = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE], np.uint32)
    got = philox.uint32_to_unit_float(words)
    top = np.float32(2.0 ** 31) * np.float32(4.6566127342e-10)  # int32 max rounds to 2**31 in fp32
    expected = np.array([0.0, np.float32(4.6566127342e-10), top, top, 0.0, np.float32(4.6566127342e-10)],
                        np.float32)
    assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()
    assert top < 1.0


def test_a_draw_splits_over_chunks_and_counters_without_changing_a_bit():
    count = philox.CHUNK_COUNTERS * 4 * 2 + 123  # words: two whole chunks of counters and a part
    whole = philox.uniform_stream(5, 77, count)
    pieces = np.concatenate([philox.uniform_stream(5, 77, 1000),  # 1000 words: counters 77 .. 326
                             philox.uniform_stream(5, 77 + 250, count - 1000)])
    assert whole.tobytes() == pieces.tobytes()


# ---- Triton's own generator, run by its interpreter in a child process ------------------------
KERNEL = textwrap.dedent('''
    import json, sys
    import numpy as np
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    # Hand the interpreter host pointers as they are (no torch-style copy-in/copy-out).
    interpreter.GridExecutor._init_args_hst = lambda self, args, kwargs: (args, kwargs)
    interpreter.GridExecutor._restore_args_dev = lambda self, *args: None

    class HostPointer:
        def __init__(self, array):
            self.array, self.dtype = array, str(array.dtype)
        def data_ptr(self):
            return self.array.ctypes.data

    @triton.jit
    def draws(lanes_ptr, rand_ptr, randn_ptr, randint_ptr, uniform_ptr, dropout_ptr, x_ptr,
              seed, offset, n, span, low_bits, u_span, u_low, p, keep_scale, BLOCK: tl.constexpr):
        # n counters; four elements each (randint two), stored at 4 * i + lane by plain strided stores
        i = tl.arange(0, BLOCK)
        mask = i < n
        c = offset + i.to(tl.int64)
        w0, w1, w2, w3 = tl.randint4x(seed, c)
        u0, u1, u2, u3 = tl.rand4x(seed, c)
        n0, n1, n2, n3 = tl.randn4x(seed, c)
        for lane, w, u, z in ((0, w0, u0, n0), (1, w1, u1, n1), (2, w2, u2, n2), (3, w3, u3, n3)):
            at = 4 * i + lane
            tl.store(lanes_ptr + at, w, mask=mask)
            tl.store(rand_ptr + at, u, mask=mask)
            tl.store(randn_ptr + at, z, mask=mask)
            tl.store(uniform_ptr + at, u * u_span + u_low, mask=mask)
            x = tl.load(x_ptr + at, mask=mask)
            tl.store(dropout_ptr + at, tl.where(u >= p, x * keep_scale, 0.0), mask=mask)
        for half, lo, hi in ((0, w0, w1), (1, w2, w3)):
            bits = lo.to(tl.uint64) | (hi.to(tl.uint64) << 32)
            value = bits % span.to(tl.uint64) + low_bits.to(tl.uint64)
            tl.store(randint_ptr + 2 * i + half, value.to(tl.int64, bitcast=True), mask=mask)

    a = json.loads(sys.argv[1])
    n = a["n"]
    out = {"lanes": np.zeros(4 * n, np.uint32), "rand": np.zeros(4 * n, np.float32),
           "randn": np.zeros(4 * n, np.float32), "randint": np.zeros(2 * n, np.int64),
           "uniform": np.zeros(4 * n, np.float32), "dropout": np.zeros(4 * n, np.float32)}
    x = np.load(a["x"])
    ptrs = [HostPointer(out[k]) for k in ("lanes", "rand", "randn", "randint", "uniform", "dropout")]
    draws[(1,)](*ptrs, HostPointer(x), a["seed"], a["offset"], n, a["span"], a["low_bits"],
                a["u_span"], a["u_low"], a["p"], a["keep_scale"], BLOCK=a["block"])
    np.savez(a["out"], **out)
''')


@pytest.fixture(scope="module")
def triton_draws(tmp_path_factory):
    pytest.importorskip("triton", reason="Triton is not installed: its interpreter cannot run here")
    folder = tmp_path_factory.mktemp("triton_random")
    n, p = 300, 0.25  # counters
    x = np.linspace(-3, 3, 4 * n).astype(np.float32)
    np.save(folder / "x.npy", x)
    (folder / "kernel.py").write_text(KERNEL)
    # a seed with both key halves set and counters that cross 2**32 (the high counter word)
    args = dict(n=n, block=512, seed=(0x1234567 << 32) | 0x89ABCDEF, offset=2**32 - 150,
                span=1000, low_bits=(-500) % 2**64, u_span=2.5, u_low=-1.25, p=p,
                keep_scale=1 / (1 - p), x=str(folder / "x.npy"), out=str(folder / "out.npz"))
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, str(folder / "kernel.py"), json.dumps(args)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return args, x, dict(np.load(folder / "out.npz"))


def _generator(args):
    return nbx.Generator(args["seed"], args["offset"])


def test_philox_words_equal_tritons_randint4x_bit_for_bit(triton_draws):
    args, _, got = triton_draws
    ours = np.stack(philox.lanes(args["seed"], args["offset"], args["n"], 4), axis=1)
    assert ours.tobytes() == got["lanes"].tobytes()
    assert philox.words(args["seed"], args["offset"], 4 * args["n"]).tobytes() == got["lanes"].tobytes()


def test_rand_equals_tritons_tl_rand4x_lanes_in_order_bit_for_bit(triton_draws):
    args, _, got = triton_draws
    assert nbx.rand(4 * args["n"], generator=_generator(args)).numpy().tobytes() == got["rand"].tobytes()
    g = _generator(args)  # an odd size: the first elements of the same lanes, the last counter part-used
    assert nbx.rand(4 * args["n"] - 3, generator=g).numpy().tobytes() == got["rand"][:-3].tobytes()
    assert g.offset == args["offset"] + args["n"]


def test_randn_equals_tritons_tl_randn4x_lanes_in_order_bit_for_bit_under_the_interpreter(triton_draws):
    args, _, got = triton_draws
    assert nbx.randn(4 * args["n"], generator=_generator(args)).numpy().tobytes() == got["randn"].tobytes()
    assert nbx.randn(4 * args["n"] - 1, generator=_generator(args)).numpy().tobytes() == got["randn"][:-1].tobytes()


def test_randint_follows_the_documented_uint64_recipe_a_kernel_computes(triton_draws):
    args, _, got = triton_draws
    g = _generator(args)
    ours = nbx.randint(-500, 500, (2 * args["n"],), generator=g).numpy()
    assert ours.tobytes() == got["randint"].tobytes() and g.offset == args["offset"] + args["n"]


def test_uniform_and_dropout_follow_the_documented_float32_recipes_a_kernel_computes(triton_draws):
    args, x, got = triton_draws
    ours = nbx.random.uniform(-1.25, 1.25, (4 * args["n"],), generator=_generator(args)).numpy()
    assert ours.tobytes() == got["uniform"].tobytes()
    dropped = nbx.random.dropout(nbx.asarray(x), args["p"], generator=_generator(args)).numpy()
    assert dropped.tobytes() == got["dropout"].tobytes()
