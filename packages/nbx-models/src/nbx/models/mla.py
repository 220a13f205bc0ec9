"""DeepSeek-V2 (DeepseekV2ForCausalLM, DeepSeek-V2-Lite's architecture) written only with nbx ops:
multi-head latent attention (MLA) in front of decoder.py's layers, the MoE through moe.py.

Attention, as DeepSeek's modeling_deepseek.py computes it, per token:
  q = q_proj(h) (or q_b_proj(rms_norm(q_a_proj(h))) where q_lora_rank is set), per head [nope, rope];
  kv_a_proj_with_mqa(h) = [latent (kv_lora_rank), k_rope (qk_rope_head_dim, one for all heads)];
  kv_b_proj(rms_norm(latent)) = per head [k_nope, v]; q and k per head [nope, rope], v of v_head_dim;
  the rope dims are stored interleaved (pairs 2i, 2i + 1): the modeling code de-interleaves them
  (x.view(d/2, 2).transpose) before rotate_half. Scores scale 1/sqrt(nope + rope), times YaRN's
  mscale(factor, mscale_all_dim)^2 when the rope is scaled and mscale_all_dim is set.

How nbx runs it (the simplest correct design, not the fastest): the latent is expanded to per-head
K and V every step and the expanded K/V are what the KV cache holds, so attention is decoder.py's:
rotary_kv_cache_write and paged_attention (or the contiguous cache's scaled_dot_product_attention),
q/k head dim nope + rope, v head dim v_head_dim, the scale passed. The de-interleave is a permutation
of q_proj's and kv_a_proj_with_mqa's output rows, done once at load: each head's q and k come out of
their products as [rope (de-interleaved), nope], so the rope (nbx's half-split one over the first
qk_rope_head_dim dims, the rest passing through) applies to views with no copy, and the dot product
is DeepSeek's (the same dims, summed in another order). The faster design, a cache of the latent and
k_rope (576 values a token in V2-Lite instead of 16 x 320) with kv_b_proj absorbed into q and the
output, is not built.
"""
from __future__ import annotations

from dataclasses import dataclass

import nbx.core as nbx
from nbx.core.ops.rotary import _yarn_mscale as yarn_mscale

from . import moe
from .decoder import Decoder, DecoderFamily, Shapes, mlp_shapes, stack_rows
from .kv_cache import new_cache

ARCHITECTURE = "DeepseekV2ForCausalLM"
FAMILY = DecoderFamily(ARCHITECTURE)
# q_a_layernorm and kv_a_layernorm are DeepseekV2RMSNorm(width): its default eps, not rms_norm_eps
LATENT_NORM_EPS = 1e-6
YARN_DEFAULTS = {"original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1, "mscale": 1,
                 "mscale_all_dim": 0}   # DeepseekV2YarnRotaryEmbedding's, for keys rope_scaling leaves out


@dataclass(frozen=True)
class MlaShapes:
    heads: int
    q_lora: int      # 0: q_proj straight from the hidden state
    kv_lora: int
    nope: int
    rope: int
    v: int

    @property
    def qk(self) -> int:
        return self.nope + self.rope

    @classmethod
    def of(cls, config: dict) -> "MlaShapes":
        m = cls(int(config["num_attention_heads"]), int(config.get("q_lora_rank") or 0), int(config["kv_lora_rank"]),
                int(config["qk_nope_head_dim"]), int(config["qk_rope_head_dim"]), int(config["v_head_dim"]))
        if m.rope % 2 or m.rope < 2:
            raise nbx.NotSupportedError(f"qk_rope_head_dim {m.rope}: the rope rotates pairs, an even count >= 2")
        return m


def check_config(config: dict) -> None:
    """Refuse, by name, what DeepSeek-V2's configs may say that nbx.models does not build."""
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key):
            raise nbx.NotSupportedError(f"DeepSeek-V2 with {key}: nbx.models reads its projections without biases "
                                        "(as DeepSeek's checkpoints are)")
    if config.get("n_routed_experts") is not None:
        moe.routing(ARCHITECTURE, config)   # its own refusals: topk_method, scoring_func


