"""The sparse MLP of the mixture-of-experts decoders (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2):
their checkpoint names, which layers are sparse, and the block itself (nbx.moe_block: router, softmax
top-k (DeepSeek-V2's group-limited top-k and routed scaling), the routed experts' SwiGLU MLPs,
Qwen2-MoE's gated shared expert, DeepSeek's ungated shared experts). Each layer's experts are
stacked at load into [E, I, H] / [E, H, I] (int4 experts stack their words, scales and minima), the
layout nbx.moe_experts reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import nbx.core as nbx


@dataclass(frozen=True)
class Naming:
    """Where a family's checkpoint keeps a sparse layer: the block's module, its router, and each
    expert's gate, up and down projections; the config keys of the expert count, top-k and width."""
    block: str
    gate: str
    up: str
    down: str
    experts_key: str
    inter_key: str
    shared: str | None = None   # the shared expert's module: Qwen2-MoE's shared_expert, DeepSeek's shared_experts
    shared_gated: bool = False  # the shared expert scaled by sigmoid(shared_expert_gate(h)) (Qwen2-MoE)


NAMING = {
    "MixtralForCausalLM": Naming("block_sparse_moe", "w1", "w3", "w2", "num_local_experts", "intermediate_size"),
    "Qwen2MoeForCausalLM": Naming("mlp", "gate_proj", "up_proj", "down_proj", "num_experts", "moe_intermediate_size",
                                  shared="shared_expert", shared_gated=True),
    "Qwen3MoeForCausalLM": Naming("mlp", "gate_proj", "up_proj", "down_proj", "num_experts", "moe_intermediate_size"),
    "DeepseekV2ForCausalLM": Naming("mlp", "gate_proj", "up_proj", "down_proj", "n_routed_experts",
                                    "moe_intermediate_size", shared="shared_experts"),
}
# DeepSeek-V2's topk_method values and the grouping nbx.moe_route takes for each ("noaux_tc" is V3's:
# sigmoid scores with a correction bias, refused by name)
DEEPSEEK_TOPK = ("greedy", "group_limited_greedy")


def sparse_layers(architecture: str, config: dict) -> set[int]:
    """The layers whose MLP is sparse: every one of Mixtral's; Qwen2/3-MoE's per decoder_sparse_step,
    except mlp_only_layers (as transformers' Qwen3MoeDecoderLayer decides)."""
    layers = int(config["num_hidden_layers"])
    if architecture not in NAMING:
        return set()
    if architecture == "MixtralForCausalLM":
        return set(range(layers))
    if architecture == "DeepseekV2ForCausalLM":   # DeepseekV2DecoderLayer's rule
        if config.get("n_routed_experts") is None:
            return set()
        first, freq = int(config.get("first_k_dense_replace", 0)), int(config.get("moe_layer_freq", 1))
        return {i for i in range(layers) if i >= first and i % freq == 0}
    step, dense = int(config.get("decoder_sparse_step", 1)), set(config.get("mlp_only_layers") or ())
    if int(config.get("num_experts", 0)) <= 0:
        return set()
    return {i for i in range(layers) if i not in dense and (i + 1) % step == 0}


def shapes(architecture: str, config: dict, prefix: str) -> dict[str, tuple[int, ...]]:
    """The tensors of one sparse layer's MLP (prefix: 'model.layers.<i>.')."""
    n = NAMING[architecture]
    hidden, count, inter = int(config["hidden_size"]), int(config[n.experts_key]), int(config[n.inter_key])
    found = {f"{prefix}{n.block}.gate.weight": (count, hidden)}
    for e in range(count):
        p = f"{prefix}{n.block}.experts.{e}."
        found.update({p + f"{n.gate}.weight": (inter, hidden), p + f"{n.up}.weight": (inter, hidden),
                      p + f"{n.down}.weight": (hidden, inter)})
    width = _shared_width(architecture, config)
    if width:
        p = f"{prefix}{n.block}.{n.shared}."
        found.update({p + "gate_proj.weight": (width, hidden), p + "up_proj.weight": (width, hidden),
                      p + "down_proj.weight": (hidden, width)})
        if n.shared_gated:
            found[f"{prefix}{n.block}.shared_expert_gate.weight"] = (1, hidden)
    return found


