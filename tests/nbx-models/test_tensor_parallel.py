"""Tensor-parallel loading and decoding on the CPU: N ranks as threads of one process, each with the
fake communicator of tests/nbx-devices/test_nccl_parallel.py (collectives as barrier rendezvous,
reductions accumulated rank by rank in the dtype, as NCCL's ring does), made abortable here as
NCCL's communicator is. tests/gpu/test_tensor_parallel_gpus.py runs the same checks over NCCL."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from model_checks import assert_close, assert_greedy_matches
from model_reference import decoder_logits
from test_nccl_parallel import FakeCommunicator, World

import nbx.core as nbx
from nbx import models
from nbx.models import sharding, tensor_parallel
from nbx.models.writer import small_config

PROMPT = [1, 17, 42, 5, 99, 23, 64, 8]
CPU = nbx.as_device("cpu")


class AbortableCommunicator(FakeCommunicator):
    """abort() breaks the world's barrier: every rank waiting in (or later entering) a collective fails."""

    def abort(self):
        self.world.barrier.abort()


def run_ranks(n: int, body, world=None):
    """body(comm) on n threads, one rank each: (results or raised exceptions in rank order, world)."""
    world = world or World(n)

    def guarded(comm):
        try:
            return body(comm)
        except Exception as exc:  # returned, so every rank's outcome can be checked
            return exc

    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(guarded, AbortableCommunicator(world, r)) for r in range(n)]
        return [f.result(timeout=60) for f in futures], world


def checkpoint(tmp_path, architecture="LlamaForCausalLM", **overrides):
    return models.write_checkpoint(tmp_path / architecture, small_config(architecture, **overrides), seed=11)


def raised(outcomes):
    errors = [o for o in outcomes if isinstance(o, Exception)]
    if errors:
        raise errors[0]
    return outcomes


# small_config: 4 heads, 2 KV heads, intermediate 128, vocab 128. At 4 ranks each KV head is
# replicated on two of them; Qwen2 adds q/k/v biases and tied embeddings, Qwen3 q/k norms,
# Mistral a sliding window shorter than the prompt.
@pytest.mark.parametrize("world_size,architecture", [(2, "LlamaForCausalLM"), (4, "LlamaForCausalLM"),
                                                     (2, "Qwen2ForCausalLM"), (4, "Qwen3ForCausalLM"),
                                                     (2, "MistralForCausalLM")])
def test_tensor_parallel_logits_match_the_single_device_run_and_greedy_tokens_are_identical(tmp_path, world_size,
                                                                                          architecture):
    folder = checkpoint(tmp_path, architecture)
    single = models.load(folder)
    want_logits = single.logits(PROMPT).numpy()
    want_tokens = single.generate(PROMPT, 6)

    def rank(comm):
        model = models.load(folder, tensor_parallel=world_size, communicator=comm)
        return model.logits(PROMPT).numpy(), model.generate(PROMPT, 6)

    outcomes, world = run_ranks(world_size, rank)
    for logits, tokens in raised(outcomes):
        assert_close(logits, want_logits, nbx.float32, CPU, "tensor-parallel logits vs one device")
        assert_close(logits, decoder_logits(folder, PROMPT), nbx.float32, CPU, "tensor-parallel logits vs float64")
        assert tokens == want_tokens
    assert all(o[0].tobytes() == outcomes[0][0].tobytes() for o in outcomes)   # every rank, the same bytes
    assert set(world.calls) == {"all_reduce sum", "all_gather"}


def test_bfloat16_ranks_stay_within_bfloat16s_tolerance_of_the_reference_and_decode_its_greedy_tokens(tmp_path):
    folder = models.write_checkpoint(tmp_path / "bf16", small_config("Qwen3ForCausalLM"), seed=12, dtype="bfloat16")

    def rank(comm):
        model = models.load(folder, tensor_parallel=2, communicator=comm)
        return model.logits(PROMPT).numpy(), model.generate(PROMPT, 4)

    outcomes, _ = run_ranks(2, rank)
    for logits, tokens in raised(outcomes):
        assert_close(logits, decoder_logits(folder, PROMPT), nbx.bfloat16, CPU, "bfloat16 tensor-parallel logits")
        assert_greedy_matches(tokens, decoder_logits(folder, PROMPT + tokens), len(PROMPT), nbx.bfloat16, CPU)


