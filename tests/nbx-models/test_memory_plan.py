"""A generation's memory, priced by model.memory_plan before it runs, against the peak of the bytes
its device allocations asked for while it ran (interp: the Triton kernels' own outputs and
workspaces, in host memory; nbx.memory's pool reports the same figure, its requested peak, on GPUs)."""
from __future__ import annotations

import gc
import weakref

import pytest

import nbx.core as nbx
from nbx import models
from nbx.models.writer import small_config

PROMPT = list(range(3, 35))   # 32 tokens: the activations are a fifth of the tiny model's peak


class AllocationPeak:
    """Live and peak bytes of every storage the interp backend allocates while installed."""

    def __init__(self, backend):
        self.backend, self.live, self.peak = backend, 0, 0
        self._allocate = backend.allocate

    def allocate(self, nbytes, device):
        storage = self._allocate(nbytes, device)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._freed, nbytes)
        return storage

    def _freed(self, nbytes):
        self.live -= nbytes

    def reset_peak(self):
        self.peak = self.live


@pytest.fixture
def interp_peak(monkeypatch):
    from nbx.core.device import backends, get_backend
    if "interp" not in backends():
        pytest.skip("the interp device is not registered (a GPU run: TRITON_INTERPRET is not 1)")
    counter = AllocationPeak(get_backend("interp"))
    monkeypatch.setattr(counter.backend, "allocate", counter.allocate)
    return counter


def _priced_and_observed(tmp_path, counter, architecture, prompts, new, **config):
    folder = models.write_checkpoint(tmp_path / architecture, small_config(architecture, **config), seed=3)
    model = models.load(folder, device="interp")
    model.eos = ()   # random weights: every step runs
    plan = model.memory_plan([len(p) for p in prompts], new)
    assert counter.live == plan.weights, "the weights the plan counts are the storages the load allocated"
    counter.reset_peak()
    model.generate_batch(prompts, new)
    return plan, counter.peak


def test_a_generations_peak_on_interp_is_within_five_percent_of_what_memory_plan_priced(tmp_path, interp_peak):
    # Qwen3: the Llama path and q/k norms; two prompts packed in one prefill, then decode steps
    plan, peak = _priced_and_observed(tmp_path, interp_peak, "Qwen3ForCausalLM", [PROMPT, PROMPT[:5]], 2,
                                      num_hidden_layers=1)
    assert plan.activations > 0.2 * plan.total, "a tiny model whose activations weigh in the price"
    assert 0.95 * plan.total <= peak <= 1.05 * plan.total, (
        f"observed peak {peak} bytes against {plan.line()} ({plan.total} bytes): {peak / plan.total:.3f}x")


def test_int4_weights_are_priced_by_their_words_scales_and_minima(tmp_path, interp_peak):
    folder = models.write_checkpoint(tmp_path / "int4", small_config("LlamaForCausalLM", num_hidden_layers=1),
                                     seed=3, int4=(32, "asymmetric"))
    model = models.load(folder, device="interp")
    plan = model.memory_plan([len(PROMPT)], 2)
    assert interp_peak.live == plan.weights
    up = model.layers[0].up
    assert isinstance(up, nbx.QuantizedTensor)
    dense = models.load(models.write_checkpoint(tmp_path / "dense", small_config("LlamaForCausalLM",
                                                                                 num_hidden_layers=1), seed=3))
    assert plan.weights < dense.memory_plan([len(PROMPT)], 2).weights


def test_a_mixture_of_experts_model_is_not_priced_and_says_so(tmp_path):
    folder = models.write_checkpoint(tmp_path / "moe", small_config("MixtralForCausalLM", num_hidden_layers=1), seed=3)
    with pytest.raises(nbx.NotSupportedError, match="mixture-of-experts"):
        models.load(folder).memory_plan([4], 2)


def test_eager_decoding_holds_no_captured_steps_private_memory(tmp_path):
    model = models.load(models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM"), seed=3))
    model.generate(PROMPT[:4], 3)
    assert model.last_decode == "eager" and model.decode_graph_bytes() == 0


@pytest.mark.gpu
def test_a_warm_generation_on_the_gpu_peaks_within_five_percent_of_its_price(tmp_path):
    from nbx.memory.allocator import get_allocator
    cuda, allocator = nbx.as_device("cuda:0"), get_allocator("cuda")
    config = small_config("LlamaForCausalLM", hidden_size=512, intermediate_size=1536, num_attention_heads=8,
                          num_key_value_heads=2, num_hidden_layers=4, vocab_size=4096, max_position_embeddings=1024)
    folder = models.write_checkpoint(tmp_path / "m", config, seed=3, dtype="bfloat16")
    gc.collect()   # what earlier tests left for the collector goes now, not during the measured run
    before = allocator.stats(cuda).live_bytes
    model = models.load(folder, device=cuda)
    model.eos = ()
    prompts = [list(range(3, 259))]
    plan = model.memory_plan([256], 16)
    model.generate_batch(prompts, 16)   # kernels compiled and screened, decode steps captured
    allocator.reset_peak(cuda)
    model.generate_batch(prompts, 16)   # the kept cache, its captured steps replayed
    assert model.last_decode == "graph"
    peak = allocator.stats(cuda).peak_live_bytes - before
    assert 0.9 * plan.total <= peak <= 1.05 * plan.total, (
        f"peak {peak} bytes against {plan.line()} ({plan.total} bytes): {peak / plan.total:.3f}x")
