"""Decoding a Llama on the GPU: nbx.models against torch written as Hugging Face writes it (eager,
DynamicCache-style torch.cat cache) and torch with its decode step captured as a CUDA graph (a
static cache, as HF's StaticCache + CUDA graphs), in one process (torch is the peer; nbx itself
never imports it); then nbx's int4 (W4A16) weights against its own bfloat16 at Llama-3-8B's shape.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_models.py
    ... bench_models.py --shape both      # Llama-3-8B's shape against torch too (a 16 GB checkpoint: ~2 min more)
    ... bench_models.py --shape qwen7b    # Qwen2.5-7B's (q/k/v biases: nbx's Qwen2 family); --shape all: the three
    ... bench_models.py --batch 16        # 16 prompts of 512 together
    ... bench_models.py --json models.json --markdown && python3 tools/bench/plot_models.py models.json

The checkpoints are seeded (nbx.models.write_checkpoint, weights drawn on the GPU, bfloat16) in the
HF layout with the shape of Llama-3.2-1B (tied embeddings, GQA 32/8, head dim 64, llama3 rope), or
Llama-3-8B. Prompt 512 random token ids, 256 new tokens, greedy, batch 1 (--batch runs several
prompts of 512 through nbx's batched generate and torch's padded batch of equal lengths).

Every system runs the timed sizes once before it is timed (nbx: kernels compiled and screened, the
decode steps captured; torch eager: cuBLAS's and SDPA's per-shape plans made for every context
length the decode passes through: SDPA's cuDNN attention likely builds one for each new length,
and the first H200 run, which timed eager cold, saw 20 tokens/s; the cold run's figures are
printed apart).
Figures: prefill tokens/s (the prompt's forward and the first token, synchronized), decode
tokens/s and ms/token (every later token; each step reads its token back to the host, as a
generation loop must: wall time, a synchronized step's GPU time plus the host's share), % of the
roofline (the bytes a decode step must read, every weight once, the lm_head included, and the KV
cache at the mean context, over the copy bandwidth measured in this run), peak GB (nbx: its
allocator's peak of requested bytes in the timed run, against model.memory_plan's price made
before any run; torch: torch.cuda.max_memory_allocated). Printed under the table (and in the
json, host_us_token): each system's host time a decode step, from one step's read of its tokens to
the next step's read (the launches or the replay, the loop's Python; the GPU's own time is not in it).

int4 (--int4-layers, default 1,2): Llama-3-8B's shape with only a few layers (the lm_head and
embeddings whole), bfloat16 and int4 (group 128, asymmetric, bfloat16 scales and minima)
checkpoints of the same seeded weights; the decode time per token at two layer counts gives the
time per layer and the rest (embedding, final norm, lm_head, the step's host work), extrapolated
to the real model's 32 layers. The output says which figures are measured and which extrapolated.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import nbx.core as nbx
from nbx import models
from model_shapes import NAMES, SHAPES, config_of

# ---- torch as Hugging Face writes it ----------------------------------------------------------
class TorchLlama:
    """modeling_llama's forward, function by function (RMSNorm in float32, rotate_half, repeat_kv
    through SDPA's enable_gqa, SiLU MLP), over the checkpoint's tensors."""

    def __init__(self, folder, config):
        try:
            from safetensors.torch import load_file
        except ImportError:   # no safetensors package: nbx reads the files, torch takes copies through DLPack
            load_file = None
        self.w = {}
        for file in sorted(folder.glob("*.safetensors")):
            if load_file is not None:
                self.w.update(load_file(file, device="cuda"))
            else:
                opened = nbx.load_safetensors(file, device="cuda")
                self.w.update({name: torch.from_dlpack(opened[name]).clone() for name in opened})
        self.c = config
        self.heads, self.kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        self.head_dim = config["head_dim"]
        inv_freq, _ = nbx.rope_frequencies(config)
        self.inv_freq = torch.tensor(inv_freq, dtype=torch.float32, device="cuda")
        self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])

    def rms(self, x, weight):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"])
        return weight * h.to(x.dtype)

    def rope(self, positions):
        freqs = positions[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(torch.bfloat16)[:, None], emb.sin().to(torch.bfloat16)[:, None]

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, ids, positions, cache, static_length=None):
        """ids, positions [B, T]; cache: per layer [k, v] lists (eager: grown with torch.cat) or
        preallocated [B, Hk, max, D] tensors written at positions (static: a CUDA graph's)."""
        b, t = ids.shape
        x = F.embedding(ids, self.w["model.embed_tokens.weight"])
        cos, sin = self.rope(positions)
        for i in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = self.rms(x, self.w[p + "input_layernorm.weight"])
            q = F.linear(h, self.w[p + "self_attn.q_proj.weight"], self.w.get(p + "self_attn.q_proj.bias")
                         ).view(b, t, self.heads, -1).transpose(1, 2)
            k = F.linear(h, self.w[p + "self_attn.k_proj.weight"], self.w.get(p + "self_attn.k_proj.bias")
                         ).view(b, t, self.kv_heads, -1).transpose(1, 2)
            v = F.linear(h, self.w[p + "self_attn.v_proj.weight"], self.w.get(p + "self_attn.v_proj.bias")
                         ).view(b, t, self.kv_heads, -1).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            if static_length is None:
                if cache[i]:
                    k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                cache[i] = [k, v]
                o = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
            else:
                cache[i][0].index_copy_(2, positions[0], k)
                cache[i][1].index_copy_(2, positions[0], v)
                mask = torch.arange(cache[i][0].shape[2], device="cuda")[None, :] <= positions[0][:, None]
                o = F.scaled_dot_product_attention(q, cache[i][0], cache[i][1], attn_mask=mask, enable_gqa=True)
            o = o.transpose(1, 2).reshape(b, t, -1)
            x = x + F.linear(o, self.w[p + "self_attn.o_proj.weight"])
            h = self.rms(x, self.w[p + "post_attention_layernorm.weight"])
            g = F.silu(F.linear(h, self.w[p + "mlp.gate_proj.weight"])) * F.linear(h, self.w[p + "mlp.up_proj.weight"])
            x = x + F.linear(g, self.w[p + "mlp.down_proj.weight"])
        x = self.rms(x[:, -1:], self.w["model.norm.weight"])
        return F.linear(x, self.lm_head).float()[:, -1]


def torch_eager(model, prompts, new_tokens):
    ids = torch.tensor(prompts, device="cuda")
    cache = [[] for _ in range(model.c["num_hidden_layers"])]
    b, n = ids.shape
    torch.cuda.synchronize()
    start = time.perf_counter()
    token = model.forward(ids, torch.arange(n, device="cuda")[None].expand(b, n), cache).argmax(-1)
    out = [token.tolist()]
    first = last_read = time.perf_counter()
    host = 0.0
    for step in range(1, new_tokens):
        pos = torch.full((b, 1), n + step - 1, device="cuda")
        token = model.forward(token[:, None], pos, cache).argmax(-1)
        host += time.perf_counter() - last_read
        out.append(token.tolist())
        last_read = time.perf_counter()
    return out, first - start, last_read - first, host / max(1, new_tokens - 1)


def static_cache(model, batch, capacity):
    return [[torch.zeros(batch, model.kv_heads, capacity, model.head_dim, dtype=torch.bfloat16, device="cuda")
             for _ in range(2)] for _ in range(model.c["num_hidden_layers"])]


def torch_compiled(model, prompts, new_tokens):
    """torch.compile(mode="reduce-overhead") of the static-cache decode step (inductor's kernels,
    replayed in torch's own CUDA graphs), the prefill eager into the same cache; compiled and
    recorded before the clock starts."""
    b, n = len(prompts), len(prompts[0])
    cache = static_cache(model, b, n + new_tokens)
    step = torch.compile(lambda token, pos: model.forward(token, pos, cache, static_length=True).argmax(-1)[:, None],
                         mode="reduce-overhead")
    token = torch.zeros(b, 1, dtype=torch.long, device="cuda")
    for _ in range(3):   # compile, warm up, record
        torch.compiler.cudagraph_mark_step_begin()
        step(token, torch.full((b, 1), n, device="cuda")).clone()
    ids = torch.tensor(prompts, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    token = model.forward(ids, torch.arange(n, device="cuda")[None].expand(b, n), cache, static_length=True
                          ).argmax(-1)[:, None]
    out = [token[:, 0].tolist()]
    first = last_read = time.perf_counter()
    host = 0.0
    for step_index in range(1, new_tokens):
        torch.compiler.cudagraph_mark_step_begin()
        token = step(token, torch.full((b, 1), n + step_index - 1, device="cuda"))
        host += time.perf_counter() - last_read
        out.append(token[:, 0].tolist())   # read before the next replay overwrites the graph's output
        last_read = time.perf_counter()
    return out, first - start, last_read - first, host / max(1, new_tokens - 1)


def torch_graphs(model, prompts, new_tokens):
    """Prefill eagerly into a static cache, then replay one captured decode step per token."""
    b, n = len(prompts), len(prompts[0])
    cache = static_cache(model, b, n + new_tokens)
    ids = torch.tensor(prompts, device="cuda")
    static_token = torch.zeros(b, 1, dtype=torch.long, device="cuda")
    static_pos = torch.zeros(b, 1, dtype=torch.long, device="cuda")

    def step():
        static_token.copy_(model.forward(static_token, static_pos, cache, static_length=True).argmax(-1)[:, None])

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()   # warm up (allocations, autotuning) outside the graph
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    logits = model.forward(ids, torch.arange(n, device="cuda")[None].expand(b, n), cache, static_length=True)
    static_token.copy_(logits.argmax(-1)[:, None])
    out = [static_token[:, 0].tolist()]
    first = last_read = time.perf_counter()
    host = 0.0
    for step_index in range(1, new_tokens):
        static_pos.fill_(n + step_index - 1)
        graph.replay()
        host += time.perf_counter() - last_read
        out.append(static_token[:, 0].tolist())
        last_read = time.perf_counter()
    return out, first - start, last_read - first, host / max(1, new_tokens - 1)


# ---- nbx -----------------------------------------------------------------------------------
def nbx_run(model, prompts, new_tokens):
    """(tokens, prefill s, decode s, host s a decode step): the host's time between one step's read
    of its tokens and the next step's (the replay's launch, the loop's Python), from the reads'
    own times: every step reads its tokens once, through Tensor.tolist."""
    model.eos = ()   # random weights: run every step
    times, reads = [], []
    tolist = nbx.Tensor.tolist

    def timed_tolist(tensor):
        began = time.perf_counter()
        out = tolist(tensor)
        reads.append((began, time.perf_counter()))
        return out

    nbx.Tensor.tolist = timed_tolist
    try:
        start = time.perf_counter()
        out = model.generate_batch(prompts, new_tokens, on_token=lambda i, t: times.append(time.perf_counter()))
    finally:
        nbx.Tensor.tolist = tolist
    first = times[len(prompts) - 1]
    host = [b - a_end for (_, a_end), (b, _) in zip(reads, reads[1:])]
    return out, first - start, times[-1] - first, sum(host) / max(1, len(host))


def nbx_timed(model, prompts, new_tokens):
    """A warm-up generation at the timed sizes, then the timed one; the allocator's peaks (requested
    bytes) of both: (tokens, prefill s, decode s, first run's peak, timed run's peak, the captured
    steps' private pools, host s a decode step)."""
    from nbx.memory.allocator import get_allocator
    allocator, cuda0 = get_allocator("cuda"), nbx.as_device("cuda:0")
    allocator.reset_peak(cuda0)
    nbx_run(model, prompts, new_tokens)   # kernels compiled, screened and tuned; decode steps captured
    first_peak = allocator.stats(cuda0).peak_live_bytes
    allocator.reset_peak(cuda0)
    tokens, prefill, decode, host = nbx_run(model, prompts, new_tokens)   # replays the kept cache's captured steps
    return (tokens, prefill, decode, first_peak, allocator.stats(cuda0).peak_live_bytes, model.decode_graph_bytes(),
            host)


def decode_step_kernels(model, config) -> str:
    """The kernels one decode token launches: the captured step's graph nodes (launches and copies,
    as the driver counts them), the launches its ops declare, and the ops it calls a layer."""
    try:
        found = model.decode_step_kernels()
    except nbx.NbxError as exc:   # the step's record unreadable: say so, keep the run's table
        return f"kernels per step: not counted ({type(exc).__name__}: {exc})"
    if found is None:
        return "kernels per step: no captured decode step"
    nodes, declared, calls = found
    writes = [i for i, op in enumerate(calls) if op == "rotary_kv_cache_write"]   # one a layer, after its qkv
    layer = calls[writes[0] - 1:writes[1] - 1] if len(writes) > 1 else ()
    return (f"kernels per step: {nodes} graph nodes ({declared} launches declared by {len(calls)} op calls, "
            f"{config['num_hidden_layers']} layers; a layer's ops: {', '.join(layer)})")


def copy_bandwidth() -> float:
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        y.copy_(x)
    end.record()
    end.synchronize()
    return 2 * x.numel() * 10 / (start.elapsed_time(end) * 1e-3)


def read_bytes_per_step(model, config, batch, prompt, new):
    """Every weight a decode step reads (the embedding only where it is the tied lm_head: a step
    takes one row of it otherwise) and the KV cache at the mean context."""
    weights = model.memory_plan([prompt] * batch, new).weights
    if not config["tie_word_embeddings"]:
        weights -= model.embed.nbytes
    mean_context = prompt + new / 2
    kv = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 2 * mean_context
    return weights + batch * kv


def cleared(model=None):
    """Give nbx's cached blocks back (before torch's turn, or the next model's)."""
    from nbx.memory.allocator import get_allocator
    if model is not None:
        model.release_cache()
    get_allocator("cuda").empty_cache(nbx.as_device("cuda:0"))


GB = 1e9


def compare(shape, args, bandwidth, gen, results):
    """nbx, torch eager and torch CUDA graphs on one seeded checkpoint of `shape`."""
    config = config_of(shape)
    prompts = torch.randint(0, config["vocab_size"], (args.batch, args.prompt), generator=gen).tolist()
    decoded = args.batch * (args.new - 1)
    with tempfile.TemporaryDirectory(prefix=f"nbx-bench-{shape}-", dir="/tmp") as tmp:
        t0 = time.perf_counter()
        folder = models.write_checkpoint(Path(tmp), config, seed=0, dtype="bfloat16", shards=4, device="cuda")
        print(f"\n{NAMES[shape]} shape: {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, GQA "
              f"{config['num_attention_heads']}/{config['num_key_value_heads']}, vocab {config['vocab_size']}, "
              f"bfloat16; batch {args.batch}, prompt {args.prompt}, {args.new} new tokens, greedy. Checkpoint written "
              f"in {time.perf_counter() - t0:.1f} s")
        cleared()
        t0 = time.perf_counter()
        model = models.load(folder, device="cuda")
        plan = model.memory_plan([args.prompt] * args.batch, args.new)
        step_bytes = read_bytes_per_step(model, config, args.batch, args.prompt, args.new)
        print(f"nbx load {time.perf_counter() - t0:.1f} s; {plan.line()}")
        rows, nbx_tokens, host = [], None, {}
        try:
            nbx_tokens, prefill, decode, first_peak, peak, pools, host_s = nbx_timed(model, prompts, args.new)
            rows.append((f"nbx ({model.last_decode} decode)", prefill, decode, peak))
            host[rows[-1][0]] = host_s
            print(f"nbx peak / priced: timed run {peak / plan.total:.3f} (goal <= 1.05); first run "
                  f"{first_peak / plan.total:.3f} (a kernel's first launch screens its setting on inputs of its "
                  f"key's smallest launch: the lm_head's weight among them); the captured decode steps' private "
                  f"pools hold {pools / 2**20:,.1f} MiB more, outside the allocator's figures")
            print(decode_step_kernels(model, config))
        except nbx.NbxError as exc:
            print(f"nbx refused: {type(exc).__name__}: {exc}")
        cleared(model)
        del model
        cleared()
        peer = TorchLlama(folder, config)
        torch_eager(peer, [p[:16] for p in prompts], 4)   # cuBLAS handles and SDPA kernels loaded
        _, cold_prefill, cold_decode, _ = torch_eager(peer, prompts, args.new)   # every context length's plans made
        torch.cuda.reset_peak_memory_stats()
        eager_tokens, prefill, decode, host["torch eager"] = torch_eager(peer, prompts, args.new)
        rows.append(("torch eager", prefill, decode, torch.cuda.max_memory_allocated()))
        print(f"torch eager's cold run (the same sizes, first): prefill {args.batch * args.prompt / cold_prefill:,.0f} "
              f"tokens/s, decode {decoded / cold_decode:,.1f} tokens/s")
        torch.cuda.reset_peak_memory_stats()
        _, prefill, decode, host["torch CUDA graphs"] = torch_graphs(peer, prompts, args.new)
        rows.append(("torch CUDA graphs", prefill, decode, torch.cuda.max_memory_allocated()))
        if args.compile:
            torch.cuda.reset_peak_memory_stats()
            try:
                t0 = time.perf_counter()
                _, prefill, decode, host["torch.compile"] = torch_compiled(peer, prompts, args.new)
                rows.append(("torch.compile", prefill, decode, torch.cuda.max_memory_allocated()))
                print(f"torch.compile(mode='reduce-overhead'): compiled, recorded and run in "
                      f"{time.perf_counter() - t0:.0f} s")
            except Exception as exc:   # "where it runs": a peer that fails to compile is reported, not fatal
                print(f"torch.compile(mode='reduce-overhead') did not run: {type(exc).__name__}: {exc}")
        table(shape, args, rows, step_bytes, bandwidth, plan, results, host)
        if nbx_tokens is not None:
            torch_rows = [list(r) for r in zip(*eager_tokens)]
            same = sum(a == b for x, y in zip(nbx_tokens, torch_rows) for a, b in zip(x, y))
            print(f"greedy tokens equal to torch eager's: {same} of {args.batch * args.new} (bf16 both: after a "
                  f"near-tie the two continue differently)")
        del peer
        torch.cuda.empty_cache()


def table(shape, args, rows, step_bytes, bandwidth, plan, results, host):
    decoded = args.batch * (args.new - 1)
    rates = {name: (args.batch * args.prompt / prefill, decoded / decode) for name, prefill, decode, _ in rows}
    eager = rates["torch eager"]
    graphs = max((rates[n] for n in ("torch CUDA graphs", "torch.compile") if n in rates), key=lambda r: r[1])
    best_prefill = max(eager[0], rates["torch CUDA graphs"][0])
    print(f"{'':22} {'prefill tok/s':>13} {'vs torch':>8} {'decode tok/s':>12} {'ms/token':>8} {'% roofline':>10} "
          f"{'peak GB':>7} {'vs graphs':>9} {'vs eager':>8}")
    for name, prefill, decode, peak in rows:
        prefill_tps, tps = rates[name]
        roof = 100 * (step_bytes * (args.new - 1) / decode) / bandwidth
        print(f"{name:22} {prefill_tps:13,.0f} {prefill_tps / best_prefill:7.2f}x {tps:12,.1f} "
              f"{decode / (args.new - 1) * 1e3:8.2f} {roof:9.1f}% {peak / GB:7.2f} {tps / graphs[1]:8.2f}x "
              f"{tps / eager[1]:7.2f}x")
        results.append(dict(shape=shape, batch=args.batch, prompt=args.prompt, new=args.new, system=name,
                            prefill_tokens_s=prefill_tps, prefill_vs_torch=prefill_tps / best_prefill,
                            decode_tokens_s=tps, ms_token=decode / (args.new - 1) * 1e3, roofline_pct=roof,
                            peak_gb=peak / GB, priced_gb=plan.total / GB if name.startswith("nbx") else None,
                            vs_torch_graphs=tps / graphs[1], vs_torch_eager=tps / eager[1],
                            host_us_token=host[name] * 1e6 if name in host else None))
    print("(prefill vs torch: against the faster of torch's two prefills; decode vs graphs: against the faster "
          "of torch's captured step and torch.compile where it ran)")
    print("host time a decode step, from one step's read of its tokens to the next step's read (its launches, "
          "the loop's Python): " + ", ".join(f"{name} {seconds * 1e6:,.1f} us" for name, seconds in host.items()))


# ---- int4 against bfloat16, at Llama-3-8B's shape with a few layers -----------------------------
def with_layers(folder: Path, layers: int, into: Path) -> Path:
    """The checkpoint seen through a config that keeps its first `layers` layers (the files linked)."""
    into.mkdir()
    config = json.loads((folder / "config.json").read_text())
    (into / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    for file in folder.iterdir():
        if file.name != "config.json":
            os.symlink(file, into / file.name)
    return into


def int4_case(args, bandwidth, results):
    counts = sorted(int(n) for n in args.int4_layers.split(","))
    if len(counts) != 2 or counts[0] < 1 or counts[0] == counts[1]:
        raise SystemExit("--int4-layers takes two different layer counts, as 1,2")
    full = SHAPES["8b"]["num_hidden_layers"]
    config = {**config_of("8b"), "num_hidden_layers": counts[1]}
    prompt, new = [list(range(1000, 1000 + args.prompt))], args.int4_new
    print(f"\nint4 weights (W4A16, group 128, asymmetric, bfloat16 scales and minima) against bfloat16, Llama-3-8B's "
          f"shape with {counts[0]} and {counts[1]} of its {full} layers (lm_head and embeddings whole, bfloat16 in "
          f"both); batch 1, prompt {args.prompt}, {new} new tokens. MEASURED at {counts[0]} and {counts[1]} layers; "
          f"EXTRAPOLATED to {full}: time per token = the rest + {full} x the time per layer")
    measured = {}
    with tempfile.TemporaryDirectory(prefix="nbx-bench-int4-", dir="/tmp") as tmp:
        for kind, int4 in (("bfloat16", None), ("int4", (128, "asymmetric"))):
            t0 = time.perf_counter()
            folder = models.write_checkpoint(Path(tmp) / kind, config, seed=0, dtype="bfloat16", shards=2,
                                             device="cuda", int4=int4)
            print(f"{kind} checkpoint of {counts[1]} layers written in {time.perf_counter() - t0:.1f} s")
            for layers in counts:
                cleared()
                model = models.load(with_layers(folder, layers, Path(tmp) / f"{kind}-{layers}"), device="cuda")
                plan = model.memory_plan([args.prompt], new)
                step_bytes = read_bytes_per_step(model, {**config, "num_hidden_layers": layers}, 1, args.prompt, new)
                try:
                    _, prefill, decode, _, peak, _, host_s = nbx_timed(model, prompt, new)
                except nbx.NbxError as exc:
                    print(f"  {kind} {layers} layers: nbx refused: {type(exc).__name__}: {exc}")
                    cleared(model)
                    return
                per_token = decode / (new - 1)
                measured[kind, layers] = (per_token, step_bytes)
                print(f"  {kind:9} {layers} layers, measured: decode {1 / per_token:9,.1f} tokens/s ({per_token * 1e3:.3f} "
                      f"ms/token, {100 * step_bytes / per_token / bandwidth:.1f}% of roofline), prefill "
                      f"{args.prompt / prefill:,.0f} tokens/s, peak / priced {peak / plan.total:.3f}, host "
                      f"{host_s * 1e6:,.1f} us a step ({model.last_decode} decode)")
                cleared(model)
                del model
    lo, hi = counts
    rates = {}
    for kind in ("bfloat16", "int4"):
        (t_lo, b_lo), (t_hi, b_hi) = measured[kind, lo], measured[kind, hi]
        layer_s, layer_b = (t_hi - t_lo) / (hi - lo), (b_hi - b_lo) / (hi - lo)
        t_full, b_full = t_lo + (full - lo) * layer_s, b_lo + (full - lo) * layer_b
        rates[kind] = 1 / t_full
        print(f"  {kind:9} {full} layers, EXTRAPOLATED: {1 / t_full:9,.1f} tokens/s ({t_full * 1e3:.3f} ms/token: "
              f"{layer_s * 1e3:.4f} ms a layer, {(t_lo - lo * layer_s) * 1e3:.3f} ms the rest), "
              f"{100 * b_full / t_full / bandwidth:.1f}% of roofline ({b_full / GB:.2f} GB read a step)")
        results.append(dict(shape="8b", batch=1, prompt=args.prompt, new=new, system=f"nbx {kind} (extrapolated)",
                            decode_tokens_s=1 / t_full, ms_token=t_full * 1e3,
                            roofline_pct=100 * b_full / t_full / bandwidth, measured_layers=[lo, hi]))
    print(f"int4 / bfloat16 decode tokens/s at {full} layers (extrapolated): {rates['int4'] / rates['bfloat16']:.2f}x "
          f"(goal >= 2.5)")


def print_markdown(results):
    print("\n| shape | system | prefill tok/s | prefill vs torch | decode tok/s | ms/token | % roofline | "
          "peak GB (priced) | decode vs torch graphs | vs torch eager |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        def cell(key, form):
            return format(r[key], form) if r.get(key) is not None else ""
        peak = cell("peak_gb", ".2f") + (f" ({r['priced_gb']:.2f})" if r.get("priced_gb") is not None else "")
        print(f"| {r['shape']} | {r['system']} | {cell('prefill_tokens_s', ',.0f')} | {cell('prefill_vs_torch', '.2f')} "
              f"| {r['decode_tokens_s']:,.1f} | {r['ms_token']:.2f} | {r['roofline_pct']:.1f} | {peak} | "
              f"{cell('vs_torch_graphs', '.2f')} | {cell('vs_torch_eager', '.2f')} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=["1b", "8b", "qwen7b", "both", "all", "none"], default="1b",
                        help="the shapes run against torch (both: 1b and 8b; all: with qwen7b, Qwen2.5-7B's; "
                             "none: the int4 case alone)")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--int4-layers", default="1,2",
                        help="the two layer counts of the 8B-shape int4 case ('' skips it)")
    parser.add_argument("--int4-new", type=int, default=64, help="new tokens of the int4 case")
    parser.add_argument("--compile", action="store_true",
                        help="also torch.compile(mode='reduce-overhead') of the decode step (minutes of compiling)")
    parser.add_argument("--json", help="also write the table's rows here (tools/bench/plot_models.py draws them)")
    parser.add_argument("--markdown", action="store_true", help="print the rows as docs/performance.md's table")
    args = parser.parse_args()
    began = time.perf_counter()
    results = []
    bandwidth = copy_bandwidth()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; copy bandwidth {bandwidth / 1e12:.2f} TB/s "
          f"(torch copy of 1 GiB, this run): the roofline below")
    gen = torch.Generator().manual_seed(0)
    for shape in {"both": ["1b", "8b"], "all": ["1b", "8b", "qwen7b"], "none": []}.get(args.shape, [args.shape]):
        compare(shape, args, bandwidth, gen, results)
    if args.int4_layers:
        int4_case(args, bandwidth, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown:
        print_markdown(results)
    print(f"\nbench_models: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
