"""The captured decode step's kernels: a layer of a Llama-style decoder is eight ops (q is roped in
the cache write; the norms keep their launches while decoder.NORM_FUSED_ROWS is 0), and the step's
calls say so; with the norms fused (NORM_FUSED_ROWS raised) it is six."""
from __future__ import annotations

from nbx import models
from nbx.models.writer import small_config

LAYER = ("rms_norm", "linear", "rotary_kv_cache_write", "paged_attention", "linear", "rms_norm", "gated_linear",
         "linear")
FUSED_LAYER = ("linear", "rotary_kv_cache_write", "paged_attention", "linear", "gated_linear", "linear")


def _decode_calls(tmp_path, device):
    folder = models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM", num_hidden_layers=1), seed=11)
    model = models.load(folder, device=device)
    model.generate([1, 17, 42, 5], 2)
    assert model.last_decode == "graph"
    nodes, declared, calls = model.decode_step_kernels()
    assert nodes is None and declared > 0          # interp runs the step eagerly: no graph to count
    assert "rotary_embedding" not in calls          # q is roped in the cache write's launch
    return calls


def test_a_decode_layer_is_eight_ops_with_q_roped_in_the_cache_write(tmp_path, interp):
    calls = _decode_calls(tmp_path, interp)
    first = calls.index("rms_norm")
    assert calls[first:first + len(LAYER)] == LAYER
    assert calls[first + len(LAYER):first + len(LAYER) + 2] == ("rms_norm", "linear")   # the final norm, the lm_head


def test_with_the_norms_fused_a_decode_layer_is_six_ops(tmp_path, interp, monkeypatch):
    from nbx.models import decoder
    monkeypatch.setattr(decoder, "NORM_FUSED_ROWS", 16)
    calls = _decode_calls(tmp_path, interp)
    assert "rms_norm" not in calls
    first = calls.index("linear")
    assert calls[first:first + len(FUSED_LAYER)] == FUSED_LAYER
    assert calls[first + len(FUSED_LAYER)] == "linear"   # the lm_head, its norm inside