def test_per_layer_a_rank_sums_once_after_attention_and_once_after_the_mlp(tmp_path):
    folder = checkpoint(tmp_path, num_hidden_layers=3)
    outcomes, world = run_ranks(2, lambda c: models.load(folder, tensor_parallel=2, communicator=c).logits(PROMPT))
    raised(outcomes)
    # the embedding's sum, then two per layer, then the logits' gather
    assert world.calls == ["all_reduce sum"] * (1 + 2 * 3) + ["all_gather"]


def test_each_rank_reads_only_its_shard_straight_from_the_safetensors_files(tmp_path, monkeypatch):
    config = small_config("LlamaForCausalLM", num_key_value_heads=4)
    folder = models.write_checkpoint(tmp_path / "three", config, seed=2, shards=3)
    files = sorted(folder.glob("*.safetensors"))
    on_disk = sum(f.stat().st_size for f in files)
    counted = []
    pread = os.pread

    def counting_pread(fd, n, offset):
        data = pread(fd, n, offset)
        counted.append(len(data))
        return data

    monkeypatch.setattr(sharding.os, "pread", counting_pread)
    monkeypatch.setattr(nbx, "load_safetensors", None)   # nothing is mapped: every byte comes through pread

    def rank(comm):
        model = models.load(folder, tensor_parallel=2, communicator=comm)
        return model.bytes_read, model.layers[0].wqkv.shape, model.lm_head.shape

    outcomes, _ = run_ranks(2, rank)
    whole = sum(np.prod(shape) * 4 for shape in models.families.parameter_shapes(config).values())
    replicated = sum(np.prod(shape) * 4 for name, shape in models.families.parameter_shapes(config).items()
                     if name.endswith("norm.weight"))
    headers = on_disk - whole
    assert sum(counted) == sum(o[0] for o in raised(outcomes))   # every byte counted came through pread
    for bytes_read, wqkv, lm_head in outcomes:
        assert bytes_read == (whole - replicated) / 2 + replicated + headers
        assert wqkv == ((2 + 2 + 2) * 16, 64) and lm_head == (64, 64)   # half the heads, half the vocabulary


def test_sampled_tokens_agree_on_every_rank_without_a_broadcast(tmp_path):
    folder = checkpoint(tmp_path, "Qwen3ForCausalLM")

    def rank(comm):
        model = models.load(folder, tensor_parallel=4, communicator=comm)
        return model.generate_batch([PROMPT, [3, 4, 5]], 12, temperature=1.3, top_k=20, seed=9)

    outcomes, world = run_ranks(4, rank)
    first = raised(outcomes)[0]
    assert all(o == first for o in outcomes)
    assert len(set(first[0])) > 1   # a draw, not a constant
    assert set(world.calls) == {"all_reduce sum", "all_gather"}   # no broadcast of tokens


def test_a_rank_that_fails_ends_the_others_at_once_with_a_named_error(tmp_path):
    folder = checkpoint(tmp_path)

    def rank(comm):
        model = models.load(folder, tensor_parallel=2, communicator=comm, timeout=30)
        if comm.rank == 1:
            steps = iter(range(100))
            original = model.embed_rows

            def failing(ids):
                if next(steps) == 3:
                    raise RuntimeError("rank 1 lost its GPU")
                return original(ids)
            model.embed_rows = failing
        return model.generate(PROMPT, 8)

    start = time.monotonic()
    outcomes, _ = run_ranks(2, rank)
    assert time.monotonic() - start < 10    # not the watchdog's 30 s: the failing rank aborted
    assert isinstance(outcomes[1], RuntimeError)
    assert isinstance(outcomes[0], models.CollectiveFailedError) and "rank 0 of 2" in str(outcomes[0])


def test_refused_arguments_leave_the_ranks_working(tmp_path):
    folder = checkpoint(tmp_path)

    def rank(comm):
        model = models.load(folder, tensor_parallel=2, communicator=comm, timeout=30)
        for bad in ([PROMPT, -1], [[500], 2]):
            with pytest.raises((nbx.ArgumentError, nbx.IndexingError)):
                model.generate(*bad)
        return model.generate(PROMPT, 3)

    outcomes, _ = run_ranks(2, rank)
    assert raised(outcomes)[0] == outcomes[1] == models.load(folder).generate(PROMPT, 3)


