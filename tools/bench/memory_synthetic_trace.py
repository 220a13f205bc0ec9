"""Write the synthetic allocation trace of a transformer decode loop that nbx.memory ships.

SYNTHETIC: no device ran this. Until the H200 trace of a decode loop written with nbx ops exists,
this script writes, deterministically, the allocations and frees an eager decoder makes: the
tensor sizes and lifetimes of an eager Hugging Face-style Qwen2 forward at the shapes of
Qwen2.5-0.5B (bf16 weights, vocabulary 151936), op by op. Weights are loaded once; each request
batch runs a prefill and greedy decode steps whose KV cache grows by concatenation (a new buffer
per layer per step, the old one freed) and whose last-token logits are upcast to float32.

    python tools/bench/memory_synthetic_trace.py            # rewrites the shipped file
    python tools/bench/memory_synthetic_trace.py --check    # fails if the shipped file differs
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]

from nbx.memory.trace import Trace, TraceEvent, format_trace  # noqa: E402

NAME = "synthetic_decode_qwen2.5-0.5b_shapes.tsv"
OUT = ROOT / "packages/nbx-memory/src/nbx/memory/traces" / NAME

# Qwen2.5-0.5B's configuration (config.json of the public checkpoint).
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 896, 24, 14, 2, 64, 4864, 151936
BF16, F32, I64 = 2, 4, 8
# (batch, prompt tokens, new tokens): a single long request, a medium batch, a large short batch.
RUNS = ((1, 512, 8), (16, 256, 8), (64, 128, 8))


class Recorder:
    def __init__(self):
        self.events: list[TraceEvent] = []
        self.next_id = 0
        self.live: dict[int, int] = {}

    def new(self, nbytes: int) -> int:
        self.next_id += 1
        self.live[self.next_id] = nbytes
        self._row("alloc", nbytes, self.next_id)
        return self.next_id

    def drop(self, *ids: int) -> None:
        for i in ids:
            self._row("free", self.live.pop(i), i)

    def _row(self, kind: str, nbytes: int, block: int) -> None:
        self.events.append(TraceEvent(kind, nbytes, 0, block, len(self.events) * 1000))


def load_weights(r: Recorder) -> list[int]:
    ids = [r.new(VOCAB * HIDDEN * BF16)]  # embedding, tied with the output head
    kv = KV_HEADS * HEAD_DIM
    for _ in range(LAYERS):
        for n in (HIDDEN, HIDDEN * HIDDEN, HIDDEN, kv * HIDDEN, kv, kv * HIDDEN, kv, HIDDEN * HIDDEN, HIDDEN,
                  INTER * HIDDEN, INTER * HIDDEN, HIDDEN * INTER):
            ids.append(r.new(n * BF16))
    ids.append(r.new(HIDDEN * BF16))            # final norm
    ids.append(r.new(HEAD_DIM // 2 * F32))      # rotary inverse frequencies
    return ids


def rms_norm(r: Recorder, x: int, rows: int) -> int:
    """Qwen2RMSNorm: upcast, pow, mean, + eps, rsqrt, multiply, downcast, times the weight."""
    x32 = r.new(rows * HIDDEN * F32)
    sq = r.new(rows * HIDDEN * F32)
    mean = r.new(rows * F32)
    r.drop(sq)
    eps = r.new(rows * F32)
    r.drop(mean)
    rs = r.new(rows * F32)
    r.drop(eps)
    y32 = r.new(rows * HIDDEN * F32)
    r.drop(x32, rs)
    y16 = r.new(rows * HIDDEN * BF16)
    r.drop(y32)
    out = r.new(rows * HIDDEN * BF16)
    r.drop(y16)
    return out


def rotary(r: Recorder, x_bytes: int, x: int) -> int:
    """x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1)."""
    a = r.new(x_bytes)
    neg = r.new(x_bytes // 2)
    rot = r.new(x_bytes)
    r.drop(neg)
    b = r.new(x_bytes)
    r.drop(rot)
    out = r.new(x_bytes)
    r.drop(a, b, x)
    return out


def layer(r: Recorder, h: int, cache: list[int | None], li: int, batch: int, new: int, past: int) -> int:
    rows, total = batch * new, past + new
    n = rms_norm(r, h, rows)
    q = r.new(rows * HIDDEN * BF16)
    k = r.new(rows * KV_HEADS * HEAD_DIM * BF16)
    v = r.new(rows * KV_HEADS * HEAD_DIM * BF16)
    r.drop(n)
    q = rotary(r, rows * HIDDEN * BF16, q)
    k = rotary(r, rows * KV_HEADS * HEAD_DIM * BF16, k)
    for j, t in ((0, k), (1, v)):  # DynamicCache: cat(past, new) along the sequence
        grown = r.new(batch * KV_HEADS * total * HEAD_DIM * BF16)
        if cache[2 * li + j] is not None:
            r.drop(cache[2 * li + j])
        r.drop(t)
        cache[2 * li + j] = grown
    k_rep = r.new(batch * HEADS * total * HEAD_DIM * BF16)  # repeat_kv for grouped heads
    v_rep = r.new(batch * HEADS * total * HEAD_DIM * BF16)
    scores = batch * HEADS * new * total
    s = r.new(scores * BF16)
    scaled = r.new(scores * BF16)
    r.drop(s, k_rep)
    masked = r.new(scores * BF16)
    r.drop(scaled)
    p32 = r.new(scores * F32)
    r.drop(masked)
    p = r.new(scores * BF16)
    r.drop(p32)
    o = r.new(rows * HIDDEN * BF16)
    r.drop(p, v_rep, q)
    oc = r.new(rows * HIDDEN * BF16)  # transpose(1, 2).contiguous()
    r.drop(o)
    proj = r.new(rows * HIDDEN * BF16)
    r.drop(oc)
    h2 = r.new(rows * HIDDEN * BF16)
    r.drop(proj, h)
    n = rms_norm(r, h2, rows)
    gate = r.new(rows * INTER * BF16)
    act = r.new(rows * INTER * BF16)
    r.drop(gate)
    up = r.new(rows * INTER * BF16)
    prod = r.new(rows * INTER * BF16)
    r.drop(act, up, n)
    down = r.new(rows * HIDDEN * BF16)
    r.drop(prod)
    h3 = r.new(rows * HIDDEN * BF16)
    r.drop(down, h2)
    return h3


def forward(r: Recorder, cache: list[int | None], batch: int, new: int, past: int) -> int:
    """One forward over new tokens per sequence; returns the float32 logits of the last token."""
    rows, total = batch * new, past + new
    ids = r.new(rows * I64)
    pos = r.new(rows * I64)
    mask = r.new(batch * new * total * BF16)
    h = r.new(rows * HIDDEN * BF16)
    freqs = r.new(rows * HEAD_DIM // 2 * F32)
    emb = r.new(rows * HEAD_DIM * F32)
    r.drop(freqs)
    cos32, sin32 = r.new(rows * HEAD_DIM * F32), r.new(rows * HEAD_DIM * F32)
    r.drop(emb)
    cos, sin = r.new(rows * HEAD_DIM * BF16), r.new(rows * HEAD_DIM * BF16)
    r.drop(cos32, sin32)
    for li in range(LAYERS):
        h = layer(r, h, cache, li, batch, new, past)
    n = rms_norm(r, h, rows)
    r.drop(h, cos, sin, mask, pos, ids)
    last = r.new(batch * HIDDEN * BF16)  # hidden[:, -1:] made contiguous for the head
    r.drop(n)
    logits = r.new(batch * VOCAB * BF16)
    r.drop(last)
    logits32 = r.new(batch * VOCAB * F32)
    r.drop(logits)
    return logits32


def generate(r: Recorder, batch: int, prompt: int, steps: int) -> None:
    cache: list[int | None] = [None] * (2 * LAYERS)
    seq = r.new(batch * prompt * I64)
    done = r.new(batch * I64)
    past, new = 0, prompt
    for step in range(steps + 1):
        logits = forward(r, cache, batch, new, past)
        probs_max = r.new(batch * I64)   # argmax
        r.drop(logits)
        grown = r.new(batch * (prompt + step + 1) * I64)  # cat(input_ids, next_tokens)
        r.drop(seq, probs_max)
        seq = grown
        flags = r.new(batch)                       # eos check
        r.drop(flags)
        past, new = past + new, 1
    r.drop(seq, done, *[c for c in cache if c is not None])


def build() -> Trace:
    r = Recorder()
    load_weights(r)
    for batch, prompt, steps in RUNS:
        generate(r, batch, prompt, steps)
    meta = {
        "source": "SYNTHETIC, written by tools/bench/memory_synthetic_trace.py; no device ran it",
        "model": f"eager Qwen2 forward at Qwen2.5-0.5B shapes: hidden {HIDDEN}, layers {LAYERS}, heads {HEADS}, "
                 f"kv heads {KV_HEADS}, head dim {HEAD_DIM}, intermediate {INTER}, vocabulary {VOCAB}, bf16",
        "runs": "; ".join(f"batch {b}, prompt {p}, {s} new tokens" for b, p, s in RUNS),
        "time_ns": "the row's ordinal x 1000 (no device timing)",
        "stream": "one stream (0)",
    }
    return Trace(r.events, meta)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing")
    args = parser.parse_args()
    text = format_trace(build())
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT.relative_to(ROOT)}: {'up to date' if same else 'DIFFERS from the generator'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}: {text.count(chr(10))} lines, {len(text)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
