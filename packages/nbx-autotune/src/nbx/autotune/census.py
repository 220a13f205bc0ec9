"""A model's census: the launch keys a model will form, listed from its config.json and a plan, not run.

    model = census.read_config("ckpt/config.json")
    found = census.launches(model, census.Plan(batch=(1, 8), prompt=(512,), new_tokens=256), facts)
    recs = census.records_of(found, facts, tunables)   # KeyRecords: what `certify --model`, `coverage --model` read

The model is read from Hugging Face config fields: a Llama-style decoder (`*ForCausalLM`, or
model_type llama, mistral, qwen2, qwen3: hidden_size, intermediate_size, num_attention_heads,
num_key_value_heads, head_dim, vocab_size, torch_dtype) or a BERT-style encoder (model_type bert,
roberta, xlm-roberta, electra: hidden_size, intermediate_size, vocab_size, hidden_act). The plan
says which batches and prompt lengths run and how many one-token decode steps follow each prefill
(`new_tokens`: a decoder's generate_batch of new_tokens + 1 tokens, the first from the prefill).
A decoder's census also takes the device file it runs on (`facts`): its KV cache's block tokens and
its captured decode steps' length buckets size launches. Each forward of T = batch x length tokens
launches, per layer, in the order the reference blocks run them:

    decoder  (as nbx.models.decoder runs a dense family on a GPU: LlamaForCausalLM, Mistral, Qwen2,
             Qwen3; a paged KV cache, decode steps captured as graphs)
             at load: q, k and v's weights (Qwen2's biases) stacked, one concat each (datamove);
             the deferred bounds flag's int64 zero. A run: its KV cache zeroed (each layer's K and
             V: blocks x block tokens x KV heads x head dim). A forward: the embedding's take of T
             rows; per layer rms_norm (T, H); one product against the stacked q, k, v (out, in),
             read transposed ("nt"; Qwen2's bias inside it); Qwen3's RMS norms of q and k per head;
             the rotation of k and q (one launch, in the KV cache's write); paged_attention over the
             cache (its prefill kernel `attention` keyed by the prompt's length, or for a few query
             tokens the split-K `attention_decode` keyed by the context and the batch); the output product (the
             residual inside it); rms_norm; gated_linear (silu(x @ gate.T) * (x @ up.T), one launch);
             the down product (the residual inside). Then, for a batch's prefill, the last positions'
             rows joined (a concat); the final rms_norm and lm_head of those (batch, H) rows and the
             greedy argmax. A decode step (captured) adds its positions' + 1 (int64) and the lengths'
             cast to int32; its attention's context is listed by class (decode_contexts), not by
             length: the power of two of each length bucket the steps pass.
    encoder  add, add (word + position + type embeddings), layer_norm; matmul q, k, v, o with their
             bias adds (a broadcast operand: a strided elementwise key); add; layer_norm; matmul
             intermediate, bias add, gelu (the compute-bound elementwise tunable); matmul output,
             bias add; add; layer_norm. Then the pooler's matmul, bias add and tanh.

NOT_LISTED names what a decoder's run may launch that the census does not list (sampled decoding:
the plan decodes greedily); `coverage --model` and `warmup --model` say so. Untunable launches
(the decode's combine_kernel, take_along_axis of the slots, the cache's setitem copies) form no key.
Sparse (MoE) decoders are refused by name. Layers repeat the same launches, so one layer stands
for all. Keys are formed with the kernels' own declarations (their Tunables) and the device
file's ladders, as the wrappers form them; tests/nbx-autotune/test_autotune_census.py runs the
listed ops (and generates with tiny decoders) and checks the wrappers form exactly these keys.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from nbx.core import device_files
from nbx.core.graph import LENGTH_LADDER   # a captured decode step's length buckets
from nbx.core.dtypes import as_dtype
from nbx.core.errors import ArgumentError, FileFormatError, NotSupportedError

from . import keys, records

TMA_DTYPES = ("float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2", "int8")  # epilogue.TMA_DTYPES

DECODER_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
ENCODER_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "electra"})
# the elementwise ops whose arithmetic bounds them, ranked on their own tunable (elementwise/tuning.py)
COMPUTE_BOUND = frozenset({"gelu"})
# nbx.models' sparse decoders: their experts' launches (moe kernels, the router's top-k) are not listed (nor
# DeepSeek-V2's MLA attention products)
SPARSE_ARCHITECTURES = frozenset({"MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                                  "DeepseekV2ForCausalLM"})
SPARSE_TYPES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2"})
# nbx.kernels.attention's bounds of the split-K decode path (DECODE_TOKENS, DECODE_ROWS)
DECODE_TOKENS, DECODE_ROWS = 8, 128
WORDS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}   # a copy's words (nbx.kernels.gather.as_bits)
# kernels a decoder's run may launch that the census lists no key of, and why
NOT_LISTED = ("sampling (nbx.sample's launches: a census plans greedy decoding, whose argmax it lists)",)


@dataclass(frozen=True)
class Model:
    kind: str            # "decoder" | "encoder"
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype: str
    name: str = ""
    qk_norm: bool = False   # Qwen3: RMS norms of q and k per head
    qkv_bias: bool = False  # Qwen2 (or attention_bias): q, k and v biases, stacked at load as their weights are


@dataclass(frozen=True)
class Plan:
    batch: tuple[int, ...] = (1,)
    prompt: tuple[int, ...] = (128,)
    new_tokens: int = 0
    dtype: str | None = None   # None: the checkpoint's torch_dtype

    def __post_init__(self):
        for name in ("batch", "prompt"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
                raise ArgumentError(f"a census plan's {name} is a list of sizes >= 1, got {values!r}")
        if not isinstance(self.new_tokens, int) or self.new_tokens < 0:
            raise ArgumentError(f"a census plan's new_tokens is an integer >= 0, got {self.new_tokens!r}")


@dataclass(frozen=True)
class Launch:
    """One launch of a tunable kernel: the nbx op, its operands' shapes, the kernel and its key's inputs."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    kernel: str
    inputs: dict = field(hash=False, compare=False)


