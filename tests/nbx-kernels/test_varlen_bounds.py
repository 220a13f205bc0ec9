"""varlen_attention's max_seqlen_q / max_seqlen_k (flash-attention's spelling): the launch sized by
the bounds, host memory checking them against the offsets, and a GPU (interp standing in for one)
reading no offset back, so a captured prefill step takes the offsets as inputs."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import ArgumentError, ShapeError
from nbx.core.ops.attention import AttentionOptions

rng = np.random.default_rng(37)
LENS_Q, LENS_K = [3, 0, 11, 1], [7, 2, 11, 5]


def operands(device):
    cu_q, cu_k = (nbx.asarray(np.concatenate([[0], np.cumsum(n)]), dtype=nbx.int32).to(device)
                  for n in (LENS_Q, LENS_K))
    q = nbx.asarray(rng.standard_normal((sum(LENS_Q), 4, 16)).astype(np.float32), dtype="bfloat16").to(device)
    k, v = (nbx.asarray(rng.standard_normal((sum(LENS_K), 2, 16)).astype(np.float32), dtype="bfloat16").to(device)
            for _ in range(2))
    return q, k, v, cu_q, cu_k


def test_bounds_above_the_longest_sequences_give_the_oracles_answer(device, check):
    q, k, v, cu_q, cu_k = operands(device)
    options = AttentionOptions(0.25, True, "bottom_right")
    expected = nbx.oracle("varlen_attention", q, k, v, cu_q, cu_k, None, options)
    for bounds in ((11, 11), (16, 40)):
        out = nbx.varlen_attention(q, k, v, cu_q, cu_k, is_causal=True, causal_alignment="bottom_right",
                                   max_seqlen_q=bounds[0], max_seqlen_k=bounds[1])
        check(out, expected, device)


@pytest.mark.parametrize("host", ["cpu", "interp"])
def test_host_memory_refuses_a_bound_below_the_longest_sequence_or_not_a_count(host):
    q, k, v, cu_q, cu_k = operands(nbx.as_device(host))
    with pytest.raises(ShapeError, match="max_seqlen_k"):
        nbx.varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=11, max_seqlen_k=10)
    with pytest.raises(ArgumentError):
        nbx.varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=-1, max_seqlen_k=11)


def test_given_both_bounds_a_gpu_reads_no_offset_back(device, check, monkeypatch):
    if device.type != "interp":
        pytest.skip("the interpreter stands in for a GPU whose tensors the host does not read")
    from nbx.core.ops import attention
    from nbx.core.tensor import Tensor
    q, k, v, cu_q, cu_k = operands(device)
    expected = nbx.oracle("varlen_attention", q, k, v, cu_q, cu_k, None, AttentionOptions(0.25, True))
    monkeypatch.setattr(attention, "_reads_offsets", lambda device: False)
    reads = []
    host_read = Tensor.numpy
    monkeypatch.setattr(Tensor, "numpy", lambda self, *a, **kw: reads.append(self.shape) or host_read(self, *a, **kw))
    out = nbx.varlen_attention(q, k, v, cu_q, cu_k, is_causal=True, max_seqlen_q=11, max_seqlen_k=11)
    assert reads == []
    nbx.varlen_attention(q, k, v, cu_q, cu_k, is_causal=True, max_seqlen_q=11)   # no k bound: the offsets read
    assert reads != []
    monkeypatch.undo()
    check(out, expected, device)


def prefill_step(q, k, v, cu_q, cu_k):
    return nbx.varlen_attention(q, k, v, cu_q, cu_k, is_causal=True, max_seqlen_q=16, max_seqlen_k=16)


def test_a_captured_prefill_step_takes_the_offsets_as_inputs_and_is_priced(device, check):
    q, k, v, cu_q, cu_k = operands(device)
    step = nbx.graph.capture(prefill_step, q, k, v, cu_q, cu_k)
    assert step.memory.unpriced == () and step.memory.declared.allocated == step.memory.requested
    swapped = [0, 11, 11, 14, 15]   # other lengths, the same packed totals and bounds
    cu_q2 = nbx.asarray(np.asarray(swapped), dtype=nbx.int32).to(device)
    out = step(q, k, v, cu_q2, cu_k)
    check(out, nbx.oracle("varlen_attention", q, k, v, cu_q2, cu_k, None, AttentionOptions(0.25, True)), device)
    step.close()
