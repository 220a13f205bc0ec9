#!/usr/bin/env python3
"""Record an allocation trace on a GPU from a decode workload written with nbx ops, as nbx.memory's TSV.

The workload is an eager Llama-style decoder at the shapes of Llama-3.2-1B (hidden 2048, 16 layers,
32 heads, 8 KV heads, head dim 64, intermediate 8192, vocabulary 128256, bfloat16), op by op as a
Hugging Face-style eager forward allocates: weights loaded once; per layer an RMSNorm, q/k/v
projections, rotary embeddings, a KV cache grown by concatenation (a new tensor each step, the old one
freed), attention with a float32 softmax, the output projection and residual, an RMSNorm and the
gated MLP; then the final norm, last-token logits upcast to float32 and an argmax read on the host.
Requests: batch 1 / prompt 512, batch 16 / prompt 256, batch 64 / prompt 128, each a prefill and
8 decode steps.

nbx has no matrix-product kernel on the GPU yet, so every product is EMULATED with elementwise ops
and reductions whose outputs have the product's exact size: a projection x @ W is
mean(x, -1, keepdim) * W[0] (one (..., 1) temporary beside the output), the attention scores q @ k^T
and the values p @ v likewise, the embedding lookup a broadcast multiply. The trace's header says so;
the allocation pattern is what an eager engine produces, the arithmetic is not.

    python3 tools/record_trace.py [--out trace.tsv] [--budget-s 45] [--layers 16]

A one-layer pass over every request shape runs first, unrecorded, so that compiling the kernels
does not eat the budget.

The pool records from a clean start; every host read is a `sync` row. At the end the trace is
replayed with nbx.memory.pool.simulate and compared with the device pool's own peaks (they must
agree: the replay is the pool's rules over a fake device), then written with its facts.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for src in sorted(ROOT.glob("packages/*/src")):
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))

import nbx.core as nbx  # noqa: E402

MiB = 1 << 20


@dataclass(frozen=True)
class Shapes:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    dtype: str


LLAMA_1B = Shapes("Llama-3.2-1B", 2048, 16, 32, 8, 64, 8192, 128256, "bfloat16")
TINY = Shapes("tiny", 64, 2, 4, 2, 16, 128, 256, "float32")  # for a check on the interpreter
REQUESTS = ((1, 512), (16, 256), (64, 128))
DECODE_STEPS = 8


class Decoder:
    """Weights allocated once; forward(ids_shape, cache) allocates what an eager forward allocates."""

    def __init__(self, s: Shapes, device: str):
        self.s, self.device = s, device

        def weight(*shape):  # contents do not matter (the products are emulated): a small constant
            return nbx.full(shape, 0.01, dtype=s.dtype, device=device)
        self.embed = weight(s.vocab, s.hidden)
        self.layers = [dict(norm1=weight(s.hidden), wq=weight(s.hidden, s.heads * s.head_dim),
                            wk=weight(s.hidden, s.kv_heads * s.head_dim), wv=weight(s.hidden, s.kv_heads * s.head_dim),
                            wo=weight(s.heads * s.head_dim, s.hidden), norm2=weight(s.hidden),
                            gate=weight(s.hidden, s.intermediate), up=weight(s.hidden, s.intermediate),
                            down=weight(s.intermediate, s.hidden)) for _ in range(s.layers)]
        self.norm = weight(s.hidden)
        self.lm_head = weight(s.hidden, s.vocab)

    def project(self, x, w):
        """x @ w emulated: the product's output size, one (..., 1) temporary."""
        return nbx.multiply(nbx.mean(x, dim=-1, keepdim=True), w[0])

    def forward(self, batch: int, q_len: int, cache: list):
        s = self.s
        g = s.heads // s.kv_heads
        past = 0 if cache[0] is None else cache[0][0].shape[2]
        total = past + q_len
        ones = nbx.full((batch, q_len, 1), 1.0, dtype=s.dtype, device=self.device)
        h = nbx.multiply(ones, self.embed[0])                          # the embedding lookup
        del ones
        cos = nbx.full((q_len, s.head_dim), 0.5, dtype=s.dtype, device=self.device)  # rotary tables, per forward
        sin = nbx.full((q_len, s.head_dim), 0.5, dtype=s.dtype, device=self.device)
        mask = (nbx.full((q_len, total), 0.0, dtype=s.dtype, device=self.device) if q_len > 1 else None)
        for i, w in enumerate(self.layers):
            residual = h
            x = nbx.rms_norm(h, (s.hidden,), w["norm1"])
            q = self.project(x, w["wq"]).reshape(batch, q_len, s.kv_heads, g, s.head_dim).permute(0, 2, 3, 1, 4)
            k = self.project(x, w["wk"]).reshape(batch, q_len, s.kv_heads, s.head_dim).permute(0, 2, 1, 3)
            v = self.project(x, w["wv"]).reshape(batch, q_len, s.kv_heads, s.head_dim).permute(0, 2, 1, 3)
            del x
            q = nbx.add(nbx.multiply(q, cos), nbx.multiply(q, sin))   # rotary: q*cos + rotate(q)*sin
            k = nbx.add(nbx.multiply(k, cos), nbx.multiply(k, sin))
            k, v = self.grow_cache(cache, i, k, v, batch, past, total)
            qm = nbx.mean(q, dim=-1, keepdim=True)                           # (B, kv, g, T, 1)
            km = nbx.mean(k, dim=-1).reshape(batch, s.kv_heads, 1, 1, total)  # (B, kv, 1, 1, S)
            scores = nbx.multiply(qm, km)                                    # q @ k^T: (B, kv, g, T, S)
            del q, qm, km
            if mask is not None:
                scores = nbx.add(scores, mask)
            probs = nbx.astype(nbx.softmax(scores, dim=-1, dtype="float32"), s.dtype)
            del scores
            ps = nbx.sum(probs, dim=-1, keepdim=True)                        # (B, kv, g, T, 1)
            vm = nbx.mean(v, dim=-2, keepdim=True).reshape(batch, s.kv_heads, 1, 1, s.head_dim)
            attn = nbx.multiply(ps, vm)                                      # p @ v: (B, kv, g, T, hd)
            del probs, ps, vm, k, v
            attn = attn.permute(0, 3, 1, 2, 4).contiguous().reshape(batch, q_len, s.heads * s.head_dim)
            o = self.project(attn, w["wo"])
            del attn
            h = nbx.add(residual, o)
            del o, residual
            residual = h
            x = nbx.rms_norm(h, (s.hidden,), w["norm2"])
            act = nbx.multiply(nbx.silu(self.project(x, w["gate"])), self.project(x, w["up"]))
            del x
            down = self.project(act, w["down"])
            del act
            h = nbx.add(residual, down)
            del down, residual
        x = nbx.rms_norm(h[:, q_len - 1:], (s.hidden,), self.norm)
        del h
        logits = nbx.astype(self.project(x, self.lm_head), "float32")
        del x
        return nbx.argmax(logits, dim=-1)

    def grow_cache(self, cache, i, k, v, batch, past, total):
        """A new cache tensor one step longer, the old one copied in and freed (cat's allocation pattern)."""
        s = self.s
        out = []
        for j, new in enumerate((k, v)):
            grown = nbx.empty((batch, s.kv_heads, total, s.head_dim), dtype=s.dtype, device=self.device)
            if past:
                grown[:, :, :past] = cache[i][j]
            grown[:, :, past:] = new
            out.append(grown)
        cache[i] = tuple(out)
        return out


