"""Llama-style decoders (Llama 1-3.x, Mistral, Qwen2/2.5, Qwen3; Mixtral, Qwen2-MoE and Qwen3-MoE, whose
sparse MLPs are moe.py's) written only with nbx ops; mla.py's DeepSeek-V2 is a Decoder with its own
layers and attention.

One forward serves prefill and decode, for one sequence or several of different lengths: the
tokens of all sequences are packed into one [tokens, hidden] matrix for the products, norms and
rotary embedding; attention runs over each sequence's KV cache (kv_cache.py: nbx.memory's paged
cache, one paged_attention for the batch, where installed) with bottom-right causal alignment: a
query row sees its own position and every earlier key.

The families differ only in what their config and checkpoint say: q/k/v (and o) biases (Qwen2;
Llama with attention_bias), q/k RMS norms per head (Qwen3), a sliding window (Mistral; Qwen2 with
use_sliding_window on the layers past max_window_layers; any config's `layer_types`), Llama-3's
rope scaling (through nbx.core's rope tables, which read rope_scaling or rope_parameters).
"""
from __future__ import annotations

from dataclasses import dataclass

import nbx.core as nbx

from .checkpoint import Weights
from .config import eos_ids
from .errors import CheckpointError
from .graph_decode import GraphDecode
from .graph_decode import available as graph_available
from .kv_cache import new_cache
from . import moe
from .sampling import pick, pick_tokens

# Rows up to which the RMS norm before a product rides in its loads (norm=) instead of a launch of its
# own. 0: on the H200 (2026-12-01, bench_models.py) the normed products at decode rows made the step
# slower, not faster (1B shape 838.9 -> 800.5 tok/s, 8B shape's 2 layers 1,723 -> 1,372): the normed
# GEMV holds twice the registers (128 against 63 at the split decode tile) under tiles certified for
# the plain one. Again on 2026-12-02 with the gemv form certified for qkv and o (tools/bench/profile_decode.py
# --norm-rows 16): 1289 against 1154 us a token (the normed qkv gemv 7.57 us against 6.71 plus a 1.8 us
# norm launch; the normed gated tiles 22.84 against 18.59). Raise it once the normed keys are certified
# and measured faster.
NORM_FUSED_ROWS = 0
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_new": "gelu_tanh", "relu": "relu"}


@dataclass(frozen=True)
class DecoderFamily:
    architecture: str
    qkv_bias: bool | None = None   # None: the config's attention_bias says
    qk_norm: bool = False


FAMILIES = {f.architecture: f for f in (
    DecoderFamily("LlamaForCausalLM"),
    DecoderFamily("MistralForCausalLM"),
    DecoderFamily("Qwen2ForCausalLM", qkv_bias=True),
    DecoderFamily("Qwen3ForCausalLM", qk_norm=True),
    DecoderFamily("MixtralForCausalLM"),                    # sparse MLPs: moe.py
    DecoderFamily("Qwen2MoeForCausalLM", qkv_bias=True),
    DecoderFamily("Qwen3MoeForCausalLM", qk_norm=True),
)}


