"""The declared costs of varlen_attention, paged_attention and the two cache writes: what they
allocate (the plan's outputs and workspace: a captured decode step's memory is priced from them),
the bytes they move and their flops, on interp; the pool's measured peak on the H200."""
import math

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.ops.attention import AttentionOptions
from nbx.kernels.cost import price

rng = np.random.default_rng(31)


def on(device, a, dtype="float32"):
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return nbx.asarray(a.astype(np.int32)).to(device)
    return nbx.asarray(a.astype(np.float32), dtype=dtype).to(device)


def packed(device, lens_q, lens_k, hq=4, hk=2, e=16, ev=8, dtype="bfloat16"):
    cu_q, cu_k = (on(device, np.concatenate([[0], np.cumsum(n)])) for n in (lens_q, lens_k))
    q = on(device, rng.standard_normal((sum(lens_q), hq, e)), dtype)
    k = on(device, rng.standard_normal((sum(lens_k), hk, e)), dtype)
    v = on(device, rng.standard_normal((sum(lens_k), hk, ev)), dtype)
    return q, k, v, cu_q, cu_k


def paged_operands(device, lens, q_len, block_tokens=4, hq=4, hk=2, e=16, dtype="bfloat16"):
    need = [-(-n // block_tokens) for n in lens]
    blocks = sum(need) + 1
    table = np.zeros((len(lens), max(need)), np.int32)
    table[np.arange(max(need))[None, :] < np.asarray(need)[:, None]] = rng.permutation(sum(need))
    k = on(device, rng.standard_normal((blocks, block_tokens, hk, e)), dtype)
    v = on(device, rng.standard_normal((blocks, block_tokens, hk, e)), dtype)
    q = on(device, rng.standard_normal((len(lens), q_len, hq, e)), dtype)
    return q, k, v, on(device, table), on(device, lens)


def test_varlen_attention_declares_its_output_and_lse_and_counts_each_sequences_own_pairs(device):
    lens_q, lens_k = [3, 0, 9, 1], [5, 4, 9, 0]
    q, k, v, cu_q, cu_k = packed(device, lens_q, lens_k)
    options = AttentionOptions(0.25)
    cost = price("varlen_attention", q, k, v, cu_q, cu_k, None, options, True)
    out, lse = nbx.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True)
    assert [b.name for b in cost.buffers] == ["out", "lse"] and cost.outputs == out.nbytes + lse.nbytes
    pairs = sum(a * b for a, b in zip(lens_q, lens_k))
    assert cost.flops == 2 * 4 * pairs * (16 + 8)
    causal = price("varlen_attention", q, k, v, cu_q, cu_k, None, AttentionOptions(0.25, True), False)
    assert causal.flops * 2 == cost.flops and causal.outputs == out.nbytes


def test_paged_decode_declares_its_split_workspace_and_reads_each_kv_head_once(device):
    lens = [5, 23, 17]
    q, k, v, table, seq_lens = paged_operands(device, lens, 1)
    cost = price("paged_attention", q, k, v, table, seq_lens, is_causal=True, max_seq_len=23)
    out = nbx.paged_attention(q, k, v, table, seq_lens, is_causal=True, max_seq_len=23)
    assert cost.outputs == out.nbytes
    if device.type == "interp":   # interp's 4 decode programs over 3 x 2 groups: no split, one launch
        assert cost.launches == 1 and cost.allocated == out.nbytes
    kv_bytes = 3 * 2 * 23 * (16 + 16) * 2   # every sequence counted at max_seq_len
    assert cost.bytes_moved >= kv_bytes + 2 * out.nbytes
    assert cost.flops == 2 * 4 * 3 * 23 * 32


def test_a_split_paged_decode_declares_the_partials_it_allocates(device):
    q, k, v, table, seq_lens = paged_operands(device, [61], 2, hq=2, hk=1)   # one group: the keys split
    cost = price("paged_attention", q, k, v, table, seq_lens, is_causal=True, return_lse=True)
    out, lse = nbx.paged_attention(q, k, v, table, seq_lens, is_causal=True, return_lse=True)
    assert cost.outputs == out.nbytes + lse.nbytes
    if device.type == "interp":
        assert cost.launches == 2 and {b.name for b in cost.buffers} == {"out", "lse", "partials", "partial_lse"}
        assert cost.allocated > cost.outputs


def test_cache_writes_allocate_nothing_but_the_fused_writes_rotated_q(device):
    cache = [on(device, np.zeros((6, 4, 2, 16)), "bfloat16") for _ in range(2)]
    k, v = (on(device, rng.standard_normal((5, 2, 16)), "bfloat16") for _ in range(2))
    q = on(device, rng.standard_normal((5, 4, 16)), "bfloat16")
    cos, sin = nbx.rope_tables({"head_dim": 16, "rope_theta": 10000.0}, 32, dtype="bfloat16", device=device)
    slots, positions = on(device, [0, 1, 2, -1, 9]), on(device, [0, 1, 2, 3, 4])
    plain = price("kv_cache_write", k, v, *cache, slots)
    assert plain.buffers == () and plain.flops == 0 and plain.bytes_moved == 2 * (k.nbytes + v.nbytes) + slots.nbytes
    fused = price("rotary_kv_cache_write", k, v, cos, sin, positions, *cache, slots)
    assert fused.buffers == () and fused.bytes_moved > plain.bytes_moved
    with_q = price("rotary_kv_cache_write", k, v, cos, sin, positions, *cache, slots, q=q)
    rotated = nbx.rotary_kv_cache_write(k, v, cos, sin, positions, *cache, slots, q=q)
    assert with_q.outputs == rotated.nbytes and with_q.flops == 3 * (k.size + q.size)


def decode_step(q, k, v, cos, sin, positions, k_cache, v_cache, slots, table, seq_lens):
    """One layer's decode step: rope of q and k with the cache write, then paged attention."""
    q = nbx.rotary_kv_cache_write(k, v, cos, sin, positions, k_cache, v_cache, slots, q=q)
    return nbx.paged_attention(q.reshape(q.shape[0], 1, *q.shape[1:]), k_cache, v_cache, table, seq_lens,
                               is_causal=True, max_seq_len=16)


def test_a_captured_decode_step_is_priced_whole_by_the_declarations(device):
    lens = [9, 16]
    q, k_cache, v_cache, table, seq_lens = paged_operands(device, lens, 1)
    q = q.reshape(2, 4, 16)
    k, v = (on(device, rng.standard_normal((2, 2, 16)), "bfloat16") for _ in range(2))
    cos, sin = nbx.rope_tables({"head_dim": 16, "rope_theta": 10000.0}, 32, dtype="bfloat16", device=device)
    tab = table.numpy()
    slots = on(device, [tab[b, (n - 1) // 4] * 4 + (n - 1) % 4 for b, n in enumerate(lens)])
    positions = on(device, [n - 1 for n in lens])
    step = nbx.graph.capture(decode_step, q, k, v, cos, sin, positions, k_cache, v_cache, slots, table, seq_lens)
    memory = step.memory
    assert memory.calls == ("rotary_kv_cache_write", "paged_attention") and memory.unpriced == ()
    assert memory.declared.allocated == memory.requested
    step.close()


@pytest.mark.gpu
@pytest.mark.parametrize("batch,context,lse", [(1, 4097, True), (8, 2048, False), (64, 1000, False)])
def test_gpu_paged_decodes_declared_allocation_equals_the_pools_measured_peak(batch, context, lse):
    from test_kernel_costs import measured  # tests/gpu: the pool's peak over one call
    device = nbx.as_device("cuda")
    q, k, v, table, seq_lens = paged_operands(device, [context] * batch, 1, block_tokens=16, hq=32, hk=8, e=128)
    declared = price("paged_attention", q, k, v, table, seq_lens, is_causal=True, return_lse=lse, max_seq_len=context)
    peak, _ = measured(lambda: nbx.paged_attention(q, k, v, table, seq_lens, is_causal=True, return_lse=lse,
                                                   max_seq_len=context))
    assert declared.allocated == peak


@pytest.mark.gpu
def test_gpu_varlen_and_fused_write_declared_allocations_equal_the_pools_measured_peak():
    from test_kernel_costs import measured
    device = nbx.as_device("cuda")
    q, k, v, cu_q, cu_k = packed(device, [300, 0, 1000, 7], [300, 5, 1000, 7], hq=32, hk=8, e=128, ev=128)
    declared = price("varlen_attention", q, k, v, cu_q, cu_k, None, AttentionOptions(1 / math.sqrt(128), True), True)
    # the first launch of a key served a neighbour's setting screens it on its own small instance (its
    # buffers counted then); the declaration is of every call after it, the descriptors' scratch included
    assert "descriptor_scratch" in [b.name for b in declared.buffers]
    call = lambda: nbx.varlen_attention(q, k, v, cu_q, cu_k, is_causal=True, return_lse=True)  # noqa: E731
    call()
    peak, _ = measured(call)
    assert declared.allocated == peak
    cache = [on(device, np.zeros((64, 16, 8, 128)), "bfloat16") for _ in range(2)]
    kk, vv = (on(device, rng.standard_normal((64, 8, 128)), "bfloat16") for _ in range(2))
    qq = on(device, rng.standard_normal((64, 32, 128)), "bfloat16")
    cos, sin = nbx.rope_tables({"head_dim": 128, "rope_theta": 500000.0}, 4096, dtype="bfloat16", device=device)
    slots = positions = on(device, np.arange(64) * 7)
    declared = price("rotary_kv_cache_write", kk, vv, cos, sin, positions, *cache, slots, q=qq)
    write = lambda: nbx.rotary_kv_cache_write(kk, vv, cos, sin, positions, *cache, slots, q=qq)  # noqa: E731
    write()
    peak, _ = measured(write)
    assert declared.allocated == peak


def test_launches_that_make_descriptors_declare_the_scratch_their_launcher_asks_for(monkeypatch):
    """Triton's launcher asks nbx's allocator for a kernel's descriptors' global scratch at every launch
    (programs x descriptors x the device's descriptor_scratch_bytes, padded by as many bytes of alignment);
    a plan declares the largest launch's, and none where the device file has no such fact (interp)."""
    from nbx.core import device_files
    from nbx.kernels import plans
    device = nbx.as_device("interp")
    kernel = object()
    launches = (plans.Launch(kernel, (16, 8), (), {}, descriptors=2), plans.Launch(kernel, (4,), (), {}),
                plans.Launch(kernel, (100,), (), {}, descriptors=1))
    plan = plans.LaunchPlan(device, launches, (plans.output("out", (4, 4), nbx.float32),))
    assert [b.name for b in plan.buffers()] == ["out"]
    hopper = device_files.for_arch("sm_90")
    monkeypatch.setattr(device_files, "in_force", lambda dev=None: hopper)
    scratch = plan.buffers()[-1]
    assert (scratch.name, scratch.nbytes, scratch.lifetime) == ("descriptor_scratch", 16 * 8 * 2 * 128 + 128, "launch")
    assert plans.descriptor_scratch(plans.LaunchPlan(device, launches[1:2])) is None
