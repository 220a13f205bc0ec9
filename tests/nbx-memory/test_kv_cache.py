"""The paged KV cache's bookkeeping (append, free and reuse, fork with copy on write, refusals, its
slab pricing) and a multi-sequence decode loop on the cpu against dense attention."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, IndexingError, NoDeviceFileError, OutOfMemoryError
from nbx.memory import slab
from nbx.memory.kv_cache import PagedKVCache, blocks_for, bytes_for

rng = np.random.default_rng(3)


def test_append_hands_out_slots_block_by_block_and_free_returns_the_blocks_for_reuse():
    cache = PagedKVCache(1, 2, 8, num_blocks=6, block_tokens=4)
    cache.add("a")
    np.testing.assert_array_equal(cache.append("a", 6), [0, 1, 2, 3, 4, 5])
    cache.add("b")
    np.testing.assert_array_equal(cache.append("b", 3), [8, 9, 10])
    np.testing.assert_array_equal(cache.append("a", 3), [6, 7, 12])  # a's third block is block 3
    assert cache.free_blocks == 2 and cache.length("a") == 9
    cache.free("a")
    assert cache.free_blocks == 5
    cache.add("c")
    np.testing.assert_array_equal(cache.append("c", 5), [0, 1, 2, 3, 4 * 1 + 0])  # blocks 0 and 1 again


def test_fork_shares_blocks_and_an_append_into_a_shared_partial_block_copies_it_first():
    cache = PagedKVCache(2, 1, 4, num_blocks=8, block_tokens=4)
    cache.add("p")
    slots = cache.append("p", 6)
    for layer in range(2):
        k = rng.standard_normal((6, 1, 4)).astype(np.float32)
        cache.write(layer, nbx.asarray(k), nbx.asarray(k + 1), slots)
    cache.fork("p", "child")
    assert cache.refs[0] == 2 and cache.refs[1] == 2
    child_slot = cache.append("child", 1)
    new_block = int(child_slot[0]) // 4
    assert new_block not in (0, 1) and cache.sequences["child"].blocks == [0, new_block]
    for layer in range(2):  # the copied block holds the parent's two tokens
        np.testing.assert_array_equal(cache.k[layer].numpy()[new_block, :2], cache.k[layer].numpy()[1, :2])
    assert cache.refs[1] == 1 and cache.refs[0] == 2
    np.testing.assert_array_equal(cache.append("p", 1), [6])  # the parent writes its own block in place


def test_a_full_cache_and_unknown_sequences_are_refused_by_name():
    cache = PagedKVCache(1, 1, 4, num_blocks=2, block_tokens=4)
    cache.add("a")
    cache.append("a", 8)
    with pytest.raises(OutOfMemoryError):
        cache.append("a", 1)
    assert cache.length("a") == 8
    with pytest.raises(IndexingError):
        cache.append("nobody", 1)
    with pytest.raises(ArgumentError):
        cache.add("a")
    with pytest.raises(NoDeviceFileError):  # the block size is a device-file fact; the cpu has no file
        PagedKVCache(1, 1, 4, num_blocks=2)


def test_the_slab_planner_prices_the_cache_at_its_bytes():
    cache = PagedKVCache(3, 2, 16, num_blocks=5, dtype=nbx.bfloat16, block_tokens=4, v_head_dim=8)
    assert cache.nbytes == bytes_for(3, 2, 16, 5, 4, nbx.bfloat16, 8) == 3 * 5 * 4 * 2 * 24 * 2
    events = cache.slab_events() + [("alloc", "activations", 1000, 256), ("free", "activations")]
    assert slab.live_peak(events) == cache.nbytes + 1000
    assert slab.greedy_by_size(events).extent >= cache.nbytes
    assert blocks_for(cache.nbytes, 3, 2, 16, 4, nbx.bfloat16, 8) == 5


def dense_attention(q, ks, vs):
    """q (Hq, 1, E) against the sequence's keys so far (S, Hk, E), GQA, on the cpu reference."""
    k = nbx.asarray(np.stack(ks).transpose(1, 0, 2))
    v = nbx.asarray(np.stack(vs).transpose(1, 0, 2))
    return nbx.scaled_dot_product_attention(nbx.asarray(q), k, v, enable_gqa=True).numpy()


def test_a_multi_sequence_decode_loop_with_a_fork_matches_dense_attention_at_every_step():
    cache = PagedKVCache(1, 2, 8, num_blocks=16, block_tokens=4)
    history = {}
    for seq, prompt in (("a", 5), ("b", 3)):
        cache.add(seq)
        k = rng.standard_normal((prompt, 2, 8)).astype(np.float32)
        v = rng.standard_normal((prompt, 2, 8)).astype(np.float32)
        cache.write(0, nbx.asarray(k), nbx.asarray(v), cache.append(seq, prompt))
        history[seq] = (list(k), list(v))
    for step in range(7):
        if step == 2:
            cache.fork("a", "a2")
            history["a2"] = (list(history["a"][0]), list(history["a"][1]))
        seqs = sorted(history)
        k = rng.standard_normal((len(seqs), 2, 8)).astype(np.float32)
        v = rng.standard_normal((len(seqs), 2, 8)).astype(np.float32)
        slots = np.concatenate([cache.append(s, 1) for s in seqs])
        cache.write(0, nbx.asarray(k), nbx.asarray(v), slots)
        q = rng.standard_normal((len(seqs), 1, 4, 8)).astype(np.float32)
        out = cache.attend(0, nbx.asarray(q), seqs).numpy()
        for b, s in enumerate(seqs):
            history[s][0].append(k[b])
            history[s][1].append(v[b])
            expected = dense_attention(q[b].transpose(1, 0, 2), *history[s])
            np.testing.assert_allclose(out[b].transpose(1, 0, 2), expected, rtol=1e-5, atol=1e-6)
    cache.free("a")
    assert cache.free_blocks == 16 - len({b for s in ("a2", "b") for b in cache.sequences[s].blocks})


def test_the_batch_tensors_are_shared_until_the_next_append():
    cache = PagedKVCache(1, 1, 4, num_blocks=4, block_tokens=4)
    cache.add("a")
    cache.append("a", 3)
    first = cache.batch(["a"])
    assert cache.batch(["a"]) is first
    cache.append("a", 2)
    table, lens, longest = cache.batch(["a"])
    assert longest == 5 and lens.numpy().tolist() == [5] and table.numpy().tolist() == [[0, 1]]