@dataclass(frozen=True)
class Shapes:
    """The sizes a decoder's config implies."""
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    layers: int
    vocab: int

    @classmethod
    def of(cls, config: dict) -> "Shapes":
        heads = int(config["num_attention_heads"])
        return cls(int(config["hidden_size"]), heads, int(config.get("num_key_value_heads") or heads),
                   int(config.get("head_dim") or config["hidden_size"] // heads), int(config["intermediate_size"]),
                   int(config["num_hidden_layers"]), int(config["vocab_size"]))


def _biases(family: DecoderFamily, config: dict) -> tuple[bool, bool]:
    """(q/k/v have biases, o has one)."""
    if family.qkv_bias is not None:
        return family.qkv_bias, False
    on = bool(config.get("attention_bias", False))
    return on, on


def parameter_shapes(family: DecoderFamily, config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, by its Hugging Face name (lm_head only when not tied)."""
    s = Shapes.of(config)
    qkv_bias, o_bias = _biases(family, config)
    mlp_bias = bool(config.get("mlp_bias", False))
    shapes = {"model.embed_tokens.weight": (s.vocab, s.hidden)}
    for i in range(s.layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (s.hidden,)
        for name, rows in (("q", s.heads), ("k", s.kv_heads), ("v", s.kv_heads)):
            shapes[p + f"self_attn.{name}_proj.weight"] = (rows * s.head_dim, s.hidden)
            if qkv_bias:
                shapes[p + f"self_attn.{name}_proj.bias"] = (rows * s.head_dim,)
        shapes[p + "self_attn.o_proj.weight"] = (s.hidden, s.heads * s.head_dim)
        if o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (s.hidden,)
        if family.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (s.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (s.head_dim,)
        shapes[p + "post_attention_layernorm.weight"] = (s.hidden,)
        if i in moe.sparse_layers(family.architecture, config):
            shapes.update(moe.shapes(family.architecture, config, p))
            continue
        shapes.update(mlp_shapes(p, s.hidden, s.intermediate, mlp_bias))
    shapes["model.norm.weight"] = (s.hidden,)
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (s.vocab, s.hidden)
    return shapes


def mlp_shapes(prefix: str, hidden: int, intermediate: int, bias: bool = False) -> dict[str, tuple[int, ...]]:
    """A dense SwiGLU MLP's tensors (mlp.gate_proj, up_proj, down_proj) of the layer at prefix."""
    shapes = {}
    for name, shape in (("gate", (intermediate, hidden)), ("up", (intermediate, hidden)),
                        ("down", (hidden, intermediate))):
        shapes[prefix + f"mlp.{name}_proj.weight"] = shape
        if bias:
            shapes[prefix + f"mlp.{name}_proj.bias"] = shape[:1]
    return shapes


def layer_windows(config: dict) -> list[int | None]:
    """The sliding window (in keys, the query's own included) of each layer, None for full attention."""
    layers = int(config["num_hidden_layers"])
    window = config.get("sliding_window")
    types = config.get("layer_types")
    if types is None:
        if config.get("use_sliding_window") is False or window is None:
            types = ["full_attention"] * layers
        elif "max_window_layers" in config and config.get("use_sliding_window"):  # Qwen2's rule
            types = ["sliding_attention" if i >= config["max_window_layers"] else "full_attention"
                     for i in range(layers)]
        else:
            types = ["sliding_attention"] * layers
    if len(types) != layers:
        raise CheckpointError(f"config.json's layer_types lists {len(types)} layers; num_hidden_layers is {layers}")
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise nbx.NotSupportedError(f"layer_types {unknown}: nbx.models knows full_attention and sliding_attention")
    return [int(window) if t == "sliding_attention" and window is not None else None for t in types]


# an int4 MLP's gate and up as one gated_linear launch (the int4 kernel's GATED form, x read once)
# instead of two int4 launches and a multiply. False until the gated_linear_int4 tunable is certified
# for the H200 and timed there against the two launches (built 2026-12-03 without device time: an
# uncertified key would run the device file's prefill tile at decode rows)
INT4_PAIR_FUSED = False


def _quantized(*weights) -> bool:
    return any(isinstance(w, nbx.QuantizedTensor) for w in weights)


def stack_rows(weights: list, new_axis: bool = False):
    """The [out, in] weights (or biases) one above the other: one product gives q, k and v; or,
    new_axis, stacked along a new first dim (a layer's experts: [E, out, in]). int4 weights stack
    their words, scales and minima (their groups run along the input dim)."""
    join = nbx.stack if new_axis else nbx.concat
    if all(isinstance(w, nbx.Tensor) for w in weights):
        return join(weights, axis=0)
    first = weights[0]
    if not all(isinstance(w, nbx.QuantizedTensor) and (w.scheme, w.group_size, w.scales.dtype) ==
               (first.scheme, first.group_size, first.scales.dtype) for w in weights):
        raise nbx.NotSupportedError("weights joined into one tensor stored differently (dense and int4, or int4 of "
                                    "other groups): nbx.models stacks q, k and v, and a layer's experts")
    zeros = None if first.zeros is None else join([w.zeros for w in weights], axis=0)
    shape = (len(weights), *first.shape) if new_axis else (sum(w.shape[0] for w in weights), first.shape[1])
    return nbx.QuantizedTensor(join([w.qweight for w in weights], axis=0), join([w.scales for w in weights], axis=0),
                               zeros, group_size=first.group_size, scheme=first.scheme, shape=shape)


@dataclass
class _Layer:
    input_norm: nbx.Tensor
    wqkv: nbx.Tensor          # q, k and v projections stacked: [(heads + 2 kv_heads) * head_dim, hidden]
    bqkv: nbx.Tensor | None
    wo: nbx.Tensor
    bo: nbx.Tensor | None
    q_norm: nbx.Tensor | None
    k_norm: nbx.Tensor | None
    post_norm: nbx.Tensor
    gate: nbx.Tensor
    up: nbx.Tensor
    down: nbx.Tensor
    gate_bias: nbx.Tensor | None
    up_bias: nbx.Tensor | None
    down_bias: nbx.Tensor | None
    window: int | None
    sparse: moe.SparseMlp | None = None   # a mixture-of-experts layer's MLP (gate, up and down are then None)


class Decoder:
    """A causal language model. Token ids in (lists of ints), float32 logits or new token ids out."""

    kind = "decoder"
    graph_decoding = True   # decode steps replay a captured graph where nbx.graph and the paged cache are

    def __init__(self, family: DecoderFamily, config: dict, weights: Weights, local_shapes=None):
        """local_shapes: the sizes this process holds (a tensor-parallel rank's share of the heads,
        the MLP and the vocabulary; weights then hands out that rank's shards). Default: all of them."""
        self.family, self.config = family, config
        self.device = weights.device
        self.shapes = s = local_shapes or Shapes.of(config)
        self.vocab = int(config["vocab_size"])
        shapes = self.parameter_shapes()
        get = weights.get
        self.embed = get("model.embed_tokens.weight", shapes["model.embed_tokens.weight"])
        if _quantized(self.embed):
            raise nbx.NotSupportedError("an int4 embedding table: nbx.models reads int4 projections only")
        self.dtype = self.embed.dtype
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        activation = config.get("hidden_act", "silu")
        if activation not in ACTIVATIONS:
            raise nbx.NotSupportedError(f"hidden_act {activation!r}: nbx.models knows {sorted(ACTIVATIONS)}")
        self.activation = ACTIVATIONS[activation]
        self.eos = eos_ids(config, getattr(weights, "folder", None))   # seeded weights have no folder
        self.max_positions = int(config.get("max_position_embeddings") or 2048)
        self.layers = self.load_layers(get, shapes)
        self.norm = get("model.norm.weight", (s.hidden,))
        # tied embeddings: HF writes no lm_head (or one equal to the embeddings, which is not read)
        tied = "lm_head.weight" not in shapes
        self.lm_head = self.embed if tied else get("lm_head.weight", shapes["lm_head.weight"])
        self._cos = self._sin = None
        self._kept = None   # (key, cache, graph decode) of the last generation, reused by the next of its sizes

    # ---- what a family of its own (mla.py's DeepSeek-V2) changes ------------------------------
    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of the checkpoint this decoder reads, by name."""
        return parameter_shapes(self.family, self.config)

    def load_layers(self, get, shapes) -> list:
        """The decoder layers from the checkpoint (get(name, shape) -> tensor)."""
        family, config, s = self.family, self.config, self.shapes
        windows = layer_windows(config)
        sparse = moe.sparse_layers(family.architecture, config)
        layers = []
        for i in range(s.layers):
            p = f"model.layers.{i}."

            def w(name, p=p):
                return get(p + name, shapes[p + name]) if p + name in shapes else None
            qkv = [w(f"self_attn.{n}_proj.weight") for n in "qkv"]
            biases = [w(f"self_attn.{n}_proj.bias") for n in "qkv"]
            layers.append(_Layer(
                w("input_layernorm.weight"), stack_rows(qkv), None if biases[0] is None else stack_rows(biases),
                w("self_attn.o_proj.weight"), w("self_attn.o_proj.bias"),
                w("self_attn.q_norm.weight"), w("self_attn.k_norm.weight"), w("post_attention_layernorm.weight"),
                w("mlp.gate_proj.weight"), w("mlp.up_proj.weight"), w("mlp.down_proj.weight"),
                w("mlp.gate_proj.bias"), w("mlp.up_proj.bias"), w("mlp.down_proj.bias"), windows[i],
                moe.load(family.architecture, config, get, p) if i in sparse else None))
        return layers

    def rope_config(self) -> dict:
        """The config nbx.rope_tables reads for this decoder's rotary tables."""
        return self.config

    # ---- the public API --------------------------------------------------------------------
    def logits(self, token_ids) -> nbx.Tensor:
        """float32 logits [len(token_ids), vocab] of one sequence (each position's next-token scores)."""
        return self.logits_batch([token_ids])[0]

    def logits_batch(self, sequences) -> list[nbx.Tensor]:
        """float32 logits [len(seq), vocab] of each sequence (sequences of any lengths, run packed)."""
        sequences = [self._checked_ids(seq) for seq in sequences]
        self._check_fits(sequences, 0)
        cache = self.new_cache([len(seq) for seq in sequences])
        out = self.forward(sequences, cache, list(range(len(sequences))), last_only=False)
        return [t.to(dtype=nbx.float32) for t in out]

    def generate(self, token_ids, max_new_tokens: int, temperature: float = 0.0, top_k=None, top_p=None,
                 seed=None, on_token=None) -> list[int]:
        """The new token ids (greedy at temperature 0), stopping after an EOS id or max_new_tokens."""
        callback = None if on_token is None else (lambda _, token: on_token(token))
        return self.generate_batch([token_ids], max_new_tokens, temperature, top_k, top_p, seed, callback)[0]

    def generate_batch(self, sequences, max_new_tokens: int, temperature: float = 0.0, top_k=None, top_p=None,
                       seed=None, on_token=None) -> list[list[int]]:
        """generate for several prompts of different lengths at once; on_token(index, token) as each comes."""
        sequences = [self._checked_ids(seq) for seq in sequences]
        if max_new_tokens < 0:
            raise nbx.ArgumentError(f"max_new_tokens is >= 0, got {max_new_tokens}")
        new = [[] for _ in sequences]
        if max_new_tokens == 0:
            return new
        self._check_fits(sequences, max_new_tokens)
        generator = None if seed is None else nbx.Generator(seed=seed)
        cache, graph = self._decode_state([len(seq) + max_new_tokens for seq in sequences])
        self.last_decode = "graph" if graph is not None else "eager"   # what decoded (the tests read it)
        active = list(range(len(sequences)))
        step_ids = sequences
        draw = None if temperature == 0 else (lambda logits: pick(logits, temperature, top_k, top_p, generator))
        begun = None   # the rows the captured decode step was last given
        for step in range(max_new_tokens):
            if step and graph is not None:
                if begun != active:   # the first decode step, or a sequence ended: the rows' state written once
                    graph.begin(active, [seq[0] for seq in step_ids])
                    begun = list(active)
                tokens = graph.next_tokens(draw)   # one replay, one read
            else:
                rows = self.forward(step_ids, cache, active, last_only=True)
                tokens = pick_tokens(rows, temperature, top_k, top_p, generator)
                del rows   # the step's logits go before the next step runs (memory_plan prices one step's)
            still = []
            for i, token in zip(active, tokens):
                new[i].append(token)
                if on_token is not None:
                    on_token(i, token)
                if token not in self.eos and len(new[i]) < max_new_tokens:
                    still.append((i, token))
            if not still:
                break
            active = [i for i, _ in still]
            step_ids = [[token] for _, token in still]
        if graph is not None:
            graph.check()   # the steps' deferred bounds flag, read once for the whole generation
        return new

    def _decode_state(self, capacities: list[int]):
        """(cache, graph decode or None) for a generation of these capacities. The last ones are
        kept and reused, emptied, by the next generation of the same capacities: its captured
        decode steps replay again instead of being captured anew (a serving loop's case)."""
        use_graph = self.graph_decoding
        self._ensure_rope(max(capacities))   # the tables the whole generation reads, built before anything is kept
        kept = self._kept
        if kept is not None and kept[0] == (tuple(capacities), use_graph):
            kept[1].reset()
            if kept[2] is not None:
                kept[2].reset()
            return kept[1], kept[2]
        del kept   # the old cache goes before the new one is made: never two at once
        self.release_cache()
        cache = self.new_cache(capacities)
        graph = GraphDecode(self, cache) if use_graph and graph_available(cache) else None
        self._kept = ((tuple(capacities), use_graph), cache, graph)
        return cache, graph

    def decode_graph_bytes(self) -> int:
        """Bytes the kept captured decode steps hold in their private pools (nbx.graph), which the
        device allocator's figures (its peak included) do not count; 0 when decoding eagerly."""
        kept = self._kept
        return 0 if kept is None or kept[2] is None else kept[2].reserved

    def decode_step_kernels(self):
        """(graph nodes or None where eager, declared launches, op calls) of one token of the kept
        captured decode step (GraphDecode.step_kernels); None when decoding eagerly."""
        kept = self._kept
        return None if kept is None or kept[2] is None else kept[2].step_kernels()

    def release_cache(self) -> None:
        """Give back the KV cache (and the captured decode steps) the last generation kept."""
        kept = self._kept
        self._kept = None
        if kept is not None and kept[2] is not None:
            kept[2].close()

    def new_cache(self, capacities: list[int]):
        """A KV cache for sequences 0..len(capacities)-1, each holding up to its capacity in tokens."""
        s = self.shapes
        return new_cache(s.layers, s.kv_heads, s.head_dim, capacities, self.dtype, self.device)

    # ---- the forward ----------------------------------------------------------------------
    def forward(self, sequences: list[list[int]], cache, seqs: list[int], last_only: bool):
        """Run the tokens of sequences[i] after what cache holds of sequence seqs[i]. last_only: the
        logits [len(sequences), vocab] of each one's last token (in the model's dtype); else a list
        of [len(sequence), vocab]."""
        s = self.shapes
        lengths = [len(seq) for seq in sequences]
        total = sum(lengths)
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        positions = [held + j for held, n in zip(cache.lengths(seqs), lengths) for j in range(n)]
        self._ensure_rope(max(positions) + 1)
        ids = nbx.asarray([t for seq in sequences for t in seq], dtype=nbx.int64, device=self.device)
        pos = nbx.asarray(positions, dtype=nbx.int64, device=self.device)
        step = cache.begin(seqs, lengths)
        x = self.layers_forward(self.embed_rows(ids), pos, step, total)
        cache.end()
        if last_only:   # views of the last rows: no gather launch
            last = [x[a + n - 1:a + n] for a, n in zip(starts, lengths)]
            x = last[0] if len(last) == 1 else nbx.concat(last, axis=0)
        logits = self.head(x)
        if last_only:
            return logits
        return [logits[a:a + n] for a, n in zip(starts, lengths)]

    def layers_forward(self, x, pos, step, total: int):
        """Every decoder layer over x [total, hidden] at positions pos, attention through step. Each
        half of a layer is a method of its own, so its temporaries are gone before the next half
        runs (memory_plan prices one half's)."""
        for index, layer in enumerate(self.layers):
            x = self._attention(index, layer, x, pos, step, total)
            x = self._mlp(layer, x)
        return x

    def _mlp(self, layer: _Layer, x):
        if layer.sparse is None and self.mlp_fused(layer) and self.norm_fused(x, layer.gate):
            inner = nbx.gated_linear(x, layer.gate, layer.up, activation=self.activation,
                                     norm=(layer.post_norm, self.eps))
            return self.output_linear(inner, layer.down, layer.down_bias, x)
        h = nbx.rms_norm(x, (self.shapes.hidden,), layer.post_norm, self.eps)
        if layer.sparse is not None:
            return x + layer.sparse(h)
        if self.mlp_fused(layer):
            inner = nbx.gated_linear(h, layer.gate, layer.up, activation=self.activation)
        else:
            inner = (nbx.linear(h, layer.gate, layer.gate_bias, activation=self.activation)
                     * nbx.linear(h, layer.up, layer.up_bias))
        return self.output_linear(inner, layer.down, layer.down_bias, x)

    @staticmethod
    def mlp_fused(layer: _Layer) -> bool:
        """The SwiGLU pair runs as one gated_linear (no biases; dense weights, or both int4 while
        INT4_PAIR_FUSED); else as two products."""
        if layer.gate_bias is not None or layer.up_bias is not None:
            return False
        int4 = [isinstance(w, nbx.QuantizedTensor) for w in (layer.gate, layer.up)]
        return not any(int4) or INT4_PAIR_FUSED and all(int4)

    @staticmethod
    def norm_fused(x, weight) -> bool:
        """Whether the RMS norm of x before its product by weight runs inside the product (norm=): for
        decode rows (a few rows, where a norm launch costs more than its bytes) and dense weights."""
        return x.shape[0] <= NORM_FUSED_ROWS and not _quantized(weight)

    def normed_linear(self, x, norm_weight, weight, bias=None):
        """linear(rms_norm(x, norm_weight), weight, bias): one launch for decode rows, two for prefill."""
        if self.norm_fused(x, weight):
            return nbx.linear(x, weight, bias, norm=(norm_weight, self.eps))
        return nbx.linear(nbx.rms_norm(x, (self.shapes.hidden,), norm_weight, self.eps), weight, bias)

    def head(self, x):
        """The final norm and the lm_head: logits of each row of x."""
        return self.normed_linear(x, self.norm, self.lm_head)

    # what a tensor-parallel rank does differently (tensor_parallel.py overrides these three)
    def embed_rows(self, ids):
        """The embedding rows of token ids [tokens] -> [tokens, hidden]."""
        return nbx.embedding(ids, self.embed)

    def output_linear(self, x, weight, bias, residual):
        """residual + x @ weight.T + bias: the attention's output and the MLP's down projection."""
        return nbx.linear(x, weight, bias, residual=residual)

    def _attention(self, index, layer: _Layer, x, pos, step, total):
        s = self.shapes
        qkv = self.normed_linear(x, layer.input_norm, layer.wqkv, layer.bqkv)
        nq, nk = s.heads * s.head_dim, s.kv_heads * s.head_dim
        q = qkv[:, :nq].reshape(total, s.heads, s.head_dim)              # views: no copy
        k = qkv[:, nq:nq + nk].reshape(total, s.kv_heads, s.head_dim)
        v = qkv[:, nq + nk:].reshape(total, s.kv_heads, s.head_dim)
        if layer.q_norm is not None:
            q = nbx.rms_norm(q, (s.head_dim,), layer.q_norm, self.eps)
            k = nbx.rms_norm(k, (s.head_dim,), layer.k_norm, self.eps)
        window = None if layer.window is None else (layer.window - 1, 0)
        out = step.attend(index, q, k, v, self._cos, self._sin, pos, window)   # q and k roped there
        return self.output_linear(out.reshape(total, s.heads * s.head_dim), layer.wo, layer.bo, x)

    def _ensure_rope(self, positions: int) -> None:
        """cos/sin tables covering positions; grown by doubling (a real model's max_position_embeddings
        can be 128k, whose table nobody needs for a short prompt)."""
        if self._cos is not None and self._cos.shape[0] >= positions:
            return
        if self._cos is not None:
            self.release_cache()   # a kept captured step reads the tables it was captured with
        self._cos, self._sin = nbx.rope_tables(self.rope_config(), self.rope_rows(positions), dtype=nbx.float32,
                                               device=self.device)

    def rope_rows(self, positions: int) -> int:
        """The rows of the rope tables built to cover positions (the next power of two, 64 at least)."""
        return min(self.max_positions, max(64, 1 << (positions - 1).bit_length()))

    def memory_plan(self, prompt_lengths: list[int], max_new_tokens: int):
        """What generate_batch of prompts of these lengths holds on the device, priced before it runs
        (memory_plan.GenerationMemory: weights, KV cache, rope tables, the largest live activations)."""
        from .memory_plan import price
        return price(self, [int(n) for n in prompt_lengths], int(max_new_tokens))

    def _check_fits(self, sequences, max_new_tokens: int) -> None:
        """Refuse, before any work, sequences whose positions would pass max_position_embeddings."""
        for seq in sequences:
            if len(seq) + max_new_tokens > self.max_positions:
                raise nbx.ArgumentError(f"a prompt of {len(seq)} tokens + {max_new_tokens} new ones pass the "
                                        f"model's max_position_embeddings {self.max_positions}")

    def _checked_ids(self, token_ids) -> list[int]:
        ids = [int(t) for t in token_ids]
        if not ids:
            raise nbx.ArgumentError("a sequence needs at least one token id")
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise nbx.IndexingError(f"token ids {bad[:5]} are outside the vocabulary of {self.vocab}")
        return ids