def test_a_rank_that_dies_is_timed_out_by_the_others_watchdog_not_waited_for(tmp_path):
    folder = checkpoint(tmp_path)

    def rank(comm):
        model = models.load(folder, tensor_parallel=2, communicator=comm, timeout=0.5)
        if comm.rank == 1:
            return "gone"       # ends without a word, as a killed process does: its collectives never come
        errors = []
        for _ in range(2):
            try:
                model.generate(PROMPT, 4)
            except models.TensorParallelError as exc:
                errors.append((exc, time.monotonic()))
        return errors

    start = time.monotonic()
    outcomes, _ = run_ranks(2, rank)
    (first, at), (again, then) = outcomes[0]
    assert at - start < 10    # not the fake barrier's 30 s
    assert isinstance(first, models.RankTimeoutError) and isinstance(first, nbx.NbxError)
    assert "rank 0 of 2 made no progress for 0.5 s (waiting after: the embedding's all_reduce)" in str(first)
    assert isinstance(again, models.RankTimeoutError) and then - at < 0.4   # the rank stays ended, at once


def test_mismatched_ranks_uneven_splits_and_missing_communicators_are_refused_by_name(tmp_path):
    folder = checkpoint(tmp_path)
    one = AbortableCommunicator(World(2), 1)
    with pytest.raises(nbx.ArgumentError, match="tensor_parallel=4, but the communicator has 2 ranks"):
        models.load(folder, tensor_parallel=4, communicator=one)
    with pytest.raises(nbx.ArgumentError, match="rank=0, but the communicator is rank 1"):
        models.load(folder, tensor_parallel=2, rank=0, communicator=one)
    with pytest.raises(nbx.ArgumentError, match="on cpu; device=interp was asked"):
        models.load(folder, device="interp", tensor_parallel=2, communicator=one)
    with pytest.raises(nbx.ShapeError, match="4 attention heads do not split evenly among 3 tensor-parallel ranks"):
        models.load(folder, tensor_parallel=3, communicator=AbortableCommunicator(World(3), 0))
    with pytest.raises(nbx.ShapeError, match="3 KV heads neither split among 2 ranks nor replicate"):
        sharding.ShardPlan.of(small_config("LlamaForCausalLM", num_attention_heads=6, num_key_value_heads=3,
                                           head_dim=16), 0, 2)
    with pytest.raises(models.CommunicatorNotFoundError, match="pass communicator="):
        models.load(folder, device="cpu", tensor_parallel=2)
    int4 = models.write_checkpoint(tmp_path / "int4", small_config("LlamaForCausalLM"), seed=6, int4=(32, "asymmetric"))
    with pytest.raises(nbx.NotSupportedError, match="stored as int4"):
        models.load(int4, tensor_parallel=2, communicator=one)
    bert = models.write_checkpoint(tmp_path / "bert", small_config("BertModel"), seed=1)
    with pytest.raises(nbx.NotSupportedError, match="splits decoders; BertModel is not one"):
        models.load(bert, tensor_parallel=2, communicator=one)


def test_the_kv_heads_a_rank_holds_are_its_q_heads_own_when_replicated():
    config = small_config("LlamaForCausalLM", num_attention_heads=8, num_key_value_heads=2, head_dim=8)
    plans = [sharding.ShardPlan.of(config, r, 4) for r in range(4)]
    assert [(p.q_heads.start, p.q_heads.stop) for p in plans] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [p.kv_heads.start for p in plans] == [0, 0, 1, 1]     # q heads 0-3 read KV head 0, 4-7 KV head 1
    assert plans[1].slices("model.layers.0.self_attn.o_proj.weight") == (None, slice(16, 32))
    assert plans[1].slices("model.layers.0.mlp.down_proj.weight") == (None, slice(32, 64))
    assert plans[1].slices("model.layers.0.mlp.down_proj.bias") == (None, None)
    assert plans[3].slices("lm_head.weight") == (slice(96, 128), None)


