"""One Llama-style decoder layer decoding one token (batch 1, bfloat16, hidden 4096, 32 query heads and
8 KV heads of 128, a 4096-token KV cache, SwiGLU MLP of 14336): nbx eager, nbx captured
(nbx.graph.capture), the sum of the captured step's kernel times, torch eager and torch's CUDA
graph of the same layer (torch's SDPA for the attention), in one process on the same GPU (torch is
the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_decoder_layer.py
    PYTHONPATH=... TRITON_INTERPRET=1 python3 tools/bench/bench_decoder_layer.py --tiny --device interp   # smoke

The layer: h = rms_norm(x); qkv = h @ Wqkv.T (fused, 6144 wide; nbx: the norm inside the product,
linear's norm=); rope of q and k and k, v written to the paged cache at the token's slot (nbx: one
rotary_kv_cache_write(q=); torch: the ropes then an index copy into a dense cache); attention of the token over the cache (nbx: paged_attention, its
decode front-end, max_seq_len given so nothing reads the device; torch: SDPA with GQA);
x2 = x + attn @ Wo.T; out = x2 + (silu(n @ Wg.T) * (n @ Wu.T)) @ Wd.T with n = rms_norm(x2) (nbx: the
norm inside gated_linear): six nbx ops, the decode layer with its norms fused (nbx.models keeps the norms' launches
while decoder.NORM_FUSED_ROWS is 0: docs/models.md).
Weights are seeded (numpy, scaled 0.02), the cache is filled with seeded values.

Columns, microseconds a call: wall+sync (one call then a synchronize, the median), gpu (CUDA events
around back-to-back calls behind a GPU spin: device time alone). "kernels" is the sum of the
captured step's kernels' GPU times, each launch of the step timed alone by CUDA events around 20
back-to-back repeats of that launch (its plan run again with the step's own values: the same
grid and arguments), L2 warm as in a replay. Goals (issue 14): captured replay's gpu within 1.1x
of kernels; captured wall+sync <= torch graph's wall+sync (>= 1.0x). Finishes in well under 60 s.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import nbx.core as nbx

FULL = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, mlp=14336, context=4096)
TINY = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, mlp=96, context=32)
EPS = 1e-5


def weights(shape: dict, seed: int = 0) -> dict:
    """The layer's seeded weights and cache contents, as float32 numpy (each side casts to bf16)."""
    rng = np.random.default_rng(seed)
    h, q, kv, e, m, n = (shape[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "mlp", "context"))
    g = lambda *s: (rng.standard_normal(s) * 0.02).astype(np.float32)  # noqa: E731
    inv = 1.0 / 10000 ** (np.arange(0, e, 2, dtype=np.float64) / e)
    angles = np.outer(np.arange(n + 1), inv)
    cos = np.concatenate([np.cos(angles)] * 2, axis=1).astype(np.float32)
    sin = np.concatenate([np.sin(angles)] * 2, axis=1).astype(np.float32)
    return dict(x=g(1, h) * 50, w_in=1 + g(h), w_post=1 + g(h), w_qkv=g((q + 2 * kv) * e, h), w_o=g(h, q * e),
                w_gate=g(m, h), w_up=g(m, h), w_down=g(h, m), k=g(n, kv, e) * 50, v=g(n, kv, e) * 50, cos=cos, sin=sin)


