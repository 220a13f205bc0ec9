"""attention: nbx's flash kernels against torch on the same GPU, in one process (torch is the peer
here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_attention.py

- prefill: bf16, head dim 128, 32 query heads against 32 (MHA) or 8 (GQA) KV heads, one sequence
  of 1k-16k tokens, causal and not, and head dims 64 and 256 at 4k; peer torch's
  scaled_dot_product_attention (enable_gqa for GQA), whose backend is printed (the kernel the
  profiler saw). TFLOP/s counts 4 L S D (halved when causal).
- decode: bf16, one query token a sequence, GQA 32/8, head dim 128, batch 1-64, contexts 1k-128k,
  from a contiguous cache and from a paged one (blocks of 16 and 64 tokens, the table shuffled);
  peer torch's SDPA over the contiguous cache (torch has no paged path: the same bytes contiguous
  are its best). TB/s effective: the bytes of K and V read over the time.
- rope: q [tokens, 32, 128] and k [tokens, 8, 128] bf16 rotated (HF's half-split layout) against
  torch's elementwise chain (HF's apply_rotary_pos_emb: gather cos/sin, q * cos + rotate_half(q) *
  sin), beside the copy ceiling of the same bytes (torch clone); and the fused rope + paged cache
  write against nbx's unfused pair (rope, then kv_cache_write).

Timing: peer_timing.both: kernel us = back-to-back calls behind a GPU spin (GPU time alone), cold
= one call after an L2 flush (the certifier's method); wall us = the median single call between two
events with its host overhead (peer_timing.call_ms). ratio = torch kernel time / nbx kernel time
(above 1: nbx faster). nbx's column says the path and setting it served (certified or the device
file's tile). The whole run takes about 90 s on the H200 (printed at the end).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import nbx.core as nbx
from attention_shapes import DECODE, DECODE_HEADS, PREFILL, ROPE_TOKENS
from peer_timing import allocator_name, both, call_ms, deviation, measure, spin_cycles_per_ms


def torch_backend(fn) -> str:
    """The name of the longest CUDA kernel fn launches (which SDPA backend torch took)."""
    try:
        return _longest_kernel(fn)
    except Exception as exc:  # the profiler's API moves between torch versions: say so, go on
        return f"? ({type(exc).__name__})"


def _longest_kernel(fn) -> str:
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not events:
        return "?"
    top = max(events, key=lambda e: e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total)
    name = top.key
    for tag in ("flash", "cudnn", "fmha", "efficient", "cutlass", "gemm", "softmax"):
        if tag in name.lower():
            return f"{tag}:{name[:38]}"
    return name[:44]


def nb(t):
    return nbx.from_dlpack(t)


def served(q, k, v, causal) -> str:
    """nbx's path and setting for scaled_dot_product_attention(q, k, v) (the plan's detail)."""
    try:
        from nbx.core.ops.attention import AttentionOptions
        from nbx.kernels.attention import dense_layout, launch_plan
        lay = dense_layout(q, k, v, None, None, False)[0]
        path, setting, splits = launch_plan(lay, AttentionOptions(1.0 / q.shape[-1] ** 0.5, causal)).detail
        tile = "x".join(str(setting[p]) for p in ("block_m", "block_n") if p in setting)
        extra = f" {setting['loads']}" if "loads" in setting else f" splits {splits}"
        extra += f" r{setting['max_registers']}" if setting.get("max_registers") else ""
        return f"{path} {tile or setting.get('block_n')} w{setting['num_warps']} s{setting['num_stages']}{extra}"
    except Exception as exc:
        return f"? ({type(exc).__name__})"


def wall_us(fn) -> float:
    """Median microseconds of one call, host overhead included."""
    return call_ms(lambda: fn(0), 10) * 1e3


def torch_sdpa(q, k, v, causal=False):
    """torch's SDPA, GQA through enable_gqa (torch >= 2.5) or, before it, K and V repeated per group."""
    if q.shape[1] == k.shape[1]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    except TypeError:
        group = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                              is_causal=causal)


