"""The decode loop's host work: each token one replay of the captured step and one small read.

On interp nbx.graph runs the captured step's function eagerly, so what the host does outside it
(the loop's own reads, uploads, synchronizations and ops) is what it does around a CUDA graph's
replay on a GPU. The tokens are held to the eager decode's, the cpu's and the float64 reference's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from model_checks import assert_greedy_matches, model_dtype
from model_reference import decoder_logits

import nbx.core as nbx
from nbx import models
from nbx.core import deferred_checks, dispatch
from nbx.models.writer import small_config

PROMPTS = [[1, 17, 42, 5, 99, 23, 64, 8], [3, 4, 5]]
NEW = 4


@dataclass
class HostWork:
    """What the host does outside a step's function (nbx.core.dispatch's observer), in order:
    ("op", name), ("read", nbytes), ("upload", nbytes), ("sync", device), ("token", row)."""
    events: list = field(default_factory=list)
    _depth: int = 0

    def record(self, op, fn, *args, **kwargs):
        if self._depth or deferred_checks.deferring():
            return fn(*args, **kwargs)
        self.events.append(("op", op))
        self._depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            self._depth -= 1

    def allocated(self, storage) -> None:
        pass

    def host_access(self, tensor, what: str) -> None:
        if not self._depth and not deferred_checks.deferring():
            self.events.append(("read" if what == "numpy()" else "upload", tensor.nbytes))

    def steps(self) -> list[list]:
        """The events before each step's first token (a step's tokens come one a row, together)."""
        out, current = [], []
        for event in self.events:
            if event[0] == "token":
                if current or not out:
                    out.append(current)
                current = []
            else:
                current.append(event)
        return out + [current]   # the last: what follows the generation's last token


@pytest.fixture(params=["interp", pytest.param("cuda", marks=pytest.mark.gpu)])
def stepping(request):
    """The devices whose decode steps are nbx.graph steps: interp (run eagerly) and cuda (graphs)."""
    return request.getfixturevalue("interp") if request.param == "interp" else nbx.as_device("cuda")


def test_each_decoded_token_costs_the_host_one_replay_and_one_small_read_and_the_tokens_are_the_eager_decodes(
        tmp_path, stepping, monkeypatch):
    device = stepping
    dtype = model_dtype(device)
    folder = models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM", num_hidden_layers=1), seed=11,
                                     dtype=dtype)
    model = models.load(folder, device=device)
    model.graph_decoding = False
    free = model.generate_batch(PROMPTS, NEW)
    assert model.last_decode == "eager"
    for prompt, tokens in zip(PROMPTS, free):
        assert_greedy_matches(tokens, decoder_logits(folder, prompt + tokens), len(prompt), dtype, device)
    if device.type == "interp":
        assert models.load(folder).generate_batch(PROMPTS, NEW) == free   # the cpu's numpy references
    # the second sequence stops at an EOS id mid-generation: the step's rows change once
    stops = [j for j in range(1, NEW - 1) if free[1][j] not in free[0] and free[1][j] not in free[1][:j]]
    assert stops, f"no token of the second sequence stops it alone: {free}"
    stop = stops[0]
    model.eos = (free[1][stop],)
    expected = [free[0], free[1][:stop + 1]]
    if device.type == "cuda":   # bfloat16 products of one row may round unlike those of two: decoded again
        expected = model.generate_batch(PROMPTS, NEW)
        assert len(expected[1]) == stop + 1 and len(expected[0]) == NEW

    model.graph_decoding = True
    work = HostWork()
    from nbx.core.device import get_backend
    backend = get_backend(device.type)
    synchronize = backend.synchronize
    monkeypatch.setattr(backend, "synchronize", lambda d: (work.events.append(("sync", str(d))), synchronize(d))[1])
    with dispatch.observed(work):
        got = model.generate_batch(PROMPTS, NEW, on_token=lambda row, token: work.events.append(("token", row)))
    assert model.last_decode == "graph"
    assert got == expected

    steps = work.steps()
    assert len(steps) == NEW + 1
    rows = [2] * (stop + 1) + [1] * (NEW - stop - 1)   # the rows decoding at each step
    # interp's eager stand-in copies the step's outputs (a GPU graph writes them): the one op it runs
    replay_ops = [("op", "copy_")] if device.type == "interp" else []
    for index, events in enumerate(steps[1:NEW], start=1):
        reads = [e for e in events if e[0] == "read"]
        assert reads == [("read", 8 * rows[index])], f"step {index}: one read of the next ids, got {events}"
        uploads = [e for e in events if e[0] == "upload"]
        if index > 1 and rows[index] == rows[index - 1]:
            assert uploads == [] and [e for e in events if e[0] != "read"] == replay_ops, f"step {index}: {events}"
        else:   # a batch's first step: its rows' state written once (and, after a graph's capture, once again);
            # its capture's warm-up may screen new launch keys, which synchronize
            assert 0 < len(uploads) <= 5 + 2 * (device.type == "cuda"), f"step {index}: {events}"
    assert [e for e in steps[NEW] if e[0] != "op"] == [("read", 8)], "after the last token: the int64 record, once"


def test_sampled_decoding_through_the_captured_step_draws_the_eager_decodes_tokens(tmp_path, interp):
    folder = models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM", num_hidden_layers=1), seed=5)
    model = models.load(folder, device=interp)
    model.graph_decoding = False
    eager = model.generate(PROMPTS[1], 3, temperature=0.8, top_k=20, seed=3)
    model.graph_decoding = True
    assert model.generate(PROMPTS[1], 3, temperature=0.8, top_k=20, seed=3) == eager
    assert model.last_decode == "graph"