def _shared_width(architecture: str, config: dict) -> int:
    """The shared expert's intermediate width (0: none): Qwen2-MoE's shared_expert_intermediate_size,
    DeepSeek's n_shared_experts experts of moe_intermediate_size as one MLP."""
    if NAMING[architecture].shared is None:
        return 0
    if architecture == "DeepseekV2ForCausalLM":
        return int(config.get("n_shared_experts") or 0) * int(config["moe_intermediate_size"])
    return int(config["shared_expert_intermediate_size"])


def routing(architecture: str, config: dict) -> dict:
    """nbx.moe_route's options of a family's router: renormalize (Mixtral always, Qwen3-MoE when
    norm_topk_prob); DeepSeek-V2's MoEGate renormalizes when top_k > 1 and norm_topk_prob and else
    scales by routed_scaling_factor (never both), its group_limited_greedy keeps the topk_group groups
    of the highest max score."""
    if architecture != "DeepseekV2ForCausalLM":
        return {"renormalize": architecture == "MixtralForCausalLM" or bool(config.get("norm_topk_prob", False))}
    method, scoring = config.get("topk_method", "greedy"), config.get("scoring_func", "softmax")
    if method not in DEEPSEEK_TOPK:
        raise nbx.NotSupportedError(f"DeepSeek-V2 topk_method {method!r}: nbx.models routes {DEEPSEEK_TOPK} "
                                    "('noaux_tc', DeepSeek-V3's sigmoid routing with a correction bias, is not built)")
    if scoring != "softmax":
        raise nbx.NotSupportedError(f"DeepSeek-V2 scoring_func {scoring!r}: nbx.models routes with softmax scores")
    renormalize = int(config["num_experts_per_tok"]) > 1 and bool(config.get("norm_topk_prob", False))
    options = {"renormalize": renormalize,
               "scaling": 1.0 if renormalize else float(config.get("routed_scaling_factor", 1.0))}
    if method == "group_limited_greedy":
        options.update(n_group=int(config["n_group"]), topk_group=int(config["topk_group"]), group_score="max")
    return options


@dataclass
class SparseMlp:
    router: nbx.Tensor      # [E, H]
    gate: object            # [E, I, H] (a Tensor or an int4 QuantizedTensor)
    up: object
    down: object            # [E, H, I]
    top_k: int
    routing: dict                          # nbx.moe_route's options (renormalize, scaling, groups): routing()
    shared: tuple | None = None            # the shared expert's (gate, up, down)
    shared_gate: nbx.Tensor | None = None  # [1, H]

    def __call__(self, h: nbx.Tensor) -> nbx.Tensor:
        return nbx.moe_block(h, self.router, self.gate, self.up, self.down, self.top_k, shared=self.shared,
                             shared_gate=self.shared_gate, **self.routing)


def load(architecture: str, config: dict, get, prefix: str) -> SparseMlp:
    """One sparse layer's MLP from the checkpoint (get(name, shape) -> tensor)."""
    n = NAMING[architecture]
    need = shapes(architecture, config, prefix)
    count = int(config[n.experts_key])
    from .decoder import stack_rows
    stacked = [stack_rows([get(f"{prefix}{n.block}.experts.{e}.{name}.weight",
                               need[f"{prefix}{n.block}.experts.{e}.{name}.weight"]) for e in range(count)],
                          new_axis=True) for name in (n.gate, n.up, n.down)]
    def one(name):
        return get(f"{prefix}{n.block}.{name}", need[f"{prefix}{n.block}.{name}"])
    shared = (tuple(one(f"{n.shared}.{m}.weight") for m in ("gate_proj", "up_proj", "down_proj"))
              if _shared_width(architecture, config) else None)
    return SparseMlp(one("gate.weight"), *stacked, int(config["num_experts_per_tok"]), routing(architecture, config),
                     shared, one("shared_expert_gate.weight") if n.shared_gated else None)
