"""Decoding a Llama on the GPU: nbx.models against torch written as Hugging Face writes it (eager,
DynamicCache-style torch.cat cache) and torch with its decode step captured as a CUDA graph (a
static cache, as HF's StaticCache + CUDA graphs), in one process (torch is the peer; nbx itself
never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_models.py
    ... bench_models.py --shape both      # Llama-3-8B's shape too (writes a 16 GB checkpoint: ~2 min more)
    ... bench_models.py --json models.json && python3 tools/bench/plot_models.py models.json models.png

The checkpoint is seeded (nbx.models.write_checkpoint, weights drawn on the GPU, bfloat16) in the
HF layout with the shape of Llama-3.2-1B (tied embeddings, GQA 32/8, head dim 64, llama3 rope), or
Llama-3-8B. Prompt 512 random token ids, 256 new tokens, greedy, batch 1 (--batch runs several
prompts of 512 through nbx's batched generate and torch's padded batch of equal lengths).

Figures: prefill tokens/s (the prompt's forward and the first token, synchronized), decode tokens/s
and ms/token (every later token; each step reads its token back to the host, as a generation loop
must). Roofline: the bytes a decode step must read (every weight once, the lm_head included, and
the KV cache at the mean context) over the copy bandwidth measured in this run (torch clone of
1 GiB). Peak: nbx's allocator's live peak against the plan priced before the run (weights + KV
cache + the prefill's largest live activations), and torch.cuda.max_memory_allocated.
"""
from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import nbx.core as nbx
from nbx import models
from nbx.models.writer import small_config

SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
               num_hidden_layers=16, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0,
               rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               num_hidden_layers=32, vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0,
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}),
}


def config_of(shape: str) -> dict:
    return small_config("LlamaForCausalLM", **SHAPES[shape], max_position_embeddings=131072, rms_norm_eps=1e-5,
                        bos_token_id=128000, eos_token_id=128001)


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
            q = F.linear(h, self.w[p + "self_attn.q_proj.weight"]).view(b, t, self.heads, -1).transpose(1, 2)
            k = F.linear(h, self.w[p + "self_attn.k_proj.weight"]).view(b, t, self.kv_heads, -1).transpose(1, 2)
            v = F.linear(h, self.w[p + "self_attn.v_proj.weight"]).view(b, t, self.kv_heads, -1).transpose(1, 2)
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
    first = time.perf_counter()
    for step in range(1, new_tokens):
        pos = torch.full((b, 1), n + step - 1, device="cuda")
        token = model.forward(token[:, None], pos, cache).argmax(-1)
        out.append(token.tolist())
    return out, first - start, time.perf_counter() - first


def torch_graphs(model, prompts, new_tokens):
    """Prefill eagerly into a static cache, then replay one captured decode step per token."""
    b, n = len(prompts), len(prompts[0])
    capacity = n + new_tokens
    cache = [[torch.zeros(b, model.kv_heads, capacity, model.head_dim, dtype=torch.bfloat16, device="cuda")
              for _ in range(2)] for _ in range(model.c["num_hidden_layers"])]
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
    first = time.perf_counter()
    for step_index in range(1, new_tokens):
        static_pos.fill_(n + step_index - 1)
        graph.replay()
        out.append(static_token[:, 0].tolist())
    return out, first - start, time.perf_counter() - first


# ---- nbx -----------------------------------------------------------------------------------
def nbx_run(model, prompts, new_tokens):
    model.eos = ()   # random weights: run every step
    times = []
    start = time.perf_counter()
    out = model.generate_batch(prompts, new_tokens, on_token=lambda i, t: times.append(time.perf_counter()))
    first = times[len(prompts) - 1]
    return out, first - start, times[-1] - first


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


def plan_bytes(config, batch, prompt, new):
    """What the run must hold: weights, the KV cache, and the prefill's largest live activations
    (the residual, a layer's q/k/v/attention output, the MLP's gate and up products, the logits)."""
    shapes = models.families.parameter_shapes(config)
    weights = sum(2 * math.prod(s) for s in shapes.values())
    kv = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 2 * (prompt + new)
    tokens = batch * prompt
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    acts = 2 * tokens * (3 * hidden + 2 * heads * config["head_dim"] + 3 * config["intermediate_size"])
    logits = 4 * batch * config["vocab_size"] * 2
    return weights, kv * batch, acts + logits


