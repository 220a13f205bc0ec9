"""A model's census: the keys listed from config.json and a plan are the keys its launches form; warm-up runs them."""
from __future__ import annotations

import io
import json
import os
import sys

import pytest
from nbx.autotune import Identity, Tuner, census, declared, install, records, serving, warmup
from nbx.autotune.store import CertificateStore
from nbx.core import deferred_checks, device_files
from nbx.core.device import as_device, discover_plugins
from nbx.core.errors import ArgumentError, FileFormatError, NotSupportedError

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 32, "vocab_size": 128256, "torch_dtype": "bfloat16", "hidden_act": "silu"}
TINY_DECODER = {"model_type": "qwen2", "hidden_size": 48, "intermediate_size": 80, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": 200, "torch_dtype": "float32"}
TINY_ENCODER = {"model_type": "bert", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                "vocab_size": 100, "torch_dtype": "float32", "hidden_act": "gelu"}


@pytest.fixture(scope="module")
def kernels():
    discover_plugins()
    return declared()


def test_a_decoders_config_gives_its_shapes_and_an_unknown_model_is_refused_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    model = census.read_config(tmp_path)
    assert (model.kind, model.hidden, model.kv_heads, model.head_dim, model.dtype) == (
        "decoder", 4096, 8, 128, "bfloat16")
    assert census.read_config(TINY_ENCODER).kind == "encoder"
    with pytest.raises(NotSupportedError, match=r"model_type 't5'.*neither a Llama-style decoder"):
        census.read_config({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]})
    with pytest.raises(FileFormatError, match=r"states none of \['intermediate_size'\]"):
        census.read_config({k: v for k, v in LLAMA_8B.items() if k != "intermediate_size"})


def test_a_llama_8b_census_lists_its_projections_norms_attention_cache_and_argmax_at_prefill_and_decode(hopper,
                                                                                                      kernels):
    found = census.launches(census.read_config(LLAMA_8B), census.Plan(batch=(1,), prompt=(512,), new_tokens=1),
                            hopper)
    listed = {(r.kernel, r.key): r.observed for r in census.records_of(found, hopper, kernels)}
    tail = ",dtype=bf16,layout=nt,form={},tma=1,precision=none"                         # x @ W.T: the fused product
    assert ("linear", "m=512,n=6144,k=4096" + tail.format("plain")) in listed            # q, k, v stacked
    assert ("linear", "m=512,n=14336,k=4096" + tail.format("gated")) in listed           # gate and up: one launch
    assert ("linear", "m=1,n=4096,k=14336" + tail.format("plain")) in listed             # down, decoding
    assert listed[("linear", "m=1,n=131072,k=4096" + tail.format("plain"))] == {"m": 1, "n": 128256, "k": 4096}
    assert ("norm", "width=4096,elements=8388608,dtype=bf16,strided=0") in listed
    assert ("norm", "width=4096,elements=65536,dtype=bf16,strided=0") in listed         # the last position's rows
    assert ("take", "row_bytes=8192,ids=1024") in listed                                 # 512 embedding rows
    assert ("reduction", "width=131072,elements=1048576,dtype=bf16,strided=0") in listed  # greedy argmax
    assert ("rope", "elements=8388608,head_dim=128,dtype=bf16") in listed              # k's 8 heads and q's 32
    # the prompt's flash prefill over the paged cache (no descriptors), the decode step's split-K over 513 keys
    # (a length bucket of 640, the layout's power of two 1024)
    assert ("attention", "q_len=512,k_len=512,head_dim=128,v_dim=128,group=4,dtype=bf16,causal=1,tma=0") in listed
    assert ("attention_decode", "k_len=1024,rows=4,head_dim=128,dtype=bf16,paged=1,batch=1") in listed
    assert listed[("datamove", "n=68719476736,inner=16777216,dtype=u16,mapped=0,transposed=0")] == {
        "n": 6144 * 4096, "inner": 4096 * 4096}                                          # q, k, v stacked at load
    # the cache's 33 blocks of 16 tokens zeroed (8 KV heads x 128), the step's positions + 1 and int32 lengths
    assert listed[("elementwise", "n=1048576,dtype=bf16,strided=0")] == {"n": 33 * 16 * 8 * 128}
    assert {("elementwise", f"n=65536,dtype={t},strided=0") for t in ("i64", "i32")} <= set(listed)
    assert "softmax" not in {k for k, _ in listed}   # residuals inside the products; softmax inside attention
    assert len(listed) == 22


