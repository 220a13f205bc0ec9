"""The decoding step on the CPU: its filters, its draw from the Philox stream, its penalties."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, ShapeError

rng = np.random.default_rng(5)


def logits(rows=6, vocab=40):
    return nbx.asarray(rng.standard_normal((rows, vocab)).astype(np.float32) * 3)


def test_greedy_and_top_k_of_one_are_exactly_argmax():
    x = logits()
    expected = nbx.argmax(x, dim=-1).tolist()
    assert nbx.sample(x, temperature=0).tolist() == expected
    assert nbx.sample(x, top_k=1, generator=nbx.Generator(seed=3)).tolist() == expected


def test_the_same_seed_and_offset_give_the_same_tokens_and_the_draw_spends_rand_counters():
    x = logits(rows=9)
    g1, g2 = nbx.Generator(seed=11), nbx.Generator(seed=11)
    assert nbx.sample(x, top_p=0.9, generator=g1).tolist() == nbx.sample(x, top_p=0.9, generator=g2).tolist()
    assert g1.get_state() == (11, 3)  # ceil(9 / 4) counters, as nbx.rand(9)


def test_tokens_follow_the_filtered_distribution():
    vocab = 6
    row = np.log(np.array([0.4, 0.3, 0.15, 0.1, 0.04, 0.01], np.float32))
    x = nbx.asarray(np.tile(row, (4000, 1)))
    tokens = nbx.sample(x, top_p=0.8, generator=nbx.Generator(seed=2)).numpy()
    kept = np.array([0.4, 0.3, 0.15, 0, 0, 0]) / 0.85  # 0.4 + 0.3 < 0.8 <= 0.4 + 0.3 + 0.15
    freq = np.bincount(tokens, minlength=vocab) / tokens.size
    np.testing.assert_allclose(freq, kept, atol=0.03)
    tokens = nbx.sample(x, top_k=2, min_p=0.5, generator=nbx.Generator(seed=4)).numpy()
    assert set(np.unique(tokens)) <= {0, 1}
    assert set(np.unique(nbx.sample(x, min_p=0.5, generator=nbx.Generator(seed=4)).numpy())) == {0, 1}


def test_penalties_follow_ctrl_frequency_and_presence_rules():
    x = np.array([[2.0, -2.0, 1.0, 0.5]], np.float32)
    prev = nbx.asarray([[0, 1, 1, -1]])
    got = nbx.apply_penalties(nbx.asarray(x), prev, 2.0, 0.5, 0.25).numpy()
    np.testing.assert_allclose(got, [[2.0 / 2 - 0.5 - 0.25, -2.0 * 2 - 1.0 - 0.25, 1.0, 0.5]])
    # a large repetition penalty steers greedy decoding away from the seen token
    assert nbx.sample(nbx.asarray(x), temperature=0, previous=nbx.asarray([[0]]), repetition_penalty=4.0).item() == 2


def test_one_row_gives_a_0d_token_and_bad_arguments_are_refused():
    assert nbx.sample(logits(1)[0], generator=nbx.Generator(seed=1)).shape == ()
    with pytest.raises(ArgumentError):
        nbx.sample(logits(), top_p=1.5)
    with pytest.raises(ArgumentError):
        nbx.sample(logits(), top_k=0)
    with pytest.raises(ShapeError):
        nbx.sample(nbx.zeros(2, 3, 4))
    with pytest.raises(nbx.DTypeError):
        nbx.sample(nbx.zeros(2, 3, dtype=nbx.int32))
