"""Matrix products: nbx's Triton kernels against torch (cuBLAS) on the same GPU, in one process
(torch is the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_matmul.py \
        [--groups gemm decode int4 fp8 swiglu fp32 batched] [--quick]

Groups (M x N x K; "nt" = x @ W.T with W stored [out, in], a linear layer; "nn" = both row-major):
- gemm: bfloat16 prefill at Llama-3-8B (4096 -> 14336 -> 4096, fused gate+up 28672), Qwen2.5-7B /
  Llama-2 (11008) and Mixtral (14336) shapes at 2048-8192 rows, and 8192^3 (nn): nbx.linear / matmul.
- decode: M in {1, 2, 4, 8, 16} at N x K = 4096 x 4096 and 14336 x 4096 (bfloat16, nt): the weight's
  bytes over the kernel time (GB/s) are printed beside the ratio: the goal is >= 85 % of HBM.
- int4: W4A16 (grouped int4, group 128, asymmetric) at decode rows and at 2048 rows, against nbx's own
  bfloat16 product of the same shape (the goal: >= 3x at decode, >= 0.8x at prefill) and torch's bf16.
- fp8: float8 e4m3 with per-row scales, nbx.scaled_linear against torch._scaled_mm (rowwise) on the
  same data, and against nbx's own bfloat16 product of the shape (the goal at large M: >= 1.6x).
- swiglu: nbx.gated_linear (one pass over x) against torch's two matmuls + silu + mul.
- fp32: float32 4096^3 in IEEE (torch allow_tf32 off), and with input_precision="tf32" / "tf32x3"
  asked of nbx.linear against torch with allow_tf32 on (3xTF32 has no torch peer: the ratio shows
  its cost over TF32-speed cuBLAS).
- batched: bmm of 32 x 1024 x 1024 x 128 (attention-like, the tiled batched kernel).

Timing (peer_timing): kernel = CUDA events around back-to-back calls behind a GPU spin, each call
reading another copy of its operands (together past the L2); host = the host time a call took to
queue; wall = the median of single calls between two events with their host overhead; cold = one
call after an L2 flush (the certifier's method: compare with the certificate's best_ms).
ratio = torch kernel time / nbx kernel time (above 1: nbx faster). Run it after certifying the
keys it forms (tools/gpu_certify.sh record-bench certify bench): an uncertified key is swept at
its first call, which takes minutes. --quick keeps one shape a group (a smoke run).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import nbx.core as nbx
from peer_timing import allocator_name, both, call_ms, deviation, spin_cycles_per_ms

L2_FLUSH_BYTES = 256 << 20   # operand copies per case add up to at least this (the H200's L2 is 50 MB)
GEMM = [("llama3 qkv", 2048, 6144, 4096), ("llama3 up", 2048, 14336, 4096), ("llama3 gate+up", 4096, 28672, 4096),
        ("llama3 down", 4096, 4096, 14336), ("qwen/llama2 up", 4096, 11008, 4096),
        ("qwen/llama2 down", 4096, 4096, 11008), ("mixtral up", 8192, 14336, 4096)]
DECODE_ROWS = (1, 2, 4, 8, 16)
DECODE_SHAPES = ((4096, 4096), (14336, 4096))
INT4_SHAPES = [(1, 4096, 4096), (16, 14336, 4096), (2048, 4096, 4096)]   # (M, N, K), group 128 (tools/write_int4_keys.py)


def _copies(nbytes: int) -> int:
    return max(1, -(-L2_FLUSH_BYTES // max(nbytes, 1)))


def _gen():
    return torch.Generator(device="cuda").manual_seed(0)


def linear_case(m, n, k, tdt=torch.bfloat16, input_precision=None):
    """x @ W.T: nbx.linear against torch.nn.functional.linear over copies of x and W."""
    item = torch.finfo(tdt).bits // 8
    copies = _copies((m * k + n * k) * item)
    gen = _gen()
    pairs = [(torch.randn((m, k), device="cuda", dtype=tdt, generator=gen),
              torch.randn((n, k), device="cuda", dtype=tdt, generator=gen) / k ** 0.5) for _ in range(copies)]
    views = [(nbx.from_dlpack(a), nbx.from_dlpack(w)) for a, w in pairs]
    return (copies, (lambda i: nbx.linear(*views[i], input_precision=input_precision)),
            (lambda i: torch.nn.functional.linear(*pairs[i])))


def square_case(m, n, k, tdt=torch.bfloat16):
    item = torch.finfo(tdt).bits // 8
    copies = _copies((m * k + k * n) * item)
    gen = _gen()
    pairs = [(torch.randn((m, k), device="cuda", dtype=tdt, generator=gen),
              torch.randn((k, n), device="cuda", dtype=tdt, generator=gen)) for _ in range(copies)]
    views = [(nbx.from_dlpack(a), nbx.from_dlpack(b)) for a, b in pairs]
    return copies, (lambda i: nbx.matmul(*views[i])), (lambda i: torch.matmul(*pairs[i]))


def batched_case(b, m, n, k, tdt=torch.bfloat16):
    copies = _copies(b * (m * k + k * n) * 2)
    gen = _gen()
    pairs = [(torch.randn((b, m, k), device="cuda", dtype=tdt, generator=gen),
              torch.randn((b, k, n), device="cuda", dtype=tdt, generator=gen)) for _ in range(copies)]
    views = [(nbx.from_dlpack(a), nbx.from_dlpack(c)) for a, c in pairs]
    return copies, (lambda i: nbx.bmm(*views[i])), (lambda i: torch.bmm(*pairs[i]))


def swiglu_case(m, n, k):
    copies = _copies((m * k + 2 * n * k) * 2)
    gen = _gen()
    sets = [(torch.randn((m, k), device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.randn((n, k), device="cuda", dtype=torch.bfloat16, generator=gen) / k ** 0.5,
             torch.randn((n, k), device="cuda", dtype=torch.bfloat16, generator=gen) / k ** 0.5) for _ in range(copies)]
    views = [tuple(nbx.from_dlpack(t) for t in s) for s in sets]
    f = torch.nn.functional

    def peer(i):
        x, wg, wu = sets[i]
        return f.silu(f.linear(x, wg)) * f.linear(x, wu)
    return copies, (lambda i: nbx.gated_linear(*views[i])), peer


def int4_cases(m, n, k, group=128):
    """(copies, nbx int4, nbx bf16, torch bf16) over copies of the same weights (each past the L2)."""
    copies = _copies(m * k * 2 + n * k // 2)
    gen = _gen()
    xs = [torch.randn((m, k), device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(copies)]
    dense = torch.randn((n, k), device="cuda", dtype=torch.float32, generator=gen) / k ** 0.5
    on_host = nbx.QuantizedTensor.quantize(dense.cpu().numpy(), group, "asymmetric", "bfloat16")
    quantized = [on_host.to("cuda") for _ in range(copies)]
    w16 = [dense.to(torch.bfloat16) for _ in range(_copies(n * k * 2))]
    nx = [nbx.from_dlpack(x) for x in xs]
    nw16 = [nbx.from_dlpack(w) for w in w16]
    return (copies, (lambda i: nbx.linear(nx[i], quantized[i])), (lambda i: nbx.linear(nx[i], nw16[i % len(nw16)])),
            (lambda i: torch.nn.functional.linear(xs[i], w16[i % len(w16)])))


def fp8_cases(m, n, k):
    """(copies, nbx scaled_linear, nbx bf16 linear, torch._scaled_mm) with per-row scales, e4m3."""
    copies = _copies(m * k + n * k)
    gen = _gen()
    sets = []
    for _ in range(copies):
        x = torch.randn((m, k), device="cuda", generator=gen).to(torch.float8_e4m3fn)
        w = torch.randn((n, k), device="cuda", generator=gen).to(torch.float8_e4m3fn)
        sx = torch.rand((m, 1), device="cuda", generator=gen) + 0.5
        sw = torch.rand((1, n), device="cuda", generator=gen) + 0.5
        sets.append((x, w, sx, sw))
    views = [(nbx.from_dlpack(x), nbx.from_dlpack(w), nbx.from_dlpack(sx.reshape(-1)), nbx.from_dlpack(sw.reshape(-1)))
             for x, w, sx, sw in sets]
    b16 = [(x.to(torch.bfloat16), w.to(torch.bfloat16)) for x, w, _, _ in sets[:max(1, _copies((m * k + n * k) * 2))]]
    nb16 = [(nbx.from_dlpack(x), nbx.from_dlpack(w)) for x, w in b16]

    def peer(i):
        x, w, sx, sw = sets[i]
        return torch._scaled_mm(x, w.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)
    return (copies, (lambda i: nbx.scaled_linear(*views[i])), (lambda i: nbx.linear(*nb16[i % len(nb16)])), peer,
            (lambda i: torch.nn.functional.linear(*b16[i % len(b16)])))


HEADER = (f"{'case':<17} {'M x N x K':<18} {'dtype':<9} {'nbx us':>8} {'torch us':>9} {'nbx TF/s':>9} "
          f"{'torch TF/s':>10} {'ratio':>6} {'GB/s nbx':>9} {'wall us nbx/torch':>18} {'host us nbx/torch':>18} "
          f"{'cold us nbx/torch':>18} {'deviation':>9}")


def report(name, m, n, k, dtype, copies, nbx_fn, torch_fn, cycles, flops=None, weight_bytes=None):
    shape = f"{m}x{n}x{k}"
    try:
        dev = deviation(nbx_fn(0), torch_fn(0))
        ours, peer = both(nbx_fn, torch_fn, copies, cycles)
        wall = [call_ms(lambda fn=fn: fn(0), 20) * 1e3 for fn in (nbx_fn, torch_fn)]
    except Exception as exc:  # report and go on: one failing case must not hide the rest
        print(f"{name:<17} {shape:<18} {dtype:<9} FAILED: {type(exc).__name__}: {exc}", flush=True)
        return None
    flops = 2 * m * n * k if flops is None else flops
    gbs = f"{weight_bytes / ours.gpu_us / 1e3:9.0f}" if weight_bytes else f"{'':>9}"
    flag = " (host-bound)" if ours.host_bound or peer.host_bound else ""
    print(f"{name:<17} {shape:<18} {dtype:<9} {ours.gpu_us:8.1f} {peer.gpu_us:9.1f} {flops / ours.gpu_us / 1e6:9.1f} "
          f"{flops / peer.gpu_us / 1e6:10.1f} {peer.gpu_us / ours.gpu_us:6.2f} {gbs} "
          f"{wall[0]:8.1f}/{wall[1]:<9.1f} {ours.host_us:8.1f}/{peer.host_us:<9.1f} "
          f"{ours.cold_us:8.1f}/{peer.cold_us:<9.1f} {dev:9.2e}{flag}", flush=True)
    return ours


def main(argv=None) -> int:
    groups = ("gemm", "decode", "int4", "fp8", "swiglu", "fp32", "batched")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", nargs="*", default=list(groups), choices=groups)
    parser.add_argument("--quick", action="store_true", help="one shape a group")
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    print(f"# GPU spin: {cycles / 1e3:.0f} MHz effective")
    print(HEADER)
    torch.backends.cuda.matmul.allow_tf32 = False
    pick = (lambda cases: cases[:1]) if args.quick else (lambda cases: cases)
    if "gemm" in args.groups:
        for name, m, n, k in pick(GEMM):
            report(name, m, n, k, "bfloat16", *linear_case(m, n, k), cycles)
        report("square nn", 8192, 8192, 8192, "bfloat16", *square_case(8192, 8192, 8192), cycles)
    if "decode" in args.groups:
        for n, k in pick(DECODE_SHAPES):
            for m in pick(DECODE_ROWS):
                report(f"decode {m}", m, n, k, "bfloat16", *linear_case(m, n, k), cycles, weight_bytes=n * k * 2)
    if "int4" in args.groups:
        for m, n, k in pick(INT4_SHAPES):
            copies, ours4, ours16, peer = int4_cases(m, n, k)
            q_bytes = n * k // 2 + 2 * n * (k // 128) * 2
            t4 = report("int4 vs torch", m, n, k, "w4a16", copies, ours4, peer, cycles, weight_bytes=q_bytes)
            t16 = report("bf16 (nbx)", m, n, k, "bfloat16", copies, ours16, peer, cycles, weight_bytes=n * k * 2)
            if t4 and t16:
                print(f"{'':<17} int4 over nbx bf16: {t16.gpu_us / t4.gpu_us:.2f}x kernel time", flush=True)
    if "fp8" in args.groups:
        for m, n, k in pick([(4096, 4096, 4096), (4096, 14336, 4096), (16, 4096, 4096)]):
            copies, ours8, ours16, peer8, peer16 = fp8_cases(m, n, k)
            t8 = report("fp8 row/_scaled_mm", m, n, k, "e4m3", copies, ours8, peer8, cycles)
            t16 = report("bf16 (nbx/torch)", m, n, k, "bfloat16", copies, ours16, peer16, cycles)
            if t8 and t16:
                print(f"{'':<17} fp8 over nbx bf16: {t16.gpu_us / t8.gpu_us:.2f}x kernel time", flush=True)
    if "swiglu" in args.groups:
        for m in pick([1, 16, 2048]):
            report("swiglu up", m, 14336, 4096, "bfloat16", *swiglu_case(m, 14336, 4096), cycles,
                   flops=2 * 2 * m * 14336 * 4096)
    if "fp32" in args.groups:
        report("fp32 ieee", 4096, 4096, 4096, "float32", *square_case(4096, 4096, 4096, torch.float32), cycles)
        report("fp32 ieee x@W.T", 4096, 4096, 4096, "float32", *linear_case(4096, 4096, 4096, torch.float32), cycles)
        torch.backends.cuda.matmul.allow_tf32 = True
        for precision in ("tf32", "tf32x3"):
            report(f"fp32 {precision}", 4096, 4096, 4096, "float32",
                   *linear_case(4096, 4096, 4096, torch.float32, precision), cycles)
        torch.backends.cuda.matmul.allow_tf32 = False
    if "batched" in args.groups:
        report("bmm", 1024, 1024, 128, "bfloat16", *batched_case(32, 1024, 1024, 128), cycles,
               flops=2 * 32 * 1024 * 1024 * 128)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