def test_the_decode_steps_attention_is_listed_by_the_classes_of_their_contexts_not_by_length(hopper):
    # hopper's buckets: 128 apart to 1024, 256 to 2048, ...; each the layout's power of two, at most the capacity
    assert census.decode_contexts(512, 256, hopper) == [1024]
    assert census.decode_contexts(100, 2000, hopper) == [128, 256, 512, 1024, 2048, 4096]
    assert census.decode_contexts(5, 2, hopper) == [8]            # lengths 6, 7: the capacity 8 caps bucket 128
    assert census.decode_contexts(5, 0, hopper) == []
    with pytest.raises(ArgumentError, match="a decoder's census needs the device file it runs on"):
        census.launches(census.read_config(LLAMA_8B), census.Plan())


def test_a_sparse_decoder_is_refused_by_name_rather_than_listed_as_a_dense_one():
    for config in ({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"]},
                   {**LLAMA_8B, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"]},
                   {**LLAMA_8B, "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"]}):
        with pytest.raises(NotSupportedError, match=r"sparse \(MoE\) decoder; the census does not list its experts"):
            census.read_config(config)


@pytest.mark.parametrize("architecture, batch, prompt, steps", [
    ("LlamaForCausalLM", 2, 12, 5),   # flash prefill (16 queries), last rows joined, decode contexts 16 and 32
    ("Qwen2ForCausalLM", 1, 4, 1),    # q, k, v biases stacked; a prompt of 4 through the split-K decode path
    ("Qwen3ForCausalLM", 1, 9, 2),    # q and k normed per head
])
def test_a_decoders_generate_forms_exactly_the_keys_and_sizes_its_census_lists(architecture, batch, prompt, steps,
                                                                               hopper, kernels, tmp_path,
                                                                               monkeypatch):
    """Recorded as `nbx autotune record` records (NBX_AUTOTUNE_RECORD): load, prefill and the captured decode
    steps of a seeded checkpoint on the interpreter (its cache blocks and length buckets, hopper's key ladders)
    form the census's keys, each at the largest size the census lists: a change on either side fails."""
    from nbx import models
    from nbx.core import device_files
    from nbx.models.writer import small_config
    monkeypatch.setenv("NBX_AUTOTUNE_RECORD", str(tmp_path / "recorded.json"))
    monkeypatch.setenv("NBX_AUTOTUNE_NO_SWEEP", "1")
    serving.reset()
    device = as_device("interp")
    install(device, Tuner(hopper, Identity("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda"), device=device,
                          certificates=CertificateStore([], False), cache=CertificateStore([], False)))
    # widths apart (q 64, k/v 32 each, stacked 128, intermediate 96) so a projection listed wrong forms another key
    folder = models.write_checkpoint(tmp_path / "m", small_config(architecture, num_hidden_layers=1,
                                                                  intermediate_size=96), seed=3)
    model = models.load(folder, device=device)
    model.generate_batch([[(7 * i + j) % 120 + 3 for j in range(prompt)] for i in range(batch)], steps + 1)
    assert model.last_decode == "graph"   # the decode steps a GPU captures
    serving._flush_recorder()
    formed = {(r.kernel, r.key): r.observed for r in records.load(tmp_path / "recorded.json")}
    plan = census.Plan(batch=(batch,), prompt=(prompt,), new_tokens=steps)
    found = census.launches(census.read_config(folder), plan, device_files.in_force(device))
    listed = {(r.kernel, r.key): r.observed for r in census.records_of(found, hopper, kernels)}
    assert formed == listed
    assert {"attention_decode", "datamove", "elementwise"} <= {k for k, _ in listed}
    assert (prompt > 8) == ("attention" in {k for k, _ in listed})
    assert census.unlisted(census.read_config(folder)).startswith("note: the census lists no key of sampling")


def test_the_census_lists_exactly_the_keys_the_kernels_wrappers_form_when_its_launches_run(hopper, kernels, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("NBX_AUTOTUNE_RECORD", str(tmp_path / "recorded.json"))
    monkeypatch.setenv("NBX_AUTOTUNE_NO_SWEEP", "1")   # the device file's tile: nothing screened or timed
    serving.reset()
    device = as_device("interp")
    deferred_checks.prepare(device)   # the process's bounds-check flag (an int64 fill): made once, not the census's
    tuner = Tuner(hopper, Identity("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda"), device=device,
                  certificates=CertificateStore([], False), cache=CertificateStore([], False))
    install(device, tuner)
    plan = census.Plan(batch=(2,), prompt=(3, 12), new_tokens=1)
    listed = set()
    for config in (TINY_DECODER, TINY_ENCODER):
        found = census.launches(census.read_config(config), plan, device_files.in_force(device))
        listed |= {(r.kernel, r.key) for r in census.records_of(found, hopper, kernels)}
        assert warmup.warm(found, lambda launch: warmup.run_launch(launch, device), progress=None) == len(found)
    serving._flush_recorder()
    formed = {(r.kernel, r.key) for r in records.load(tmp_path / "recorded.json")}
    assert formed == listed and {k for k, _ in formed} == {"linear", "norm", "elementwise", "elementwise_heavy",
                                                           "take", "rope", "reduction", "attention",
                                                           "attention_decode", "datamove"}


def test_coverage_of_a_model_names_each_uncertified_key_and_its_nearest_certified_neighbour(tmp_path, capsys):
    """Llama-3-8B's census at prompt 512 is certified whole for the H200 (exit 0); at 1024 its prefill keys
    are not, each named with its nearest certified neighbour (exit 1)."""
    from nbx.core import cli
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    where = ["--model", str(tmp_path), "--batch", "1", "--arch", "sm_90", "--device-class", "nvidia-h200-140gb",
             "--compiler", "triton-3.6.0-cuda"]
    assert cli.main(["autotune", "coverage", *where, "--prompt", "512"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "nbx autotune coverage: 22 of 22 key(s) certified"
    assert cli.main(["autotune", "coverage", *where, "--prompt", "1024"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("nbx autotune coverage: ") and lines[-1].endswith(" of 22 key(s) certified")
    assert lines[-2].startswith("note: the census lists no key of sampling")
    assert ("missing  linear m=1024,n=4096,k=4096,dtype=bf16,layout=nt,form=plain,tma=1,precision=none "
            "(nvidia-h200-140gb, triton-3.6.0-cuda): not certified; nearest certified neighbour "
            "m=512,n=4096,k=4096,dtype=bf16,layout=nt,form=plain,tma=1,precision=none (1.00 weighted octave(s) away)"
            ) in lines


def test_warmup_of_a_model_splits_its_launches_over_shards_that_together_run_each_once(tmp_path, capsys):
    from nbx.core import cli
    (tmp_path / "config.json").write_text(json.dumps(TINY_ENCODER))
    launches = len(census.launches(census.read_config(TINY_ENCODER), census.Plan(batch=(1,), prompt=(2,))))
    counts = []
    for shard in (0, 1):  # what `--jobs 2` starts as two processes, run here one after the other
        assert cli.main(["warmup", "--model", str(tmp_path), "--device", "interp", "--batch", "1", "--prompt", "2",
                         "--jobs", "2", "--shard", str(shard)]) == 0
        line = capsys.readouterr().out.splitlines()[-1]
        assert line.startswith("nbx warmup: ") and "Triton's cache: " in line
        counts.append(int(line.split()[2]))
    assert counts == [(launches + 1) // 2, launches // 2]


def test_shards_run_as_processes_at_once_and_report_their_exit_codes(tmp_path):
    code = f"import sys, pathlib; pathlib.Path(r'{tmp_path}', sys.argv[2]).touch(); sys.exit(int(sys.argv[2]))"
    assert warmup.run_shards([sys.executable, "-c", code], 3) == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1", "2"]


def test_shards_run_in_the_environment_given(tmp_path):
    code = "import os, sys; sys.exit(int(os.environ['NBX_SHARD_TEST']) + int(sys.argv[2]))"
    assert warmup.run_shards([sys.executable, "-c", code], 2, env=dict(os.environ, NBX_SHARD_TEST="5")) == [5, 6]


def test_warmup_launches_a_sum_over_the_last_dim():
    launch = census.Launch("sum", ((3, 16),), "float32", "reduction", {})
    warmup.run_launch(launch, as_device("interp"))   # a census op it had no launch for was refused by name


def _compiled(params, signature, constants=None, attrs=None, module="nbx.kernels.softmax.rows", name="softmax_rows"):
    """What triton.compile hands its listener: the source (an ASTSource of a JITFunction)."""
    fn = type("J", (), {"module": module, "params": [type("P", (), {"name": n})() for n in params]})()
    return type("Src", (), {"fn": fn, "name": name, "signature": signature, "constants": constants or {},
                            "attrs": attrs or {}})()


@pytest.fixture
def listener_kept():
    """Triton's compilation listener as it was before the test, put back after it."""
    import triton
    saved = triton.knobs.compilation.listener
    yield
    warmup.log_compiles(False)
    triton.knobs.compilation.listener = saved


def test_the_compile_log_prints_each_compile_and_counts_a_kernels_specializations(listener_kept):
    out = io.StringIO()
    log = warmup.CompileLog(out)
    for attrs in ({}, {(0,): [["tt.divisibility", 16]]}):
        log(src=_compiled(["n"], {"n": "i32"}, attrs=attrs), metadata={"num_warps": 8}, metadata_group={},
            times=None, cache_hit=False)
    assert out.getvalue().splitlines() == [
        "[nbx compile] nbx.kernels.softmax.rows.softmax_rows(n: i32, num_warps: 8)",
        "[nbx compile] nbx.kernels.softmax.rows.softmax_rows(n: i32/16, num_warps: 8) (specialization 2 of this "
        "kernel in this process)"]
    import triton
    installed = warmup.log_compiles(file=out)
    assert triton.knobs.compilation.listener is installed
    warmup.log_compiles(False)
    assert triton.knobs.compilation.listener is None


def test_the_report_counts_the_compiles_and_names_what_each_recompiled_kernels_specializations_differ_in(
        listener_kept):
    from nbx.autotune import serving
    out = io.StringIO()
    log = warmup.CompileLog(out, quiet=True)
    for n_type, divisible in (("i32", False), ("i32", True), ("i32", True)):
        attrs = {(0,): [["tt.divisibility", 16]], **({(1,): [["tt.divisibility", 16]]} if divisible else {})}
        log(src=_compiled(["x_ptr", "n", "BLOCK"], {"x_ptr": "*fp32", "n": n_type, "BLOCK": "constexpr"},
                          {(2,): 1024}, attrs, module="nbx.kernels.softmax.kernel"),
            metadata={"num_warps": 8}, metadata_group={}, times=None, cache_hit=False)
    assert out.getvalue() == ""   # quiet: counted for the report, not printed
    assert log.report_lines() == [
        "[autotune] compiles: 3 specialization(s) of 1 kernel(s) compiled or loaded from Triton's cache in this "
        "process, 0 of them by neighbour screens",
        "[autotune] recompiled nbx.kernels.softmax.kernel.softmax_rows: 3 specializations, differing in "
        "n: i32 | i32/16"]
    installed = warmup.log_compiles(quiet=True)
    assert warmup.installed_log() is installed and serving.report().lines()[-1].startswith("[autotune] compiles: 0")
    warmup.log_compiles(False)
    assert warmup.installed_log() is None and not any("compiles:" in line for line in serving.report().lines())


def test_certify_of_a_model_for_some_kernels_forms_every_key_then_certifies_only_theirs(tmp_path, monkeypatch):
    """--kernel picks from the census's keys: the census still forms every kernel's (the 8B's datamove
    among them) and only the named kernels' keys and Tunables reach the certifier."""
    from nbx.autotune import certify, device_class, timing

    class timing_stub:
        description = "no timing: certify is stubbed"
    from nbx.core import cli
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    identity = Identity("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda")
    monkeypatch.setattr(device_class, "identify", lambda device: identity)
    monkeypatch.setattr(device_files, "in_force", lambda device: device_files.for_arch("sm_90"))
    monkeypatch.setattr(timing, "timer_for", lambda device: timing_stub())
    seen = {}

    def certified(wanted, tunables, **kwargs):
        seen.update(kernels={r.kernel for r in wanted}, tunables=set(tunables))
        return certify.Outcome()
    monkeypatch.setattr(certify, "certify", certified)
    assert cli.main(["autotune", "certify", "--device-class", "nvidia-h200-140gb", "--model", str(tmp_path),
                     "--prompt", "512", "--new-tokens", "4", "--kernel", "attention", "--kernel", "attention_decode",
                     "--out", str(tmp_path / "out"), "--device", "interp"]) == 0
    assert seen == {"kernels": {"attention", "attention_decode"}, "tunables": {"attention", "attention_decode"}}


def test_a_batch_of_one_token_prompts_lists_the_prefills_join_and_the_decode_step_none(hopper):
    """The last positions' rows are joined after every batch's prefill, a one-token prompt's too; a decode
    step's rows are one a sequence already (nbx.models.decoder's forward, last_only)."""
    model = census.read_config(LLAMA_8B)
    found = census.launches(model, census.Plan(batch=(2,), prompt=(1,), new_tokens=1), hopper)
    assert [launch.shapes for launch in found if launch.op == "concat"][-1] == ((1, 4096), (1, 4096))
    single = census.launches(model, census.Plan(batch=(1,), prompt=(1,), new_tokens=1), hopper)
    assert [launch for launch in single if launch.op == "concat" and launch.shapes[0] == (1, 4096)] == []


def test_merged_records_of_one_key_keep_the_sizes_of_its_largest_launch_as_a_pair():
    small, large = ({"width": 1000, "elements": 1000}, {"width": 600, "elements": 1800})
    recs = [records.KeyRecord("norm", "width=1024,elements=65536", "nvidia/hopper", None, None, o)
            for o in (small, large)]
    assert records.merge(recs)[0].observed == large
    assert records.merge(recs[::-1])[0].observed == large