def test_nbx_generate_with_tensor_parallel_starts_the_ranks_through_the_device_plugins_launcher(tmp_path, monkeypatch,
                                                                                              capsys):
    from nbx.core import cli
    from nbx.core.device import get_backend
    from nbx.models.tokenizer import CharTokenizer
    folder = models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM", vocab_size=98,
                                                                  bos_token_id=95, eos_token_id=96), seed=4)
    CharTokenizer.write(folder)
    assert cli.main(["generate", "--model", str(folder), "--prompt", "hi", "--tensor-parallel", "2",
                     "--device", "cpu"]) == 2
    assert "the cpu plugin does not" in capsys.readouterr().err
    launched = []
    monkeypatch.setattr(type(get_backend("cpu")), "tensor_parallel_launch",
                        lambda self, argv, nproc: launched.append((argv, nproc)) or 0, raising=False)
    assert cli.main(["generate", "--model", str(folder), "--prompt", "hi", "--tensor-parallel", "2",
                     "--temperature", "0.8", "--device", "cpu", "--eager-decode"]) == 0
    argv, nproc = launched[0]
    assert nproc == 2 and argv[1:4] == ["-m", "nbx.core.cli", "generate"] and "--tensor-parallel-rank" in argv
    assert "--eager-decode" in argv
    assert "--seed" in argv   # sampled: one seed chosen for every rank


def test_a_rank_of_nbx_generate_finds_its_communicator_through_the_plugin_and_only_rank_0_prints(tmp_path,
                                                                                                 monkeypatch, capsys):
    import queue

    from nbx.core import cli
    from nbx.core.device import get_backend
    from nbx.models.tokenizer import CharTokenizer
    folder = models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM", vocab_size=98,
                                                                  bos_token_id=95, eos_token_id=96), seed=4)
    CharTokenizer.write(folder)
    want = CharTokenizer().decode(models.load(folder).generate(CharTokenizer().encode("hello"), 5))
    world = World(2)
    comms = queue.Queue()
    for r in range(2):
        comms.put(AbortableCommunicator(world, r))
    monkeypatch.setattr(type(get_backend("cpu")), "tensor_parallel_communicator",
                        lambda self, timeout: comms.get_nowait(), raising=False)
    argv = ["generate", "--model", str(folder), "--prompt", "hello", "--max-new-tokens", "5", "--device", "cpu",
            "--tensor-parallel", "2", "--tensor-parallel-rank"]
    outcomes, _ = run_ranks(2, lambda _: cli.main(argv))
    assert raised(outcomes) == [0, 0]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"model {folder} on 2 ranks (cpu is rank 0), float32")
    assert lines[1] == "hello" + want and lines[2].startswith("prefill 6 tokens")
    assert len(lines) == 4   # the figures' line and the autotune line: rank 1 printed nothing


def test_the_watchdog_refuses_a_timeout_that_is_not_positive():
    with pytest.raises(nbx.ArgumentError, match="seconds > 0"):
        tensor_parallel.Watchdog(AbortableCommunicator(World(1), 0), 0)


def test_seeded_weights_split_any_way_hold_the_same_model_as_on_one_device():
    from nbx.models.decoder import FAMILIES, Decoder
    config = small_config("LlamaForCausalLM")
    family = FAMILIES["LlamaForCausalLM"]
    single = Decoder(family, config, sharding.SeededWeights(config, seed=3, dtype="float32"))

    def rank(comm):
        weights = sharding.SeededWeights(config, seed=3, dtype="float32",
                                         plan=sharding.ShardPlan.of(config, comm.rank, comm.world_size))
        return tensor_parallel.TensorParallelDecoder(family, config, weights, comm, timeout=30).logits(PROMPT).numpy()

    outcomes, _ = run_ranks(4, rank)
    for logits in raised(outcomes):
        assert_close(logits, single.logits(PROMPT).numpy(), nbx.float32, CPU, "seeded shards vs the seeded model")


def test_nbx_models_imports_no_vendor_plugin_the_communicator_comes_in_or_through_the_backend():
    import ast
    from pathlib import Path
    source = Path(models.__file__).parent
    imported = set()
    for path in source.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert not [m for m in imported if m.startswith("nbx.devices")]