class NbxLayer:
    """The layer over nbx ops; the cache paged (block_tokens from the device file), the token at
    position context - 1 (its slot's old contents overwritten by the step itself)."""

    def __init__(self, shape: dict, arrays: dict, device):
        from nbx.memory.kv_cache import block_tokens_of
        self.shape, self.device = shape, device
        bf = lambda a: nbx.asarray(a).to(device).to(dtype="bfloat16")  # noqa: E731
        self.w = {k: bf(v) for k, v in arrays.items() if k not in ("k", "v", "cos", "sin", "x")}
        self.cos, self.sin = (nbx.asarray(arrays[k]).to(device) for k in ("cos", "sin"))
        n, kv, e = shape["context"], shape["kv_heads"], shape["head_dim"]
        block = block_tokens_of(device)
        blocks = -(-n // block)
        k_cache, v_cache = np.zeros((blocks * block, kv, e), np.float32), np.zeros((blocks * block, kv, e), np.float32)
        k_cache[:n], v_cache[:n] = arrays["k"], arrays["v"]
        self.k_cache = bf(k_cache.reshape(blocks, block, kv, e))
        self.v_cache = bf(v_cache.reshape(blocks, block, kv, e))
        self.table = nbx.asarray(np.arange(blocks, dtype=np.int32)[None]).to(device)
        self.lens = nbx.asarray(np.array([n], np.int32)).to(device)
        self.position = nbx.asarray(np.array([n - 1], np.int64)).to(device)
        self.slots = nbx.asarray(np.array([n - 1], np.int64)).to(device)
        self.x = bf(arrays["x"])

    def __call__(self, x):
        s, w = self.shape, self.w
        q_heads, kv, e = s["heads"], s["kv_heads"], s["head_dim"]
        qkv = nbx.linear(x, w["w_qkv"], norm=(w["w_in"], EPS))            # (1, (Hq + 2 Hk) E), the norm inside
        q = qkv[:, :q_heads * e].reshape(1, q_heads, e)
        k = qkv[:, q_heads * e:(q_heads + kv) * e].reshape(1, kv, e)
        v = qkv[:, (q_heads + kv) * e:].reshape(1, kv, e)
        q = nbx.rotary_kv_cache_write(k, v, self.cos, self.sin, self.position, self.k_cache, self.v_cache, self.slots,
                                      q=q)                                 # q and k roped, k and v written: one launch
        attn = nbx.paged_attention(q.reshape(1, 1, q_heads, e), self.k_cache, self.v_cache, self.table, self.lens,
                                   max_seq_len=s["context"])
        x2 = nbx.linear(attn.reshape(1, q_heads * e), w["w_o"], residual=x)
        inner = nbx.gated_linear(x2, w["w_gate"], w["w_up"], norm=(w["w_post"], EPS))
        return nbx.linear(inner, w["w_down"], residual=x2)


def time_us(fn, sync, reps: int) -> float:
    """wall+sync: the median of single calls each followed by a synchronize."""
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def smoke(args) -> int:
    """The nbx side on a device without torch (interp, cpu): eager and captured agree bit for bit."""
    shape = TINY if args.tiny else FULL
    device = nbx.as_device(args.device)
    layer = NbxLayer(shape, weights(shape), device)
    t0 = time.perf_counter()
    eager = layer(layer.x).numpy()
    eager_s = time.perf_counter() - t0
    again = layer(layer.x).numpy()
    same = np.array_equal(eager.view(np.uint16), again.view(np.uint16))
    print(f"decoder layer {shape} bf16 on {device}: out {eager.shape} {eager.dtype}, eager {eager_s * 1e3:.1f} ms, "
          f"repeat bit-equal: {same}, finite: {bool(np.isfinite(eager.astype(np.float32)).all())}")
    try:
        captured = nbx.graph.capture(layer, layer.x)(layer.x).numpy()
        print(f"captured == eager: {np.array_equal(eager.view(np.uint16), captured.view(np.uint16))}")
    except nbx.errors.GraphCaptureError as exc:  # host devices check slots on the host (paged.py's front-end)
        print(f"captured: refused on {device} ({type(exc).__name__}: {str(exc)[:90]}...)")
    return 0 if same else 1


def kernels_us(layer, torch, reps: int = 20) -> tuple[float, int]:
    """The sum of the captured step's launches' GPU times, each launch run alone (see the doc)."""
    from nbx.kernels import plans
    runs = []
    original = plans.execute

    def recording(plan, values):
        runs.append((plan, dict(values)))
        return original(plan, values)
    plans.execute = recording
    try:
        from nbx.core import spec
        spec.forget()    # the prepared fast path bypasses plans.execute: record every plan run once
        prepared, plans.prepared = plans.prepared, lambda plan: None
        try:
            layer(layer.x)
        finally:
            plans.prepared = prepared
            spec.forget()
    finally:
        plans.execute = original
    total = 0.0
    for plan, values in runs:
        filled = dict(values)
        original(plan, filled)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            original(plan, dict(filled))
        end.record()
        torch.cuda.synchronize()
        total += start.elapsed_time(end) * 1e3 / reps
    return total, sum(len(p.launches) for p, _ in runs)


def gpu_run(args) -> int:
    import torch
    import torch.nn.functional as F
    from peer_timing import measure, spin_cycles_per_ms

    shape = TINY if args.tiny else FULL
    arrays = weights(shape)
    device = nbx.as_device("cuda")
    sync = lambda: torch.cuda.synchronize()  # noqa: E731
    layer = NbxLayer(shape, arrays, device)
    s = shape
    q_heads, kv, e, n = s["heads"], s["kv_heads"], s["head_dim"], s["context"]
    tw = {k: torch.from_numpy(v).cuda().to(torch.bfloat16) for k, v in arrays.items() if k not in ("cos", "sin")}
    cos, sin = (torch.from_numpy(arrays[k]).cuda() for k in ("cos", "sin"))
    k_cache, v_cache = tw["k"].clone(), tw["v"].clone()       # dense (context, Hk, E)
    pos = torch.tensor([n - 1], device="cuda")

    def rope(t):
        c, si = cos[pos].to(t.dtype)[:, None], sin[pos].to(t.dtype)[:, None]
        half = t.shape[-1] // 2
        rotated = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
        return t * c + rotated * si

    def layer_torch(x):
        h = F.rms_norm(x, (s["hidden"],), tw["w_in"], EPS)
        qkv = F.linear(h, tw["w_qkv"])
        q = qkv[:, :q_heads * e].view(1, q_heads, e)
        k = qkv[:, q_heads * e:(q_heads + kv) * e].view(1, kv, e)
        v = qkv[:, (q_heads + kv) * e:].view(1, kv, e)
        q, k = rope(q), rope(k)
        k_cache.index_copy_(0, pos, k)
        v_cache.index_copy_(0, pos, v)
        attn = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k_cache.transpose(0, 1)[None],
                                              v_cache.transpose(0, 1)[None], enable_gqa=True)
        x2 = x + F.linear(attn.reshape(1, q_heads * e), tw["w_o"])
        m = F.rms_norm(x2, (s["hidden"],), tw["w_post"], EPS)
        return x2 + F.linear(F.silu(F.linear(m, tw["w_gate"])) * F.linear(m, tw["w_up"]), tw["w_down"])

    x_t = tw["x"]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            layer_torch(x_t)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer_torch(x_t)

    step = nbx.graph.capture(layer, layer.x)
    cycles = spin_cycles_per_ms()
    print(f"decoder layer: hidden {s['hidden']}, {q_heads} q heads / {kv} kv heads of {e}, MLP {s['mlp']}, "
          f"context {n}, batch 1, bfloat16; x {tuple(layer.x.shape)}, out {tuple(layer(layer.x).shape)}")
    rows = {
        "torch eager": (lambda: layer_torch(x_t)),
        "torch CUDA graph": graph.replay,
        "nbx eager": (lambda: layer(layer.x)),
        "nbx captured (step.replay)": step.replay,
    }
    results = {}
    print(f"{'':28s} {'wall+sync us':>13s} {'gpu us':>9s} {'host us':>9s}")
    for name, fn in rows.items():
        wall = time_us(fn, sync, 200)
        gpu, host, _ = measure(lambda i, fn=fn: fn(), 1, cycles)
        results[name] = (wall, gpu)
        print(f"{name:28s} {wall:13.1f} {gpu:9.1f} {host:9.1f}")
    kernels, launches = kernels_us(layer, torch)
    print(f"{'nbx kernels (sum, ' + str(launches) + ' launches)':28s} {'':13s} {kernels:9.1f}")
    cap_wall, cap_gpu = results["nbx captured (step.replay)"]
    print(f"captured gpu / kernels: {cap_gpu / kernels:.2f} (goal <= 1.10); torch graph wall+sync / captured: "
          f"{results['torch CUDA graph'][0] / cap_wall:.2f} (goal >= 1.00); nbx eager vs torch eager: "
          f"{results['torch eager'][0] / results['nbx eager'][0]:.2f}x")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="small shapes (the smoke test's)")
    parser.add_argument("--device", default="cuda", help="cuda (with torch as the peer), or interp / cpu (nbx alone)")
    args = parser.parse_args(argv)
    return smoke(args) if args.device != "cuda" else gpu_run(args)


if __name__ == "__main__":
    sys.exit(main())