def read_bytes_per_step(config, batch, prompt, new):
    shapes = models.families.parameter_shapes(config)
    weights = sum(2 * math.prod(s) for name, s in shapes.items() if name != "model.embed_tokens.weight" or
                  config["tie_word_embeddings"])   # a tied table is read whole as the lm_head
    mean_context = prompt + new / 2
    kv = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 2 * mean_context
    return weights + batch * kv


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=["1b", "8b", "both"], default="1b")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--json", help="also write the table's rows here (tools/bench/plot_models.py draws them)")
    args = parser.parse_args()
    results = []
    bandwidth = copy_bandwidth()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; copy bandwidth {bandwidth / 1e12:.2f} TB/s "
          f"(torch clone of 1 GiB, this run): the roofline below")
    from nbx.memory.allocator import get_allocator
    gen = torch.Generator().manual_seed(0)
    for shape in (["1b", "8b"] if args.shape == "both" else [args.shape]):
        config = config_of(shape)
        prompts = torch.randint(0, config["vocab_size"], (args.batch, args.prompt), generator=gen).tolist()
        with tempfile.TemporaryDirectory(prefix=f"nbx-bench-{shape}-", dir="/tmp") as tmp:
            t0 = time.perf_counter()
            folder = models.write_checkpoint(Path(tmp), config, seed=0, dtype="bfloat16", shards=4, device="cuda")
            written = time.perf_counter() - t0
            weights_b, kv_b, acts_b = plan_bytes(config, args.batch, args.prompt, args.new)
            planned = weights_b + kv_b + acts_b
            print(f"\nLlama {shape} shape: {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
                  f"GQA {config['num_attention_heads']}/{config['num_key_value_heads']}, vocab {config['vocab_size']},"
                  f" bfloat16; batch {args.batch}, prompt {args.prompt}, {args.new} new tokens, greedy. Checkpoint "
                  f"written in {written:.1f} s")
            step_bytes = read_bytes_per_step(config, args.batch, args.prompt, args.new)
            rows = []
            cuda0 = nbx.as_device("cuda:0")
            get_allocator("cuda").empty_cache(cuda0)
            get_allocator("cuda").reset_peak(cuda0)   # the writer's draws are not the model's
            t0 = time.perf_counter()
            model = models.load(folder, device="cuda")
            print(f"nbx load {time.perf_counter() - t0:.1f} s; planned {planned / 2**30:.2f} GiB (weights "
                  f"{weights_b / 2**30:.2f}, KV cache {kv_b / 2**30:.2f}, prefill activations {acts_b / 2**30:.2f})")
            try:
                # a warm-up at the timed sizes: kernels compiled and tuned, the decode steps captured
                # (the second generation of the same sizes reuses the kept cache and its graphs)
                nbx_run(model, prompts, args.new)
                nbx_tokens, prefill, decode = nbx_run(model, prompts, args.new)
                peak = get_allocator("cuda").stats(cuda0).peak_live_bytes
                rows.append((f"nbx ({model.last_decode} decode)", prefill, decode, peak))
            except nbx.NbxError as exc:
                print(f"nbx refused: {type(exc).__name__}: {exc}")
                nbx_tokens = None
            model.release_cache()
            del model
            get_allocator("cuda").empty_cache(cuda0)   # hand nbx's cached blocks back before torch's turn
            peer = TorchLlama(folder, config)
            torch_eager(peer, [p[:16] for p in prompts], 4)   # cuBLAS handles and SDPA kernels loaded
            torch.cuda.reset_peak_memory_stats()
            eager_tokens, prefill, decode = torch_eager(peer, prompts, args.new)
            rows.append(("torch eager", prefill, decode, torch.cuda.max_memory_allocated()))
            torch.cuda.reset_peak_memory_stats()
            graph_tokens, prefill, decode = torch_graphs(peer, prompts, args.new)
            rows.append(("torch CUDA graphs", prefill, decode, torch.cuda.max_memory_allocated()))
            graph_tps = args.batch * (args.new - 1) / rows[-1][2]
            print(f"{'':22} {'prefill tok/s':>14} {'decode tok/s':>13} {'ms/token':>9} {'% roofline':>11} "
                  f"{'peak GiB':>9} {'decode vs graphs':>17}")
            for name, prefill, decode, peak in rows:
                tps = args.batch * (args.new - 1) / decode
                roof = 100 * (step_bytes * (args.new - 1) / decode) / bandwidth
                print(f"{name:22} {args.batch * args.prompt / prefill:14,.0f} {tps:13,.1f} "
                      f"{decode / (args.new - 1) * 1e3:9.2f} {roof:10.1f}% {peak / 2**30:9.2f} "
                      f"{tps / graph_tps:16.2f}x")
                results.append(dict(shape=shape, batch=args.batch, prompt=args.prompt, new=args.new, system=name,
                                    prefill_tokens_s=args.batch * args.prompt / prefill, decode_tokens_s=tps,
                                    ms_token=decode / (args.new - 1) * 1e3, roofline_pct=roof, peak_gib=peak / 2**30,
                                    planned_gib=planned / 2**30))
            if rows[0][0].startswith("nbx"):
                print(f"nbx peak / planned: {rows[0][3] / planned:.3f}")
            if nbx_tokens is not None:
                torch_rows = [list(r) for r in zip(*eager_tokens)]
                same = sum(a == b for x, y in zip(nbx_tokens, torch_rows) for a, b in zip(x, y))
                print(f"greedy tokens equal to torch eager's: {same} of {args.batch * args.new} (bf16 both: "
                      f"after a near-tie the two continue differently)")
            del peer
            torch.cuda.empty_cache()
    if args.json:
        import json
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