def run(shapes: Shapes, device: str, requests, steps: int, on_sync=None, budget_s: float | None = None):
    """The workload; on_sync() after every host read. Past budget_s no new forward starts: the requests
    completed are returned with the model (a request cut short is not among them)."""
    t0 = time.perf_counter()
    model = Decoder(shapes, device)
    done = []

    def over() -> bool:
        return budget_s is not None and time.perf_counter() - t0 > budget_s

    for batch, prompt in requests:
        if over():
            break
        cache = [None] * shapes.layers
        tokens = model.forward(batch, prompt, cache).numpy()
        if on_sync:
            on_sync()
        for _ in range(steps):
            if over():
                break
            tokens = model.forward(batch, 1, cache).numpy()
            if on_sync:
                on_sync()
        else:
            assert tokens.shape == (batch, 1)
            done.append((batch, prompt))
        del cache
    return model, done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="trace path (default: $OUT/h200_decode_trace.tsv)")
    parser.add_argument("--budget-s", type=float, default=45.0,
                        help="start no new forward after this many seconds of recording")
    parser.add_argument("--layers", type=int, default=LLAMA_1B.layers)
    args = parser.parse_args(argv)

    from nbx.core import device_files
    from nbx.core.device import Device
    from nbx.devices import nvidia
    from nbx.devices.nvidia import runtime
    from nbx.memory import allocator
    from nbx.memory.pool import NBX, simulate
    from nbx.memory.trace import TraceRecorder, write_trace

    out = Path(args.out or Path(os.environ.get("OUT") or tempfile.mkdtemp()) / "h200_decode_trace.tsv")
    shapes = Shapes(**{**LLAMA_1B.__dict__, "layers": args.layers})
    device = Device("cuda", 0)
    t0 = time.perf_counter()
    warm, _ = run(Shapes(**{**shapes.__dict__, "layers": 1}), "cuda", REQUESTS, 1)  # compiles the kernels
    del warm
    print(f"warm-up (one layer, every request shape, unrecorded): {time.perf_counter() - t0:.1f} s")
    gc.collect()
    pool = allocator.get_allocator("cuda").pool(device)
    pool.empty_cache()
    pool.reset_peak()
    start = pool.stats()
    if start.allocated:
        print(f"warning: {start.allocated} bytes were live before recording", file=sys.stderr)
    name = nvidia.device_properties(0).name
    free, total = runtime.memory_info(0)
    recorder = TraceRecorder(
        source="tools/record_trace.py: recorded by the cuda backend's caching pool",
        device=f"{name}, {_dt.date.today().isoformat()}",
        workload=f"eager Llama-style decode at {shapes.name} shapes (hidden {shapes.hidden}, {shapes.layers} layers, "
                 f"{shapes.heads} heads, {shapes.kv_heads} KV heads, head dim {shapes.head_dim}, intermediate "
                 f"{shapes.intermediate}, vocabulary {shapes.vocab}, {shapes.dtype}); KV cache grown by concatenation",
        emulated="every matrix product (projections, q@k^T, p@v, lm head) and the embedding lookup: elementwise ops "
                 "and reductions with the product's exact output size plus one (..., 1) temporary; no GEMM kernel yet",
        rules=NBX.name, parked_fraction=str(device_files.in_force(device).value("memory.pool_parked_fraction")))
    pool.recorder = recorder
    t0 = time.perf_counter()
    try:
        model, done = run(shapes, "cuda", REQUESTS, DECODE_STEPS, on_sync=recorder.sync, budget_s=args.budget_s)
    finally:
        pool.recorder = None
    seconds = time.perf_counter() - t0
    recorder.meta["requests"] = ", ".join(f"batch {b} / prompt {p} + {DECODE_STEPS} decode steps" for b, p in done)
    if len(done) < len(REQUESTS):
        recorder.meta["requests"] += f" (then stopped at the {args.budget_s:.0f} s budget, mid-request)"
    trace = recorder.trace()
    stats = pool.stats()
    write_trace(out, trace)
    replay = simulate(trace, NBX, capacity=total, parked_fraction=float(recorder.meta["parked_fraction"]))
    print(f"recorded {len(trace)} rows in {seconds:.1f} s ({len(done)} of {len(REQUESTS)} requests) -> {out}")
    print(f"live at peak {trace.live_peak / MiB:.1f} MiB; device pool: reserved at peak "
          f"{stats.reserved_peak / MiB:.1f} MiB, allocated at peak {stats.allocated_peak / MiB:.1f} MiB")
    same = replay.reserved_peak == stats.reserved_peak and replay.allocated_peak == stats.allocated_peak
    print(f"simulate:    reserved at peak {replay.reserved_peak / MiB:.1f} MiB, allocated at peak "
          f"{replay.allocated_peak / MiB:.1f} MiB ({'the same' if same else 'DIFFERENT'})")
    print(pool.memory_summary())
    del model
    if not same:
        print("FAILED: simulate does not reproduce the device pool's peaks", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
