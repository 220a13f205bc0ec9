"""Float64 numpy forwards of the nbx.models families, written from Hugging Face's modeling code
(not from nbx.models), over the tensors of a checkpoint folder. Only the rope tables come from
nbx (nbx.core.rope_tables in float64, itself checked against HF's formulas by its own tests)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import nbx.core as nbx


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors files, float64 (the safetensors package's reader, not
    nbx's, where it is installed: a test dependency, absent on some GPU machines)."""
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return _read_with_nbx(folder)
    out = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        for name, value in load_file(file).items():
            out[name] = value.astype(np.float64)
    return out


def read_weights_bf16_aware(folder: Path) -> dict[str, np.ndarray]:
    """read_weights, but bfloat16 files (which numpy's safetensors reader cannot open) through nbx."""
    try:
        return read_weights(folder)
    except (TypeError, ValueError):
        return _read_with_nbx(folder)


def _read_with_nbx(folder: Path) -> dict[str, np.ndarray]:
    out = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        f = nbx.load_safetensors(file)
        out.update({name: f[name].numpy().astype(np.float64) for name in f})
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def decoder_logits(folder: Path, ids: list[int], weights=None) -> np.ndarray:
    """[len(ids), vocab] float64 logits of a Llama/Mistral/Qwen2/Qwen3 checkpoint, as HF computes them."""
    config = json.loads((Path(folder) / "config.json").read_text())
    w = weights if weights is not None else read_weights_bf16_aware(folder)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    eps = config["rms_norm_eps"]
    n = len(ids)
    cos, sin = nbx.rope_tables(config, n, dtype=nbx.float64)
    cos, sin = cos.numpy()[:, None, :], sin.numpy()[:, None, :]  # [n, 1, head_dim]
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allowed = j <= i
    if window is not None:
        allowed &= (i - j) < window   # HF: a query sees the last `sliding_window` keys, itself included
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."

        def proj(name, a, p=p):
            y = a @ w[p + name + ".weight"].T
            return y + w[p + name + ".bias"] if p + name + ".bias" in w else y
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = proj("self_attn.q_proj", h).reshape(n, heads, head_dim)
        k = proj("self_attn.k_proj", h).reshape(n, kv_heads, head_dim)
        v = proj("self_attn.v_proj", h).reshape(n, kv_heads, head_dim)
        if p + "self_attn.q_norm.weight" in w:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = heads // kv_heads
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)   # HF's repeat_kv
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
        scores = np.where(allowed[None], scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, heads * head_dim)
        x = x + proj("self_attn.o_proj", attn)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if p + "block_sparse_moe.gate.weight" in w or p + "mlp.gate.weight" in w:
            x = x + sparse_mlp(config, w, p, h)
            continue
        gate = proj("mlp.gate_proj", h)
        x = x + proj("mlp.down_proj", gate / (1 + np.exp(-gate)) * proj("mlp.up_proj", h))
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight") if not config.get("tie_word_embeddings", False) else None
    return x @ (w["model.embed_tokens.weight"] if head is None else head).T


def sparse_mlp(config: dict, w: dict, p: str, h: np.ndarray) -> np.ndarray:
    """Mixtral's / Qwen3-MoE's sparse block as transformers computes it: softmax over the router's
    logits, the top num_experts_per_tok (renormalized: Mixtral always, Qwen3-MoE if norm_topk_prob),
    each chosen expert's SwiGLU MLP weighted and summed, plus Qwen2-MoE's gated shared expert."""
    mixtral = p + "block_sparse_moe.gate.weight" in w
    block, names = ("block_sparse_moe", ("w1", "w3", "w2")) if mixtral else ("mlp", ("gate_proj", "up_proj", "down_proj"))
    logits = h @ w[p + block + ".gate.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    k = config["num_experts_per_tok"]
    chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    weights = np.take_along_axis(probs, chosen, axis=-1)
    if mixtral or config.get("norm_topk_prob", False):
        weights /= weights.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    if p + "mlp.shared_expert_gate.weight" in w:   # Qwen2-MoE: sigmoid(gate(h)) * shared_expert(h)
        shared = {n: w[f"{p}mlp.shared_expert.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj")}
        g = h @ shared["gate_proj"].T
        out += ((g / (1 + np.exp(-g)) * (h @ shared["up_proj"].T)) @ shared["down_proj"].T
                / (1 + np.exp(-(h @ w[p + "mlp.shared_expert_gate.weight"].T))))
    for t in range(h.shape[0]):
        for j, e in enumerate(chosen[t]):
            gate, up, down = (w[f"{p}{block}.experts.{e}.{n}.weight"] for n in names)
            g = gate @ h[t]
            out[t] += weights[t, j] * (down @ (g / (1 + np.exp(-g)) * (up @ h[t])))
    return out


def gelu(x):
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def bert_hidden(folder: Path, ids: list[int], weights=None) -> np.ndarray:
    """BertModel's last_hidden_state [len(ids), hidden] in float64 (all tokens attended)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    w = weights if weights is not None else read_weights(folder)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    d, eps, n = hidden // heads, config["layer_norm_eps"], len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."

        def dense(name, a, p=p):
            return a @ w[p + name + ".weight"].T + w[p + name + ".bias"]
        q, k, v = (dense(f"attention.self.{m}", x).reshape(n, heads, d) for m in ("query", "key", "value"))
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = np.einsum("hqk,khd->qhd", s / s.sum(-1, keepdims=True), v).reshape(n, hidden)
        x = layer_norm(dense("attention.output.dense", a) + x, w[p + "attention.output.LayerNorm.weight"],
                       w[p + "attention.output.LayerNorm.bias"], eps)
        h = gelu(dense("intermediate.dense", x))
        x = layer_norm(dense("output.dense", h) + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
                       eps)
    return x


def mean_pooled_normalized(hidden: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean pooling (one unpadded sentence) then Normalize."""
    pooled = hidden.mean(axis=0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def dequantized(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """weights with each int4 triple (<p>.qweight, <p>.scales[, <p>.zeros]) replaced by <p>.weight,
    unpacked as nbx.core.quant documents the layout: byte j holds q[2j] low, q[2j+1] high; symmetric
    nibbles are two's complement; w = q * scale (+ the group's minimum)."""
    out = {}
    for name, value in weights.items():
        if not name.endswith(".qweight"):
            if not name.endswith((".scales", ".zeros")):
                out[name] = value
            continue
        prefix = name.removesuffix(".qweight")
        packed = value.astype(np.uint8)
        q = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.int64)
        q[..., 0::2], q[..., 1::2] = packed & 0xF, packed >> 4
        scales = weights[prefix + ".scales"]
        zeros = weights.get(prefix + ".zeros")
        if zeros is None:
            q = np.where(q >= 8, q - 16, q)
        group = q.shape[-1] // scales.shape[-1]
        w = q.astype(np.float64) * np.repeat(scales, group, axis=-1)
        out[prefix + ".weight"] = w if zeros is None else w + np.repeat(zeros, group, axis=-1)
    return out