def _field(config: dict, path, *names, default=None):
    for name in names:
        if name in config:
            value = config[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise FileFormatError(f"{path}: {name} is {value!r}, a model's size is an integer >= 1")
            return value
    if default is not None:
        return default
    raise FileFormatError(f"{path}: states none of {list(names)}, which a census of this model needs")


def read_config(source) -> Model:
    """The model a Hugging Face config.json (a path, a checkpoint folder, or the parsed dict) describes."""
    if isinstance(source, dict):
        config, path = source, "config"
    else:
        path = Path(source)
        path = path / "config.json" if path.is_dir() else path
        try:
            config = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FileFormatError(f"{path}: cannot be read as a model's config.json: {exc}") from exc
    model_type = str(config.get("model_type", ""))
    architectures = [str(a) for a in config.get("architectures") or ()]
    if model_type in SPARSE_TYPES or SPARSE_ARCHITECTURES.intersection(architectures):
        raise NotSupportedError(f"{path}: {model_type!r} {architectures} is a sparse (MoE) decoder; the census does "
                                f"not list its experts' launches yet")
    if model_type in DECODER_TYPES or (model_type not in ENCODER_TYPES
                                       and any(a.endswith("ForCausalLM") for a in architectures)):
        kind = "decoder"
    elif model_type in ENCODER_TYPES:
        kind = "encoder"
    else:
        raise NotSupportedError(f"{path}: model_type {model_type!r} (architectures {architectures}) is neither a "
                                f"Llama-style decoder ({sorted(DECODER_TYPES)}, *ForCausalLM) nor a BERT-style "
                                f"encoder ({sorted(ENCODER_TYPES)}); the census lists no other model")
    hidden = _field(config, path, "hidden_size")
    heads = _field(config, path, "num_attention_heads")
    act = config.get("hidden_act", "silu" if kind == "decoder" else "gelu")
    if (kind, act) not in (("decoder", "silu"), ("encoder", "gelu")):
        raise NotSupportedError(f"{path}: hidden_act {act!r} in a {kind}; the census knows silu decoders and gelu "
                                f"encoders")
    dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
    return Model(kind, hidden, _field(config, path, "intermediate_size"), heads,
                 _field(config, path, "num_key_value_heads", default=heads),
                 _field(config, path, "head_dim", default=max(1, hidden // heads)),
                 _field(config, path, "vocab_size"), str(dtype), str(config.get("_name_or_path", "")),
                 kind == "decoder" and (model_type == "qwen3" or "Qwen3ForCausalLM" in architectures),
                 kind == "decoder" and (model_type == "qwen2" or "Qwen2ForCausalLM" in architectures
                                        or bool(config.get("attention_bias", False))))


def _linear(out: list, tokens: int, inputs: int, outputs: int, dtype: str, bias: bool = False) -> None:
    out.append(("matmul", ((tokens, inputs), (outputs, inputs)), dtype))
    if bias:
        out.append(("add", ((tokens, outputs), (outputs,)), dtype))


def _decoder_forward(m: Model, batch: int, tokens: int, dtype: str, attention: list, prefill: bool) -> list:
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    out = [("embedding", ((tokens, m.hidden),), dtype), ("rms_norm", ((tokens, m.hidden),), dtype)]
    _linear(out, tokens, m.hidden, q + 2 * kv, dtype)          # q, k, v stacked: one product
    if m.qk_norm:
        out += [("rms_norm", ((tokens, m.heads, m.head_dim),), dtype),
                ("rms_norm", ((tokens, m.kv_heads, m.head_dim),), dtype)]
    out.append(("rope", ((tokens, m.kv_heads + m.heads, m.head_dim),), dtype))   # k and q in the cache write
    out += attention                                           # paged_attention over the cache
    _linear(out, tokens, q, m.hidden, dtype)                   # o, the residual added inside
    out += [("rms_norm", ((tokens, m.hidden),), dtype),
            ("gated_linear", ((tokens, m.hidden), (m.intermediate, m.hidden)), dtype)]
    _linear(out, tokens, m.intermediate, m.hidden, dtype)      # down, the residual added inside
    if prefill and batch > 1:                                  # prefill: the last positions' rows joined
        out.append(("concat", ((1, m.hidden),) * batch, dtype))
    out.append(("rms_norm", ((batch, m.hidden),), dtype))      # the last positions' rows only
    _linear(out, batch, m.hidden, m.vocab, dtype)
    out.append(("argmax", ((batch, m.vocab),), dtype))         # greedy decoding
    return out


def _attention(m: Model, batch: int, queries: int, context: int, dtype: str) -> tuple:
    """paged_attention of batch sequences, each queries tokens over a context of keys (the bounds the
    step passes: max_q_len, max_seq_len)."""
    return ("paged_attention", ((batch, queries, m.heads, m.head_dim), (batch, context, m.kv_heads, m.head_dim)),
            dtype)


def decode_contexts(prompt: int, steps: int, facts) -> list[int]:
    """The classes of max_seq_len the decode steps after a prompt pass (the layout's power of two of
    the captured step's length bucket, nbx.graph.length_bucket on the device file's
    graphs.length_buckets, at most the cache's capacity): one attention key each."""
    capacity = prompt + steps + 1
    ladder = facts.value(LENGTH_LADDER) if LENGTH_LADDER in facts else None
    return sorted({keys.pow2_at_least(min(n if ladder is None else device_files.bucket(ladder, n), capacity))
                   for n in range(prompt + 1, prompt + steps + 1)})


def _decoder_run(m: Model, batch: int, prompt: int, steps: int, facts, dtype: str) -> list:
    """A generate_batch of batch prompts of this length, new_tokens decode steps after the prefill
    (generate of steps + 1 tokens: the first comes from the prefill), on a device with a file."""
    block = facts.value("tiles.kv_cache")["block_tokens"]
    blocks = batch * -(-(prompt + steps + 1) // block)
    out = [("zeros", ((blocks, block, m.kv_heads, m.head_dim),), dtype)]   # each layer's K and V, zeroed
    out += _decoder_forward(m, batch, batch * prompt, dtype, [_attention(m, batch, prompt, prompt, dtype)], True)
    if steps:   # the captured step: positions + 1 (the next positions, and the lengths as int32)
        out += [("add", ((batch,),), "int64"), ("cast", ((batch,),), "int32")]
        out += _decoder_forward(m, batch, batch, dtype,
                                [_attention(m, batch, 1, k, dtype) for k in decode_contexts(prompt, steps, facts)], False)
    return out


def _decoder_load(m: Model, dtype: str) -> list:
    """Launches of loading the checkpoint: each layer's q, k and v weights (and biases) stacked."""
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    out = [("concat", ((q, m.hidden), (kv, m.hidden), (kv, m.hidden)), dtype)]
    if m.qkv_bias:
        out.append(("concat", ((q,), (kv,), (kv,)), dtype))
    # the deferred bounds flag (nbx.core.deferred_checks), one int64 zeroed by a process's first checked op
    return out + [("zeros", ((1,),), "int64")]


def _encoder_forward(m: Model, batch: int, tokens: int, dtype: str) -> list:
    h = (tokens, m.hidden)
    out = [("add", (h, h), dtype), ("add", (h, h), dtype), ("layer_norm", (h,), dtype)]
    for _ in range(4):
        _linear(out, tokens, m.hidden, m.hidden, dtype, bias=True)
    out += [("add", (h, h), dtype), ("layer_norm", (h,), dtype)]
    _linear(out, tokens, m.hidden, m.intermediate, dtype, bias=True)
    out.append(("gelu", ((tokens, m.intermediate),), dtype))
    _linear(out, tokens, m.intermediate, m.hidden, dtype, bias=True)
    out += [("add", (h, h), dtype), ("layer_norm", (h,), dtype)]
    _linear(out, batch, m.hidden, m.hidden, dtype, bias=True)
    out.append(("tanh", ((batch, m.hidden),), dtype))
    return out


def _pow4_at_least(v: int) -> int:
    octave = keys.pow2_at_least(v).bit_length() - 1
    return 1 << (octave + (octave & 1))


def _attention_key(shapes, dtype: str) -> tuple[str, dict]:
    """paged_attention's key as its layout forms it (nbx.kernels.attention: lengths rounded up to a
    power of two; the split-K decode path for a few query tokens whose group's rows fit a program)."""
    (batch, queries, heads, dim), (_, context, kv_heads, _) = shapes
    q_len, k_len, group = keys.pow2_at_least(queries), keys.pow2_at_least(context), heads // kv_heads
    if q_len <= DECODE_TOKENS and q_len * group <= DECODE_ROWS:
        return "attention_decode", {"k_len": k_len, "rows": q_len * group, "head_dim": dim, "dtype": dtype,
                                    "paged": True, "batch": batch}
    return "attention", {"q_len": q_len, "k_len": k_len, "head_dim": dim, "v_dim": dim, "group": group,
                         "dtype": dtype, "causal": True, "tma": False}   # a paged cache: no descriptors


def key_inputs(op: str, shapes, dtype: str) -> tuple[str, dict]:
    """(kernel, its key's inputs) of one launch, as the wrapper forms them (the kernels' tuning.py)."""
    if op == "paged_attention":
        return _attention_key(shapes, dtype)
    if op == "concat":      # parts joined along their first dim, as words (nbx.kernels.copies.concat)
        item = as_dtype(dtype).itemsize
        words = 2 if item == 16 else 1
        sizes = [math.prod(s) * words for s in shapes]
        return "datamove", {"n": sum(sizes), "inner": max(sizes), "dtype": WORDS[item // words], "mapped": False,
                            "transposed": False}
    if op in ("matmul", "gated_linear"):
        (m, k), (n, _) = shapes
        # x @ W.T with W (n, k) stored (out, in): the fused product's key (nbx.kernels.matmul.epilogue):
        # the weight read transposed, its last dim N k apart ("t"), the activations dense ("n"); descriptors
        # (tma) read it where its rows and the output's are 16-byte multiples; float32 multiplies in IEEE
        item = as_dtype(dtype).itemsize
        tma = dtype in TMA_DTYPES and k > 0 and (k * item) % 16 == 0 and (n * item) % 16 == 0
        return "linear", {"m": m, "n": n, "k": k, "dtype": dtype, "layout": "n" + ("t" if n > 1 and k > 1 else "n"),
                          "form": "gated" if op == "gated_linear" else "plain", "tma": tma, "precision": "ieee" if dtype in ("float32", "float64") else "none"}
    if op == "embedding":   # the take of an embedding table's rows (nbx.kernels.gather.tuning.take_key)
        (ids, width), = shapes
        return "take", {"row_bytes": keys.pow2_at_least(width * as_dtype(dtype).itemsize), "ids": _pow4_at_least(ids)}
    if op == "rope":        # one launch ropes k's heads and q's (nbx.kernels.attention.rope)
        (tokens, heads, dim), = shapes
        return "rope", {"elements": tokens * heads * dim, "head_dim": dim, "dtype": dtype}
    if op in ("softmax", "rms_norm", "layer_norm", "argmax", "sum"):
        *rows, n = shapes[0]
        count = 1
        for r in rows:
            count *= r
        kernel = {"softmax": "softmax", "argmax": "reduction", "sum": "reduction"}.get(op, "norm")
        return kernel, {"width": n, "elements": count * n, "dtype": dtype,
                        "strided": False}
    out_shape = shapes[0]
    n = 1
    for d in out_shape:
        n *= d
    broadcast = any(tuple(s) != tuple(out_shape) for s in shapes[1:])
    return ("elementwise_heavy" if op in COMPUTE_BOUND else "elementwise"), {"n": n, "dtype": dtype,
                                                                            "strided": broadcast}


def launches(model: Model, plan: Plan, facts=None) -> list[Launch]:
    """Every distinct launch the plan's runs make (prefill of each batch x prompt, then decode steps).
    facts: the device file of the device the model runs on (a decoder's KV cache blocks and captured
    steps' length buckets; the keys' own ladders are records_of's facts)."""
    dtype = plan.dtype or model.dtype
    if model.kind == "decoder":
        if facts is None:
            raise ArgumentError("a decoder's census needs the device file it runs on (its KV cache's block tokens, "
                                "its decode steps' length buckets)")
        items = _decoder_load(model, dtype)
        for batch in plan.batch:
            for prompt in plan.prompt:
                items += _decoder_run(model, batch, prompt, plan.new_tokens, facts, dtype)
    else:
        items = [item for batch in plan.batch for p in plan.prompt
                 for item in _encoder_forward(model, batch, batch * p, dtype)]
    seen: dict = {}
    for op, shapes, dt in items:
        kernel, inputs = key_inputs(op, shapes, dt)
        launch = Launch(op, tuple(tuple(s) for s in shapes), dt, kernel, inputs)
        seen.setdefault(launch, launch)
    return list(seen)


def records_of(found: list[Launch], facts, tunables: dict) -> list[records.KeyRecord]:
    """The keys of these launches as a census keys file lists them (no device class or compiler)."""
    out = []
    for launch in found:
        tunable = tunables.get(launch.kernel)
        if tunable is None:
            raise ArgumentError(f"the census lists kernel {launch.kernel!r}, which no installed kernel declares "
                                f"(declared: {sorted(tunables)}); install nbx-kernels")
        key = keys.form(tunable.name, tunable.key_fields, facts, **launch.inputs)
        out.append(records.KeyRecord(key.kernel, str(key), facts.name, None, None, dict(key.observed)))
    return records.merge(out)


def unlisted(model: Model) -> str:
    """What the census leaves out of this model's run ('' when nothing), for the commands to print."""
    if model.kind != "decoder":
        return ""
    return (f"note: the census lists no key of {', '.join(NOT_LISTED)}; a run of this decoder that samples "
            f"launches those too (served a neighbour's or the device file's setting, not certified or warmed by "
            f"this command)")


def plan_from_args(batch: str, prompt: str, new_tokens: int, dtype: str | None) -> Plan:
    """A plan from the command line's comma-separated lists ("1,8", "128,2048")."""
    def sizes(text: str, name: str) -> tuple[int, ...]:
        try:
            return tuple(int(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise ArgumentError(f"--{name} is a comma-separated list of sizes, got {text!r}") from None
    return Plan(sizes(batch, "batch"), sizes(prompt, "prompt"), new_tokens, dtype)
