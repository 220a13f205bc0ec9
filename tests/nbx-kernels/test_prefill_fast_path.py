"""The ops of a prefill forward (linear, gated_linear, rotary_embedding, the cache writes,
paged_attention) check once a signature and repeat through their prepared plan; a changed layout,
dtype or option is a new signature, checked and still right."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import spec
from nbx.core.errors import IndexingError
from nbx.kernels.attention import rope
from nbx.kernels.matmul import epilogue

pytestmark = pytest.mark.usefixtures("fresh_signatures")
rng = np.random.default_rng(11)


@pytest.fixture
def fresh_signatures():
    spec.forget()
    yield
    spec.forget()


@pytest.fixture
def counts(monkeypatch):
    """counts[op]: how often op's check ran; counts["plans"]: the product and rope plans looked up."""
    found = {"plans": 0}

    def counting(op):
        s = spec.spec_of(op)
        check = s.check
        found[op] = 0

        def counted(call, facts):
            found[op] += 1
            return check(call, facts)
        monkeypatch.setattr(s, "check", counted)
    for op in ("linear", "gated_linear", "rotary_embedding", "rotary_kv_cache_write", "paged_attention"):
        counting(op)
    for module, name in ((epilogue, "launch_plan"), (rope, "rope_plan")):
        plan = getattr(module, name)

        def looked_up(*args, plan=plan, **kwargs):
            found["plans"] += 1
            return plan(*args, **kwargs)
        monkeypatch.setattr(module, name, looked_up)
    return found


def on(a, dtype="float32"):
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return nbx.asarray(a).to("interp")
    return nbx.asarray(a.astype(np.float32), dtype=dtype).to("interp")


def test_a_repeated_linear_with_a_residual_checks_and_plans_once_and_reads_each_calls_operands(counts, check):
    w, device = on(rng.standard_normal((24, 32))), nbx.as_device("interp")
    for _ in range(3):
        x, r = on(rng.standard_normal((5, 32))), on(rng.standard_normal((5, 24)))
        check(nbx.linear(x, w, residual=r), nbx.oracle("linear", x, w, None, None, r), device)
    assert (counts["linear"], counts["plans"]) == (1, 1)


def test_a_linear_of_a_new_layout_dtype_or_option_is_a_new_signature_and_still_right(counts, check):
    device = nbx.as_device("interp")
    x, w, b = rng.standard_normal((6, 32)), rng.standard_normal((16, 32)), rng.standard_normal(16)
    nbx.linear(on(x), on(w), on(b))
    xt = on(x.T.copy()).T                                         # a transposed view: other strides
    check(nbx.linear(xt, on(w), on(b)), nbx.oracle("linear", on(x), on(w), on(b)), device)
    half = nbx.linear(on(x, "bfloat16"), on(w, "bfloat16"), on(b, "bfloat16"))   # another dtype
    check(half, nbx.oracle("linear", on(x, "bfloat16"), on(w, "bfloat16"), on(b, "bfloat16")), device)
    gelu = nbx.linear(on(x), on(w), on(b), activation="gelu", alpha=0.5)           # other options
    check(gelu, nbx.oracle("linear", on(x), on(w), on(b), "gelu", None, 0.5), device)
    assert counts["linear"] == 4


def test_a_repeated_gated_linear_checks_once_and_a_misaligned_x_takes_the_full_path(counts, check):
    device = nbx.as_device("interp")
    gate, up = on(rng.standard_normal((20, 16))), on(rng.standard_normal((20, 16)))
    for _ in range(2):
        x = on(rng.standard_normal((4, 16)))
        check(nbx.gated_linear(x, gate, up), nbx.oracle("gated_linear", x, gate, up), device)
    assert (counts["gated_linear"], counts["plans"]) == (1, 1)
    a = rng.standard_normal(65)
    shifted = on(a)[1:].reshape(4, 16)                            # the signature's layout, 4 bytes off
    assert shifted.data_ptr() % 16
    check(nbx.gated_linear(shifted, gate, up), nbx.oracle("gated_linear", shifted, gate, up), device)
    assert counts["gated_linear"] == 1 and counts["plans"] == 2


def test_a_repeated_rope_of_a_qkv_view_checks_and_plans_once(counts, check):
    device = nbx.as_device("interp")
    cos, sin = nbx.rope_tables({"head_dim": 16, "max_position_embeddings": 64}, device="interp")
    for start in (0, 7):
        qkv = on(rng.standard_normal((5, 3 * 32)))
        q = qkv[:, :32].reshape(5, 2, 16)                         # a view, as the decoder's q is
        pos = on(np.arange(start, start + 5, dtype=np.int64))
        check(nbx.rotary_embedding(q, cos, sin, pos), nbx.oracle("rotary_embedding", q, cos, sin, pos), device)
    assert (counts["rotary_embedding"], counts["plans"]) == (1, 1)
    pos32 = on(np.arange(5, dtype=np.int32))                      # another positions dtype: a new signature
    check(nbx.rotary_embedding(q, cos, sin, pos32), nbx.oracle("rotary_embedding", q, cos, sin, pos32), device)
    assert counts["rotary_embedding"] == 2