def parameter_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a DeepSeek-V2 checkpoint, by its Hugging Face name (lm_head only when not tied)."""
    m = MlaShapes.of(config)
    hidden, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    sparse = moe.sparse_layers(ARCHITECTURE, config)
    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(int(config["num_hidden_layers"])):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        shapes[p + "input_layernorm.weight"] = (hidden,)
        if m.q_lora:
            shapes.update({a + "q_a_proj.weight": (m.q_lora, hidden), a + "q_a_layernorm.weight": (m.q_lora,),
                           a + "q_b_proj.weight": (m.heads * m.qk, m.q_lora)})
        else:
            shapes[a + "q_proj.weight"] = (m.heads * m.qk, hidden)
        shapes.update({a + "kv_a_proj_with_mqa.weight": (m.kv_lora + m.rope, hidden),
                       a + "kv_a_layernorm.weight": (m.kv_lora,),
                       a + "kv_b_proj.weight": (m.heads * (m.nope + m.v), m.kv_lora),
                       a + "o_proj.weight": (hidden, m.heads * m.v)})
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
        shapes.update(moe.shapes(ARCHITECTURE, config, p) if i in sparse
                      else mlp_shapes(p, hidden, int(config["intermediate_size"])))
    shapes["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def rope_first(w, blocks: int, nope: int, rope: int, first: bool = True):
    """w [blocks * (nope + rope), cols] (a projection whose output rows hold `blocks` blocks of nope
    dims, then rope dims interleaved: pair i = dims 2i, 2i + 1) with each block's rope rows
    de-interleaved as DeepSeek's apply_rotary_pos_emb orders them before rotate_half (the even ones,
    then the odd ones: pair i becomes dims i, i + rope/2) and put first (first) or kept last. An int4
    weight's words, scales and minima move alike (its groups run along the input dim)."""
    if isinstance(w, nbx.QuantizedTensor):
        return nbx.QuantizedTensor(*(None if part is None else rope_first(part, blocks, nope, rope, first)
                                     for part in (w.qweight, w.scales, w.zeros)),
                                   group_size=w.group_size, scheme=w.scheme, shape=w.shape)
    cols = w.shape[1]
    grouped = w.reshape(blocks, nope + rope, cols)
    pairs = grouped[:, nope:].reshape(blocks, rope // 2, 2, cols).permute(0, 2, 1, 3).reshape(blocks, rope, cols)
    parts = [pairs, grouped[:, :nope]] if first else [grouped[:, :nope], pairs]
    return nbx.concat(parts, axis=1).reshape(blocks * (nope + rope), cols)


def _rope_scaling(config: dict) -> tuple[str | None, dict | None]:
    """(the config key holding the rope scaling, its dict): rope_parameters (transformers 5) or rope_scaling."""
    for key in ("rope_parameters", "rope_scaling"):
        if config.get(key):
            return key, dict(config[key])
    return None, None


def rope_config(config: dict) -> dict:
    """The config nbx.rope_tables reads for DeepSeek's rope: qk_rope_head_dim wide, and YaRN's keys
    as DeepSeek's own rotary embedding defaults them, its cos/sin factor mscale(factor, mscale) /
    mscale(factor, mscale_all_dim) (1 in V2-Lite, whose two are equal)."""
    out = {**config, "head_dim": MlaShapes.of(config).rope}
    out.pop("rotary_dim", None)
    key, scaling = _rope_scaling(config)
    if scaling is not None and (scaling.get("rope_type") or scaling.get("type")) == "yarn":
        yarn = {**YARN_DEFAULTS, **{k: v for k, v in scaling.items() if v is not None}}
        factor = float(yarn["factor"])
        yarn["attention_factor"] = yarn_mscale(factor, yarn["mscale"]) / yarn_mscale(factor, yarn["mscale_all_dim"])
        out[key] = yarn
    return out


def softmax_scale(config: dict) -> float:
    """DeepseekV2Attention's softmax_scale: 1/sqrt(qk head dim), times mscale(factor, mscale_all_dim)^2
    when rope_scaling is set and names an mscale_all_dim."""
    scale = MlaShapes.of(config).qk ** -0.5
    _, scaling = _rope_scaling(config)
    if scaling is not None and scaling.get("mscale_all_dim"):
        scale *= yarn_mscale(float(scaling["factor"]), float(scaling["mscale_all_dim"])) ** 2
    return scale


@dataclass
class _MlaLayer:
    input_norm: nbx.Tensor
    w_in: object              # q_proj (or q_a_proj) and kv_a_proj_with_mqa stacked, rows in nbx's order
    q_a_norm: nbx.Tensor | None
    q_b: object | None
    kv_a_norm: nbx.Tensor
    kv_b: object
    wo: object
    post_norm: nbx.Tensor
    gate: object              # the dense MLP (None in a sparse layer), as decoder._Layer's: Decoder._mlp runs it
    up: object
    down: object
    sparse: moe.SparseMlp | None = None
    gate_bias = up_bias = down_bias = None


class MlaDecoder(Decoder):
    """DeepseekV2ForCausalLM: Decoder's API, generation, caches and captured decode steps; its own
    layers and attention."""

    def __init__(self, config: dict, weights):
        check_config(config)
        self.mla = m = MlaShapes.of(config)
        # the cache holds the expanded per-head K (nope + rope) and V
        shapes = Shapes(int(config["hidden_size"]), m.heads, m.heads, m.qk, int(config["intermediate_size"]),
                        int(config["num_hidden_layers"]), int(config["vocab_size"]))
        super().__init__(FAMILY, config, weights, local_shapes=shapes)
        self.scale = softmax_scale(config)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return parameter_shapes(self.config)

    def rope_config(self) -> dict:
        return rope_config(self.config)

    def load_layers(self, get, shapes) -> list:
        m, sparse = self.mla, moe.sparse_layers(ARCHITECTURE, self.config)
        layers = []
        for i in range(self.shapes.layers):
            p = f"model.layers.{i}."

            def w(name, p=p):
                return get(p + name, shapes[p + name]) if p + name in shapes else None
            kv_a = rope_first(w("self_attn.kv_a_proj_with_mqa.weight"), 1, m.kv_lora, m.rope, first=False)
            q = rope_first(w("self_attn.q_b_proj.weight" if m.q_lora else "self_attn.q_proj.weight"), m.heads,
                           m.nope, m.rope)
            # one product of the normed hidden state gives q (or q's latent), the kv latent and k_rope
            if m.q_lora:
                w_in, q_b = stack_rows([w("self_attn.q_a_proj.weight"), kv_a]), q
            else:
                w_in, q_b = stack_rows([q, kv_a]), None
            layers.append(_MlaLayer(
                w("input_layernorm.weight"), w_in, w("self_attn.q_a_layernorm.weight"), q_b,
                w("self_attn.kv_a_layernorm.weight"), w("self_attn.kv_b_proj.weight"), w("self_attn.o_proj.weight"),
                w("post_attention_layernorm.weight"), w("mlp.gate_proj.weight"), w("mlp.up_proj.weight"),
                w("mlp.down_proj.weight"), moe.load(ARCHITECTURE, self.config, get, p) if i in sparse else None))
        return layers

    def new_cache(self, capacities: list[int]):
        m = self.mla
        return new_cache(self.shapes.layers, m.heads, m.qk, capacities, self.dtype, self.device, v_head_dim=m.v)

    def _attention(self, index, layer: _MlaLayer, x, pos, step, total):
        m = self.mla
        a = self.normed_linear(x, layer.input_norm, layer.w_in)   # [total, q columns + kv_lora + rope]
        nq = m.q_lora or m.heads * m.qk
        q = a[:, :nq]
        if layer.q_b is not None:
            q = nbx.linear(nbx.rms_norm(q, (m.q_lora,), layer.q_a_norm, LATENT_NORM_EPS), layer.q_b)
        q = q.reshape(total, m.heads, m.qk)                       # each head [rope, nope]
        latent = nbx.rms_norm(a[:, nq:nq + m.kv_lora], (m.kv_lora,), layer.kv_a_norm, LATENT_NORM_EPS)
        kv = nbx.linear(latent, layer.kv_b).reshape(total, m.heads, m.nope + m.v)   # each head [k_nope, v]
        k_rope = a[:, nq + m.kv_lora:].reshape(total, 1, m.rope).broadcast_to((total, m.heads, m.rope))
        k = nbx.concat([k_rope, kv[:, :, :m.nope]], axis=-1)      # each head [rope, nope], as q
        out = step.attend(index, q, k, kv[:, :, m.nope:], self._cos, self._sin, pos, None, scale=self.scale)
        return self.output_linear(out.reshape(total, m.heads * m.v), layer.wo, None, x)

    def memory_plan(self, prompt_lengths: list[int], max_new_tokens: int):
        raise nbx.NotSupportedError("memory_plan prices the Llama-style decoders' layers; DeepSeek-V2's MLA and "
                                    "mixture-of-experts layers are not priced yet")
