"""rotary_kv_cache_write with q: q and k rotated by one launch (the same positions and table rows),
k and v written to the cache's slots, the rotated q returned: against the float64 oracle and the
unfused rotary_embedding, in both layouts, at a partial rotary dim, with padding slots, on repeats."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import plans

rng = np.random.default_rng(19)
CONFIG = {"head_dim": 16, "max_position_embeddings": 64, "rope_theta": 10000.0}


def on(device, values, dtype=None):
    """values on device (floats as float32 unless dtype says; integers as they are)."""
    values = np.asarray(values)
    if dtype is not None or values.dtype.kind == "f":
        values = values.astype(nbx.as_dtype(dtype or "float32").host)
    return nbx.asarray(values, device=device)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_q_rotated_in_the_cache_write_equals_its_rotary_embedding_and_the_cache_is_the_same(
        device, check, interleaved, factor):
    cos, sin = nbx.rope_tables({**CONFIG, "partial_rotary_factor": factor}, interleaved=interleaved, device=device)
    k_cache, v_cache = on(device, np.zeros((4, 4, 2, 16)), "bfloat16"), on(device, np.zeros((4, 4, 2, 16)), "bfloat16")
    q = on(device, rng.standard_normal((6, 6, 16)), "bfloat16")
    k, v = on(device, rng.standard_normal((6, 2, 16)), "bfloat16"), on(device, rng.standard_normal((6, 2, 16)), "bfloat16")
    positions, slots = on(device, np.array([0, 5, 9, 63, 1, 2])), on(device, np.array([1, 4, 2, 15, -1, 8]))
    expected = nbx.oracle("rotary_kv_cache_write", k, v, cos, sin, positions, k_cache, v_cache, slots, interleaved, q)
    q_rot = nbx.rotary_kv_cache_write(k, v, cos, sin, positions, k_cache, v_cache, slots, interleaved, q=q)
    assert q_rot.shape == q.shape and q_rot.dtype == q.dtype
    check(q_rot, expected[2], device)                   # the padding token's q (slot -1) is rotated too
    alone = nbx.rotary_embedding(q, cos, sin, positions, interleaved)
    assert q_rot.numpy().tobytes() == alone.numpy().tobytes()
    check(k_cache, expected[0], device)
    np.testing.assert_array_equal(v_cache.numpy().view(np.uint16), expected[1].view(np.uint16))


def test_without_q_the_write_returns_nothing_and_repeats_rotate_each_calls_q(device, check):
    cos, sin = nbx.rope_tables(CONFIG, device=device)
    k_cache, v_cache = on(device, np.zeros((2, 4, 1, 16))), on(device, np.zeros((2, 4, 1, 16)))
    k, v = on(device, rng.standard_normal((3, 1, 16))), on(device, rng.standard_normal((3, 1, 16)))
    positions, slots = on(device, np.array([3, 4, 5])), on(device, np.array([0, 1, 2]))
    assert nbx.rotary_kv_cache_write(k, v, cos, sin, positions, k_cache, v_cache, slots) is None
    plans.reset()
    for _ in range(3):   # the first call plans, the repeats replay the prepared launch
        q = on(device, rng.standard_normal((3, 4, 16)))
        out = nbx.rotary_kv_cache_write(k, v, cos, sin, positions, k_cache, v_cache, slots, q=q)
        check(out, nbx.oracle("rotary_embedding", q, cos, sin, positions), device)


def test_a_q_of_other_tokens_a_head_dim_or_a_dtype_is_refused_by_name(device):
    cos, sin = nbx.rope_tables(CONFIG, device=device)
    k_cache, v_cache = on(device, np.zeros((2, 4, 1, 16))), on(device, np.zeros((2, 4, 1, 16)))
    k, v = on(device, np.zeros((3, 1, 16))), on(device, np.zeros((3, 1, 16)))
    positions, slots = on(device, np.array([3, 4, 5])), on(device, np.array([0, 1, 2]))
    for bad, error in ((on(device, np.zeros((2, 4, 16))), nbx.errors.ShapeError),
                       (on(device, np.zeros((3, 4, 8))), nbx.errors.ShapeError),
                       (on(device, np.zeros((3, 4, 16)), "bfloat16"), nbx.errors.DTypeError)):
        with pytest.raises(error, match="q"):
            nbx.rotary_kv_cache_write(k, v, cos, sin, positions, k_cache, v_cache, slots, q=bad)


def test_on_the_cpu_the_fused_q_is_rotary_embeddings_and_the_write_is_the_references():
    cos, sin = nbx.rope_tables(CONFIG, device="cpu")
    k_cache, v_cache = on("cpu", np.zeros((2, 4, 1, 16))), on("cpu", np.zeros((2, 4, 1, 16)))
    q, k, v = (on("cpu", rng.standard_normal(shape)) for shape in ((3, 2, 16), (3, 1, 16), (3, 1, 16)))
    positions, slots = on("cpu", np.array([3, 4, 5])), on("cpu", np.array([0, 1, 2]))
    out = nbx.rotary_kv_cache_write(k, v, cos, sin, positions, k_cache, v_cache, slots, q=q)
    assert out.numpy().tobytes() == nbx.rotary_embedding(q, cos, sin, positions).numpy().tobytes()
    kc, _ = nbx.oracle("rotary_kv_cache_write", k, v, cos, sin, positions, on("cpu", np.zeros((2, 4, 1, 16))),
                       v_cache, slots)
    np.testing.assert_allclose(k_cache.numpy(), kc, rtol=1e-6, atol=1e-6)
