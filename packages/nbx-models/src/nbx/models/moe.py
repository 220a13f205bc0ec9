"""The sparse MLP of the mixture-of-experts decoders (Mixtral, Qwen2-MoE, Qwen3-MoE): their
checkpoint names, which layers are sparse, and the block itself (nbx.moe_block: router, softmax
top-k, the routed experts' SwiGLU MLPs, Qwen2-MoE's gated shared expert). Each layer's experts are stacked at load into [E, I, H] / [E, H, I] (int4
experts stack their words, scales and minima), the layout nbx.moe_experts reads.
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
    shared: bool = False    # a shared expert (shared_expert.*, gated by shared_expert_gate)


NAMING = {
    "MixtralForCausalLM": Naming("block_sparse_moe", "w1", "w3", "w2", "num_local_experts", "intermediate_size"),
    "Qwen2MoeForCausalLM": Naming("mlp", "gate_proj", "up_proj", "down_proj", "num_experts", "moe_intermediate_size",
                                  shared=True),
    "Qwen3MoeForCausalLM": Naming("mlp", "gate_proj", "up_proj", "down_proj", "num_experts", "moe_intermediate_size"),
}


def sparse_layers(architecture: str, config: dict) -> set[int]:
    """The layers whose MLP is sparse: every one of Mixtral's; Qwen2/3-MoE's per decoder_sparse_step,
    except mlp_only_layers (as transformers' Qwen3MoeDecoderLayer decides)."""
    layers = int(config["num_hidden_layers"])
    if architecture not in NAMING:
        return set()
    if architecture == "MixtralForCausalLM":
        return set(range(layers))
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
    if n.shared:
        width, p = int(config["shared_expert_intermediate_size"]), f"{prefix}{n.block}.shared_expert."
        found.update({p + "gate_proj.weight": (width, hidden), p + "up_proj.weight": (width, hidden),
                      p + "down_proj.weight": (hidden, width), f"{prefix}{n.block}.shared_expert_gate.weight": (1, hidden)})
    return found


@dataclass
class SparseMlp:
    router: nbx.Tensor      # [E, H]
    gate: object            # [E, I, H] (a Tensor or an int4 QuantizedTensor)
    up: object
    down: object            # [E, H, I]
    top_k: int
    renormalize: bool
    shared: tuple | None = None            # the shared expert's (gate, up, down)
    shared_gate: nbx.Tensor | None = None  # [1, H]

    def __call__(self, h: nbx.Tensor) -> nbx.Tensor:
        return nbx.moe_block(h, self.router, self.gate, self.up, self.down, self.top_k, renormalize=self.renormalize,
                             shared=self.shared, shared_gate=self.shared_gate)


def load(architecture: str, config: dict, get, prefix: str) -> SparseMlp:
    """One sparse layer's MLP from the checkpoint (get(name, shape) -> tensor)."""
    n = NAMING[architecture]
    need = shapes(architecture, config, prefix)
    count = int(config[n.experts_key])
    from .decoder import stack_rows
    stacked = [stack_rows([get(f"{prefix}{n.block}.experts.{e}.{name}.weight",
                               need[f"{prefix}{n.block}.experts.{e}.{name}.weight"]) for e in range(count)],
                          new_axis=True) for name in (n.gate, n.up, n.down)]
    # Mixtral always renormalizes the chosen weights; Qwen3-MoE when norm_topk_prob
    renormalize = architecture == "MixtralForCausalLM" or bool(config.get("norm_topk_prob", False))
    def one(name):
        return get(f"{prefix}{n.block}.{name}", need[f"{prefix}{n.block}.{name}"])
    shared = tuple(one(f"shared_expert.{m}.weight") for m in ("gate_proj", "up_proj", "down_proj")) if n.shared else None
    return SparseMlp(one("gate.weight"), *stacked, int(config["num_experts_per_tok"]), renormalize, shared,
                     one("shared_expert_gate.weight") if n.shared else None)