def prefill(args, cycles):
    print("\n# prefill (bf16, one sequence; TFLOP/s = 4 L S D, halved when causal)")
    print(f"{'D':>4} {'Hq/Hk':>6} {'L=S':>6} {'causal':>6} {'nbx us':>9} {'torch us':>9} {'nbx TF/s':>9} {'torch TF/s':>10} "
          f"{'ratio':>6} {'deviation':>10} {'cold us nbx/torch':>19} {'wall us nbx/torch':>19}  torch backend | nbx")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for d, hq, hk, n, causal in PREFILL:
        try:
            q = torch.randn((1, hq, n, d), device="cuda", dtype=torch.bfloat16, generator=gen)
            k = torch.randn((1, hk, n, d), device="cuda", dtype=torch.bfloat16, generator=gen)
            v = torch.randn((1, hk, n, d), device="cuda", dtype=torch.bfloat16, generator=gen)
            nq, nk, nv = nb(q), nb(k), nb(v)
            gqa = hq != hk
            nbx_fn = lambda i: nbx.scaled_dot_product_attention(nq, nk, nv, is_causal=causal, enable_gqa=gqa)  # noqa
            torch_fn = lambda i: torch_sdpa(q, k, v, causal)  # noqa: E731
            dev = deviation(nbx_fn(0), torch_fn(0))
            backend = torch_backend(lambda: torch_fn(0))
            ours, peer = both(nbx_fn, torch_fn, 1, cycles)
            walls = [wall_us(fn) for fn in (nbx_fn, torch_fn)]
            setting = served(nq, nk, nv, causal)
        except Exception as exc:  # one failing case must not hide the rest
            print(f"{d:>4} {hq}/{hk:<3} {n:>6} {causal!s:>6} FAILED: {type(exc).__name__}: {exc}")
            continue
        flops = 4 * hq * n * n * d / (2 if causal else 1)
        print(f"{d:>4} {hq:>3}/{hk:<2} {n:>6} {causal!s:>6} {ours.gpu_us:9.1f} {peer.gpu_us:9.1f} "
              f"{flops / ours.gpu_us / 1e6:9.1f} {flops / peer.gpu_us / 1e6:10.1f} {peer.gpu_us / ours.gpu_us:6.2f} "
              f"{dev:10.2e} {ours.cold_us:9.1f}/{peer.cold_us:<9.1f} {walls[0]:9.1f}/{walls[1]:<9.1f}  "
              f"{backend} | {setting}", flush=True)
        del q, k, v, nq, nk, nv


CANDIDATE_CASES = [(128, 32, 32, 4096, False), (128, 32, 8, 4096, True)]