def test_repeated_cache_writes_and_paged_attention_check_once_and_host_memory_still_checks_each_calls_slots(counts):
    cos, sin = nbx.rope_tables({"head_dim": 16, "max_position_embeddings": 64}, device="interp")
    k_cache, v_cache = on(np.zeros((4, 4, 2, 16))), on(np.zeros((4, 4, 2, 16)))
    k, v = on(rng.standard_normal((3, 2, 16))), on(rng.standard_normal((3, 2, 16)))
    pos = on(np.arange(3, dtype=np.int64))
    for slots in ([0, 1, 2], [5, 6, 7]):
        slots = on(np.array(slots, np.int64))
        expected = nbx.oracle("rotary_kv_cache_write", k, v, cos, sin, pos, k_cache, v_cache, slots)
        nbx.rotary_kv_cache_write(k, v, cos, sin, pos, k_cache, v_cache, slots)
        np.testing.assert_allclose(k_cache.numpy(), expected[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(v_cache.numpy(), expected[1])
    with pytest.raises(IndexingError):   # the same signature: its slots' values are checked all the same
        nbx.rotary_kv_cache_write(k, v, cos, sin, pos, k_cache, v_cache, on(np.array([0, 1, 99], np.int64)))
    assert counts["rotary_kv_cache_write"] == 1
    q = on(rng.standard_normal((3, 4, 16)))
    table, lens, cu = on(np.array([[0, 1]], np.int32)), on(np.array([3], np.int32)), on(np.array([0, 3], np.int32))
    for _ in range(2):
        out = nbx.paged_attention(q, k_cache, v_cache, table, lens, cu, is_causal=True, max_seq_len=3, max_q_len=3)
    assert counts["paged_attention"] == 1
    expected = nbx.oracle("paged_attention", q, k_cache, v_cache, table, lens, cu, None,
                          spec.spec_of("paged_attention").bind(q, k_cache, v_cache, table, lens, cu,
                                                               is_causal=True).options)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_the_gpu_repeats_of_paged_attention_and_the_fused_write_read_each_calls_tensors(counts, monkeypatch, check):
    """On a GPU nothing is read back, so a repeat is the prepared launcher alone: the interpreter
    stands in, with its host checks off, and each repeat's new tensors must be the ones read."""
    from nbx.core.ops import paged
    from nbx.kernels import attention
    monkeypatch.setattr(paged, "_host_checked", lambda *tensors: False)
    layouts, paged_layout = [], attention.paged_layout
    monkeypatch.setattr(attention, "paged_layout", lambda *a, **kw: layouts.append(1) or paged_layout(*a, **kw))
    device = nbx.as_device("interp")
    cos, sin = nbx.rope_tables({"head_dim": 16, "max_position_embeddings": 64}, device="interp")
    table, lens, cu = on(np.array([[1, 0]], np.int32)), on(np.array([6], np.int32)), on(np.array([0, 6], np.int32))
    slots = on(np.array([4, 5, 6, 7, 0, 1], np.int64))
    pos = on(np.arange(6, dtype=np.int64))
    options = spec.spec_of("paged_attention").bind(on(np.zeros((6, 4, 16))), on(np.zeros((2, 4, 2, 16))),
                                                   on(np.zeros((2, 4, 2, 16))), table, lens, cu, is_causal=True).options
    checks = counts["paged_attention"]
    for _ in range(3):
        k_cache, v_cache = on(np.zeros((2, 4, 2, 16))), on(np.zeros((2, 4, 2, 16)))   # a new cache each time
        k, v, q = (on(rng.standard_normal(s)) for s in ((6, 2, 16), (6, 2, 16), (6, 4, 16)))
        expected = nbx.oracle("rotary_kv_cache_write", k, v, cos, sin, pos, k_cache, v_cache, slots)
        nbx.rotary_kv_cache_write(k, v, cos, sin, pos, k_cache, v_cache, slots)
        np.testing.assert_allclose(k_cache.numpy(), expected[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(v_cache.numpy(), expected[1])
        out = nbx.paged_attention(q, k_cache, v_cache, table, lens, cu, is_causal=True, max_seq_len=6, max_q_len=6)
        check(out, nbx.oracle("paged_attention", q, k_cache, v_cache, table, lens, cu, None, options), device)
    assert (counts["rotary_kv_cache_write"], counts["paged_attention"] - checks, counts["plans"], len(layouts)) == \
        (1, 1, 1, 1)
