"""BERT-style encoders (BERT, MiniLM) and the sentence-transformers pooling over them.

`encode(ids)` is the last hidden states [len, hidden] (what transformers' BertModel returns as
last_hidden_state); `embed(ids)` the sentence embedding exactly as sentence-transformers computes
it for the checkpoint: the pooling of 1_Pooling/config.json (cls, mean, max, mean_sqrt_len, in
sentence-transformers' order when several are on), then a Normalize module when modules.json
lists one. A module nbx does not implement (Dense, ...) is refused by name at load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import nbx.core as nbx

from .checkpoint import Weights
from .config import read_json
from .decoder import ACTIVATIONS, stack_rows
from .errors import CheckpointError

ARCHITECTURES = ("BertModel", "BertForMaskedLM")
POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens")  # sentence-transformers' order
KNOWN_MODULES = {"sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                 "sentence_transformers.models.Normalize"}


def parameter_shapes(config: dict, prefix: str = "") -> dict[str, tuple[int, ...]]:
    hidden, inner = int(config["hidden_size"]), int(config["intermediate_size"])
    p = prefix
    shapes = {p + "embeddings.word_embeddings.weight": (int(config["vocab_size"]), hidden),
              p + "embeddings.position_embeddings.weight": (int(config["max_position_embeddings"]), hidden),
              p + "embeddings.token_type_embeddings.weight": (int(config.get("type_vocab_size", 2)), hidden),
              p + "embeddings.LayerNorm.weight": (hidden,), p + "embeddings.LayerNorm.bias": (hidden,)}
    for i in range(int(config["num_hidden_layers"])):
        layer = f"{p}encoder.layer.{i}."
        for name, (rows, cols) in (("attention.self.query", (hidden, hidden)), ("attention.self.key", (hidden, hidden)),
                                   ("attention.self.value", (hidden, hidden)),
                                   ("attention.output.dense", (hidden, hidden)),
                                   ("intermediate.dense", (inner, hidden)), ("output.dense", (hidden, inner))):
            shapes[layer + name + ".weight"] = (rows, cols)
            shapes[layer + name + ".bias"] = (rows,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[layer + name + ".weight"] = (hidden,)
            shapes[layer + name + ".bias"] = (hidden,)
    return shapes


@dataclass(frozen=True)
class Pooling:
    modes: tuple[str, ...]
    normalize: bool

    @classmethod
    def read(cls, folder: Path) -> "Pooling | None":
        """The sentence-transformers modules of the folder, None when it is no sentence-transformers model."""
        if not (folder / "modules.json").is_file():
            return None
        modules = read_json(folder / "modules.json")
        unknown = [m.get("type") for m in modules if m.get("type") not in KNOWN_MODULES]
        if unknown:
            raise nbx.NotSupportedError(f"{folder}/modules.json lists {unknown}: nbx.models implements "
                                        f"{sorted(KNOWN_MODULES)}")
        pooling = [m for m in modules if m.get("type") == "sentence_transformers.models.Pooling"]
        if len(pooling) != 1:
            raise CheckpointError(f"{folder}/modules.json lists {len(pooling)} Pooling modules; nbx reads one")
        settings = read_json(folder / pooling[0]["path"] / "config.json")
        modes = tuple(m for m in POOLING_MODES if settings.get(f"pooling_mode_{m}"))
        others = [k for k, v in settings.items() if k.startswith("pooling_mode_") and v
                  and k.removeprefix("pooling_mode_") not in POOLING_MODES]
        if others or not modes:
            raise nbx.NotSupportedError(f"pooling {others or 'with no mode on'}: nbx pools by {POOLING_MODES}")
        normalize = any(m.get("type") == "sentence_transformers.models.Normalize" for m in modules)
        return cls(modes, normalize)


def sentence_transformers_input(folder) -> tuple[int | None, bool]:
    """(max_seq_length, do_lower_case) of a sentence-transformers model's Transformer module, as it
    reads them: sentence_bert_config.json, its max_seq_length defaulting to the smaller of
    config.json's max_position_embeddings and tokenizer_config.json's model_max_length. (None,
    False) for a folder without modules.json (no sentence-transformers model: nothing truncates)."""
    folder = Path(folder)
    if not (folder / "modules.json").is_file():
        return None, False
    settings = read_json(folder / "sentence_bert_config.json") if (folder / "sentence_bert_config.json").is_file() else {}
    limit = settings.get("max_seq_length")
    if limit is None:
        limits = [read_json(folder / "config.json").get("max_position_embeddings")]
        if (folder / "tokenizer_config.json").is_file():
            limits.append(read_json(folder / "tokenizer_config.json").get("model_max_length"))
        limits = [int(n) for n in limits if n is not None]
        limit = min(limits) if limits else None
    return (None if limit is None else int(limit)), bool(settings.get("do_lower_case", False))


class Encoder:
    kind = "encoder"

    def __init__(self, config: dict, weights: Weights, folder: Path):
        self.config = config
        self.device = weights.device
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        shapes = parameter_shapes(config, prefix)
        self.w = {name.removeprefix(prefix): weights.get(name, shape) for name, shape in shapes.items()}
        for i in range(int(config["num_hidden_layers"])):   # q, k and v stacked: one product a layer
            p = f"encoder.layer.{i}.attention.self."
            for part in ("weight", "bias"):
                self.w[f"{p}qkv.{part}"] = stack_rows([self.w.pop(f"{p}{n}.{part}") for n in ("query", "key", "value")])
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.layers = int(config["num_hidden_layers"])
        self.max_positions = int(config["max_position_embeddings"])
        self.vocab = int(config["vocab_size"])
        activation = config.get("hidden_act", "gelu")
        if activation not in ACTIVATIONS:
            raise nbx.NotSupportedError(f"hidden_act {activation!r}: nbx.models knows {sorted(ACTIVATIONS)}")
        self.activation = ACTIVATIONS[activation]
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise nbx.NotSupportedError(f"position_embedding_type {config['position_embedding_type']!r}: nbx "
                                        "implements BERT's absolute positions")
        self.pooling = Pooling.read(folder)
        self.max_seq_length = sentence_transformers_input(folder)[0] or self.max_positions

    def _norm(self, x, name):
        return nbx.layer_norm(x, (self.hidden,), self.w[name + ".weight"], self.w[name + ".bias"], eps=self.eps)

    def _linear(self, x, name, **kw):
        return nbx.linear(x, self.w[name + ".weight"], self.w[name + ".bias"], **kw)

    def encode(self, token_ids, token_type_ids=None) -> nbx.Tensor:
        """The last hidden states [len(token_ids), hidden] of one sequence (all tokens attended)."""
        ids = [int(t) for t in token_ids]
        if not ids or len(ids) > self.max_positions:
            raise nbx.ArgumentError(f"an encoder sequence holds 1 to {self.max_positions} tokens, got {len(ids)}")
        if not all(0 <= t < self.vocab for t in ids):
            raise nbx.IndexingError(f"token ids outside the vocabulary of {self.vocab}")
        n, heads, head_dim = len(ids), self.heads, self.hidden // self.heads
        types = [0] * n if token_type_ids is None else [int(t) for t in token_type_ids]
        d = self.device
        x = (nbx.embedding(nbx.asarray(ids, dtype=nbx.int64, device=d), self.w["embeddings.word_embeddings.weight"])
             + nbx.embedding(nbx.arange(n, dtype=nbx.int64, device=d), self.w["embeddings.position_embeddings.weight"])
             + nbx.embedding(nbx.asarray(types, dtype=nbx.int64, device=d),
                             self.w["embeddings.token_type_embeddings.weight"]))
        x = self._norm(x, "embeddings.LayerNorm")
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            qkv = self._linear(x, p + "attention.self.qkv")
            q, k, v = (qkv[:, j * self.hidden:(j + 1) * self.hidden].reshape(n, heads, head_dim).permute(1, 0, 2)
                       for j in range(3))
            o = nbx.scaled_dot_product_attention(q, k, v).permute(1, 0, 2).reshape(n, self.hidden)
            x = self._norm(self._linear(o, p + "attention.output.dense", residual=x), p + "attention.output.LayerNorm")
            h = self._linear(x, p + "intermediate.dense", activation=self.activation)
            x = self._norm(self._linear(h, p + "output.dense", residual=x), p + "output.LayerNorm")
        return x

    def embed(self, token_ids) -> nbx.Tensor:
        """The sentence embedding [hidden * modes] as sentence-transformers computes it (float32)."""
        if self.pooling is None:
            raise nbx.NotSupportedError("this checkpoint has no sentence-transformers modules.json: it names no "
                                        "pooling, so it has no sentence embedding (encode() gives the hidden states)")
        token_ids = list(token_ids)
        if len(token_ids) > self.max_seq_length:
            # sentence-transformers never embeds more: its tokenizer call truncates (load_tokenizer's does too)
            raise nbx.ArgumentError(f"{len(token_ids)} token ids: this sentence-transformers model embeds at most "
                                    f"{self.max_seq_length} (its max_seq_length; it truncates the text's ids there)")
        x = self.encode(token_ids).to(dtype=nbx.float32)
        pooled = []
        for mode in self.pooling.modes:
            if mode == "cls_token":
                pooled.append(x[0])
            elif mode == "max_tokens":
                pooled.append(nbx.max(x, dim=0))
            elif mode == "mean_tokens":
                pooled.append(nbx.mean(x, dim=0))
            else:
                pooled.append(nbx.sum(x, dim=0) * (1.0 / math.sqrt(x.shape[0])))
        out = pooled[0] if len(pooled) == 1 else nbx.concat(pooled, axis=0)
        if self.pooling.normalize:
            # sentence-transformers' Normalize: F.normalize, x / max(||x||, 1e-12)
            out = out / nbx.clamp(nbx.vector_norm(out), min=1e-12)
        return out

    def embed_batch(self, sequences) -> list[nbx.Tensor]:
        return [self.embed(seq) for seq in sequences]