def candidates(args, cycles):
    """Every setting the attention tunable keeps for a few head-dim-128 keys, timed against torch's SDPA
    in this run (what certification will choose from; one compile a candidate, ~15 a key)."""
    from nbx import autotune
    from nbx.core.ops.attention import AttentionOptions
    from nbx.kernels import launch
    from nbx.kernels.attention import dense_layout, launch_sdpa
    print("\n# prefill candidates (bf16; ratio = torch us / nbx us, the candidate's kernel time)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    tunable = autotune.lookup("attention")
    for d, hq, hk, n, causal in CANDIDATE_CASES:
        q = torch.randn((1, hq, n, d), device="cuda", dtype=torch.bfloat16, generator=gen)
        k, v = (torch.randn((1, hk, n, d), device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        nq, nk, nv = nb(q), nb(k), nb(v)
        options = AttentionOptions(1.0 / d ** 0.5, causal)
        lay = dense_layout(nq, nk, nv, None, None, False)[0]
        rep = {"q_len": n, "k_len": n, "head_dim": d, "v_dim": d, "group": hq // hk, "dtype": nq.dtype,
               "causal": causal, "tma": lay.tma}
        peer = measure(lambda i: torch_sdpa(q, k, v, causal), 1, cycles, repeats=2, min_iters=10)[0]
        print(f"  D {d} {hq}/{hk} L=S {n} causal {causal}: torch {peer:.1f} us "
              f"({4 * hq * n * n * d / (2 if causal else 1) / peer / 1e6:.0f} TF/s)", flush=True)
        for setting in tunable.candidates(launch.facts(nq.device), rep)[0]:
            label = " ".join(f"{p}={setting[p]}" for p in setting)
            try:
                fn = lambda i, s=setting: launch_sdpa(nq, nk, nv, None, None, options, setting=s)  # noqa: E731
                ours = measure(fn, 1, cycles, repeats=2, min_iters=10)[0]
            except Exception as exc:  # one failing candidate must not hide the rest
                print(f"    {label}: FAILED {type(exc).__name__}: {str(exc)[:120]}")
                continue
            print(f"    {label}: {ours:9.1f} us  ratio {peer / ours:5.2f}", flush=True)
        del q, k, v, nq, nk, nv


def paged_pair(k, v, block_tokens, gen):
    """k and v (B, Hk, S, D) as paged caches (blocks, block_tokens, Hk, D) with one shuffled table
    (B, S / block_tokens)."""
    b, hk, s, d = k.shape
    order = torch.randperm(b * s // block_tokens, device="cuda", generator=gen)
    caches = []
    for t in (k, v):
        cache = torch.empty((b * s // block_tokens, block_tokens, hk, d), device="cuda", dtype=t.dtype)
        cache[order] = t.permute(0, 2, 1, 3).reshape(-1, block_tokens, hk, d)
        caches.append(cache)
    return caches[0], caches[1], order.reshape(b, s // block_tokens).to(torch.int32)


def decode(args, cycles):
    print("\n# decode (bf16, 1 query token, GQA 32/8, D 128; TB/s = bytes of K and V read / time; "
          "'packed': q (batch, Hq, D) with cu_seqlens_q and max_q_len=1, as nbx.models' step)")
    print(f"{'batch':>5} {'context':>7} {'cache':>13} {'nbx us':>9} {'torch us':>9} {'nbx TB/s':>9} {'torch TB/s':>10} "
          f"{'ratio':>6} {'deviation':>10} {'cold us nbx/torch':>19} {'wall us nbx/torch':>19}  torch backend | nbx")
    gen = torch.Generator(device="cuda").manual_seed(1)
    hq, hk, d = DECODE_HEADS
    for batch, ctx in DECODE:
        q = torch.randn((batch, hq, 1, d), device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn((batch, hk, ctx, d), device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn((batch, hk, ctx, d), device="cuda", dtype=torch.bfloat16, generator=gen)
        kv_bytes = 2 * k.numel() * 2
        torch_fn = lambda i: torch_sdpa(q, k, v)  # noqa: E731
        backend = torch_backend(lambda: torch_fn(0))
        nq, nk, nv = nb(q), nb(k), nb(v)
        cases = [("contiguous", lambda i: nbx.scaled_dot_product_attention(nq, nk, nv, enable_gqa=True))]
        qp = nb(q.reshape(batch, hq, d).unsqueeze(1).contiguous())  # (batch, 1, Hq, D)
        lens = nb(torch.full((batch,), ctx, device="cuda", dtype=torch.int32))
        qpacked = nb(q.reshape(batch, hq, d).contiguous())  # (batch, Hq, D), one query a sequence
        cu = nb(torch.arange(batch + 1, device="cuda", dtype=torch.int32))
        for bt in (16, 64):
            kc, vc, table = paged_pair(k, v, bt, gen)
            nkc, nvc, ntab = nb(kc), nb(vc), nb(table)
            cases.append((f"paged {bt}", lambda i, a=nkc, b=nvc, t=ntab: nbx.paged_attention(
                qp, a, b, t, lens, max_seq_len=ctx)))
            if bt == 16:
                cases.append((f"paged {bt} pk", lambda i, a=nkc, b=nvc, t=ntab: nbx.paged_attention(
                    qpacked, a, b, t, lens, cu, max_seq_len=ctx, max_q_len=1).reshape(batch, 1, hq, d)))
        reference = torch_fn(0)
        for name, fn in cases:
            try:
                out = fn(0)
                dev = deviation(out, reference if name == "contiguous" else reference.transpose(1, 2))
                ours, peer = both(fn, torch_fn, 1, cycles)
                walls = [wall_us(f) for f in (fn, torch_fn)]
                setting = served(nq, nk, nv, False) if name == "contiguous" else ""
            except Exception as exc:
                print(f"{batch:>5} {ctx:>7} {name:>13} FAILED: {type(exc).__name__}: {exc}")
                continue
            print(f"{batch:>5} {ctx:>7} {name:>13} {ours.gpu_us:9.1f} {peer.gpu_us:9.1f} "
                  f"{kv_bytes / ours.gpu_us / 1e6:9.2f} {kv_bytes / peer.gpu_us / 1e6:10.2f} "
                  f"{peer.gpu_us / ours.gpu_us:6.2f} {dev:10.2e} {ours.cold_us:9.1f}/{peer.cold_us:<9.1f} "
                  f"{walls[0]:9.1f}/{walls[1]:<9.1f}  {backend} | {setting}", flush=True)
        del q, k, v, nk, nv, cases


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(args, cycles):
    print("\n# rope (bf16, q [T, 32, 128] and k [T, 8, 128]; GB/s = bytes read and written / time)")
    print(f"{'tokens':>6} {'case':<26} {'nbx us':>9} {'peer us':>9} {'nbx GB/s':>9} {'peer GB/s':>9} {'ratio':>6} "
          f"{'copy us':>8} {'nbx/copy':>8} {'wall us nbx/peer':>17}")
    config = {"head_dim": 128, "max_position_embeddings": 32768, "rope_theta": 500000.0}
    cos, sin = nbx.rope_tables(config, dtype=nbx.bfloat16, device="cuda")
    tcos, tsin = torch.from_dlpack(cos), torch.from_dlpack(sin)
    gen = torch.Generator(device="cuda").manual_seed(2)
    for tokens in ROPE_TOKENS:
        try:
            rope_case(tokens, cos, sin, tcos, tsin, gen, cycles)
        except Exception as exc:
            print(f"{tokens:>6} FAILED: {type(exc).__name__}: {exc}", flush=True)


def rope_case(tokens, cos, sin, tcos, tsin, gen, cycles):
    """One token count: rope of q and k against torch's chain and the copy ceiling; the fused write."""
    q = torch.randn((tokens, 32, 128), device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn((tokens, 8, 128), device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn((tokens, 8, 128), device="cuda", dtype=torch.bfloat16, generator=gen)
    pos = torch.randint(0, 32768, (tokens,), device="cuda", dtype=torch.int32, generator=gen)
    nq, nk, nv, npos = nb(q), nb(k), nb(v), nb(pos)

    def torch_pair(i):
        c, s = tcos[pos].unsqueeze(1), tsin[pos].unsqueeze(1)
        return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s

    def nbx_pair(i):
        return nbx.rotary_embedding(nq, cos, sin, npos), nbx.rotary_embedding(nk, cos, sin, npos)

    moved = 2 * (q.numel() + k.numel()) * 2
    dev = max(deviation(a, b) for a, b in zip(nbx_pair(0), torch_pair(0)))
    ours, peer = both(nbx_pair, torch_pair, 1, cycles)
    copy_us = measure(lambda i: (q.clone(), k.clone()), 1, cycles)[0]
    walls = [wall_us(fn) for fn in (nbx_pair, torch_pair)]
    print(f"{tokens:>6} {'rope q,k vs torch chain':<26} {ours.gpu_us:9.1f} {peer.gpu_us:9.1f} "
          f"{moved / ours.gpu_us / 1e3:9.0f} {moved / peer.gpu_us / 1e3:9.0f} {peer.gpu_us / ours.gpu_us:6.2f} "
          f"{copy_us:8.1f} {copy_us / ours.gpu_us:8.2f} {walls[0]:8.1f}/{walls[1]:<8.1f}  deviation {dev:.2e}",
          flush=True)
    bt = 16
    blocks = tokens // bt + 1
    kc = nbx.zeros((blocks, bt, 8, 128), dtype=nbx.bfloat16, device="cuda")
    vc = nbx.zeros((blocks, bt, 8, 128), dtype=nbx.bfloat16, device="cuda")
    slots = nb(torch.randperm(blocks * bt, device="cuda", generator=gen)[:tokens].to(torch.int32))

    def fused(i):
        nbx.rotary_kv_cache_write(nk, nv, cos, sin, npos, kc, vc, slots)

    def unfused(i):
        nbx.kv_cache_write(nbx.rotary_embedding(nk, cos, sin, npos), nv, kc, vc, slots)

    fused_t, unfused_t = both(fused, unfused, 1, cycles)
    walls = [wall_us(fn) for fn in (fused, unfused)]
    written = (3 * k.numel() + 2 * v.numel()) * 2
    print(f"{tokens:>6} {'fused rope+write vs pair':<26} {fused_t.gpu_us:9.1f} {unfused_t.gpu_us:9.1f} "
          f"{written / fused_t.gpu_us / 1e3:9.0f} {written / unfused_t.gpu_us / 1e3:9.0f} "
          f"{unfused_t.gpu_us / fused_t.gpu_us:6.2f} {'':8} {'':8} {walls[0]:8.1f}/{walls[1]:<8.1f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=["prefill", "decode", "rope"],
                        help="prefill, decode, rope, candidates (each prefill candidate of a few keys, timed)")
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    began = time.perf_counter()
    for part in args.only:
        {"prefill": prefill, "decode": decode, "rope": rope, "candidates": candidates}[part](args, cycles)
    print(f"\n# done in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
