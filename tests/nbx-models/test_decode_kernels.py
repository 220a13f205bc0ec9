"""The captured decode step's kernels: a layer of a Llama-style decoder is six ops (the norms ride in
the products, q is roped in the cache write), and the step's calls say so."""
from __future__ import annotations

import pytest

import nbx.core as nbx
from nbx import models
from nbx.models.writer import small_config

LAYER = ("linear", "rotary_kv_cache_write", "paged_attention", "linear", "gated_linear", "linear")


@pytest.fixture
def interp():
    from nbx.core.device import backends
    if "interp" not in backends():
        pytest.skip("the interp device is not registered (a GPU run: TRITON_INTERPRET is not 1)")
    return nbx.as_device("interp")


def test_a_decode_layer_is_six_ops_with_no_norm_and_no_rope_of_its_own(tmp_path, interp):
    folder = models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM", num_hidden_layers=1), seed=11)
    model = models.load(folder, device=interp)
    model.generate([1, 17, 42, 5], 2)
    assert model.last_decode == "graph"
    nodes, declared, calls = model.decode_step_kernels()
    assert nodes is None and declared > 0          # interp runs the step eagerly: no graph to count
    assert "rms_norm" not in calls and "rotary_embedding" not in calls
    first = calls.index("linear")
    assert calls[first:first + len(LAYER)] == LAYER
    assert calls[first + len(LAYER)] == "linear"   # the lm_head, its norm inside
