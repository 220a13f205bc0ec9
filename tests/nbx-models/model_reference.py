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


# ---- DeepSeek-V2 (modeling_deepseek.py, trust_remote_code): MLA attention, DeepseekV2MoE --------------

def _yarn_get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deepseek_rope(config: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [n, qk_rope_head_dim] as DeepseekV2RotaryEmbedding (or its YaRN form) caches them:
    cat(freqs, freqs), YaRN's ramp between the interpolated and extrapolated frequencies, and
    cos/sin times mscale(factor, mscale) / mscale(factor, mscale_all_dim). Written from the
    modeling code, not from nbx.rope_tables."""
    dim, base = config["qk_rope_head_dim"], config.get("rope_theta", 10000.0)
    scaling = config.get("rope_scaling") or {}
    extra = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    factor_cs = 1.0
    kind = scaling.get("type") or scaling.get("rope_type")
    if kind == "yarn":
        factor = scaling["factor"]
        original = scaling.get("original_max_position_embeddings", 4096)
        fast, slow = scaling.get("beta_fast", 32), scaling.get("beta_slow", 1)

        def correction(rotations):
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))
        low, high = max(math.floor(correction(fast)), 0), min(math.ceil(correction(slow)), dim - 1)
        high = high + 0.001 if low == high else high
        keep = 1.0 - np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)   # 1: the extrapolated frequency
        inv_freq = (extra / factor) * (1 - keep) + extra * keep
        factor_cs = (_yarn_get_mscale(factor, scaling.get("mscale", 1)) /
                     _yarn_get_mscale(factor, scaling.get("mscale_all_dim", 0)))
    elif kind is None:
        inv_freq = extra
    else:
        raise NotImplementedError(f"the reference builds DeepSeek's default and yarn ropes, not {kind}")
    freqs = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb) * factor_cs, np.sin(emb) * factor_cs


def deepseek_softmax_scale(config: dict) -> float:
    scale = (config["qk_nope_head_dim"] + config["qk_rope_head_dim"]) ** -0.5
    scaling = config.get("rope_scaling")
    if scaling is not None and scaling.get("mscale_all_dim", 0):
        scale *= _yarn_get_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
    return scale


def deepseek_apply_rope(x, cos, sin):
    """apply_rotary_pos_emb on x [n, heads, d]: the interleaved dims de-interleaved (view(d/2, 2).transpose),
    then x * cos + rotate_half(x) * sin."""
    n, heads, d = x.shape
    x = x.reshape(n, heads, d // 2, 2).transpose(0, 1, 3, 2).reshape(n, heads, d)
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def deepseek_v2_logits(folder: Path, ids: list[int], weights=None) -> np.ndarray:
    """[len(ids), vocab] float64 logits of a DeepseekV2ForCausalLM checkpoint, as DeepSeek's code computes them."""
    config = json.loads((Path(folder) / "config.json").read_text())
    w = weights if weights is not None else read_weights_bf16_aware(folder)
    heads, eps, n = config["num_attention_heads"], config["rms_norm_eps"], len(ids)
    nope, rope, vd, lora = (config[k] for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))
    cos, sin = deepseek_rope(config, n)
    causal = np.arange(n)[None, :] <= np.arange(n)[:, None]
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        if config.get("q_lora_rank"):
            q_latent = rms_norm(h @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], 1e-6)
            q = q_latent @ w[a + "q_b_proj.weight"].T
        else:
            q = h @ w[a + "q_proj.weight"].T
        q = q.reshape(n, heads, nope + rope)
        compressed = h @ w[a + "kv_a_proj_with_mqa.weight"].T
        latent, k_pe = compressed[:, :lora], compressed[:, lora:].reshape(n, 1, rope)
        kv = (rms_norm(latent, w[a + "kv_a_layernorm.weight"], 1e-6) @ w[a + "kv_b_proj.weight"].T
              ).reshape(n, heads, nope + vd)
        k_nope, v = kv[..., :nope], kv[..., nope:]
        q_pe, k_pe = deepseek_apply_rope(q[..., nope:], cos, sin), deepseek_apply_rope(k_pe, cos, sin)
        query = np.concatenate([q[..., :nope], q_pe], axis=-1)
        key = np.concatenate([k_nope, np.repeat(k_pe, heads, axis=1)], axis=-1)
        scores = np.einsum("qhd,khd->hqk", query, key) * deepseek_softmax_scale(config)
        scores = np.where(causal[None], scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attn = np.einsum("hqk,khd->qhd", scores / scores.sum(-1, keepdims=True), v).reshape(n, heads * vd)
        x = x + attn @ w[a + "o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + (deepseek_moe(config, w, p, h) if p + "mlp.gate.weight" in w else _swiglu(w, p + "mlp.", h))
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight") if not config.get("tie_word_embeddings", False) else None
    return x @ (w["model.embed_tokens.weight"] if head is None else head).T


def _swiglu(w, p, h):
    g = h @ w[p + "gate_proj.weight"].T
    return (g / (1 + np.exp(-g)) * (h @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def deepseek_moe(config: dict, w: dict, p: str, h: np.ndarray) -> np.ndarray:
    """DeepseekV2MoE: MoEGate's softmax scores, top num_experts_per_tok (greedy, or group_limited_greedy:
    scores outside the topk_group groups of the highest max zeroed first), then normalized when
    top_k > 1 and norm_topk_prob, else times routed_scaling_factor; the experts' sum plus the shared experts."""
    logits = h @ w[p + "mlp.gate.weight"].T
    scores = np.exp(logits - logits.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    k, tokens = config["num_experts_per_tok"], h.shape[0]
    choice = scores
    if config.get("topk_method", "greedy") == "group_limited_greedy":
        groups = scores.reshape(tokens, config["n_group"], -1)
        kept = np.argsort(-groups.max(-1), axis=-1, kind="stable")[:, :config["topk_group"]]
        mask = np.zeros(groups.shape[:2], bool)
        np.put_along_axis(mask, kept, True, axis=1)
        choice = np.where(np.repeat(mask, groups.shape[2], axis=1), scores, 0.0)
    chosen = np.argsort(-choice, axis=-1, kind="stable")[:, :k]
    weights = np.take_along_axis(choice, chosen, axis=-1)
    if k > 1 and config.get("norm_topk_prob"):
        weights = weights / (weights.sum(-1, keepdims=True) + 1e-20)
    else:
        weights = weights * config.get("routed_scaling_factor", 1.0)
    out = np.zeros_like(h)
    for t in range(tokens):
        for j, e in enumerate(chosen[t]):
            out[t] += weights[t, j] * _swiglu(w, f"{p}mlp.experts.{e}.", h[t:t + 1])[0]
    if config.get("n_shared_experts"):
        out += _swiglu(w, p + "mlp.shared_experts.", h)
    return out
