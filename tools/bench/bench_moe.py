"""Mixture-of-experts layers: nbx.moe_experts (one plan: alignment, grouped SwiGLU gate/up, grouped
down with the routed weight, combine) against the same layer as Hugging Face writes it in torch (a
loop over the experts that got tokens), on the same GPU in one process (torch is the peer; nbx
never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_moe.py \
        [--quick] [--int4] [--fp8]
        [--tokens 1 8 64]

Layers (bfloat16, weights [E, I, H] / [E, H, I], softmax routing, top-k renormalized):
- qwen3-30b-a3b: 128 experts, top-8, hidden 2048, expert intermediate 768
- mixtral-8x7b: 8 experts, top-2, hidden 4096, intermediate 14336
at prefill 512 and 4096 tokens and decode 1, 8 and 64 tokens (the band is 16 tokens or fewer).

Printed per case: kernel us of the layer, nbx and torch (back to back, peer_timing.measure), ratio =
torch / nbx, wall us of one call each (call_ms); the expert GEMMs alone (the plan's gate/up and down
launches rerun over one call's tables, nbx.kernels.moe.staged_runs): their us, TFLOP/s over the
pairs' useful flops (6 * pairs * H * I) and % of the H200's dense bf16 peak (989 TFLOP/s, the spec
sheet); GB/s over the bytes of the selected experts' weights in the layer's time and % of HBM
(4.8 TB/s, the spec sheet); the routed layer (nbx.moe_routed_experts: routing, alignment and the
layer in one plan, from the router's logits) against torch's softmax, top-k and renormalization
then the loop: kernel us of both, ratio, % of HBM over the selected experts' weights in its time
(the decode goal), its launches (4 in the band of 16 tokens or fewer, where one launch routes and
aligns; 6 past it) and its routing + alignment launches rerun alone (nbx.kernels.moe.
routed_staged_runs) as a share of it; the larger deviation from torch's result of the two layers;
in the band (16 tokens or fewer) the vendor's ceiling for the same bytes: the selected experts'
weights laid out as two dense matrices ([hit * 2I, H] and [H, hit * I]) and read by two cuBLAS
products of the tokens' rows, their kernel us and % of HBM (what two launches streaming exactly
those bytes reach on this GPU).
Run after certifying the keys (tools/gpu_certify.sh with certificates/keys/nvidia-h200-140gb-moe.json),
or with NBX_AUTOTUNE_NO_SWEEP=1 for the device file's tiles; it takes about a minute.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import nbx.core as nbx
from nbx.kernels.cost import price
from nbx.kernels.moe import routed_staged_runs, staged_runs
from peer_timing import allocator_name, both, call_ms, deviation, measure, spin_cycles_per_ms

PEAK_TFLOPS = 989.0     # H200 SXM dense bf16, spec sheet
PEAK_GBS = 4800.0       # H200 HBM3e, spec sheet
LAYERS = {"qwen3-30b-a3b": (128, 8, 2048, 768), "mixtral-8x7b": (8, 2, 4096, 14336)}
TOKENS = (512, 4096, 1, 8, 64)


def hf_experts(x, weights, experts, wg, wu, wd):
    """The experts' loop as transformers' Qwen3-MoE / Mixtral blocks write it."""
    out = torch.zeros_like(x)
    mask = torch.nn.functional.one_hot(experts.long(), num_classes=wg.shape[0]).permute(2, 1, 0)
    for e in torch.nonzero(mask.sum(dim=(-1, -2)) > 0)[:, 0].tolist():
        slot, token = torch.where(mask[e])
        cur = x[token]
        h = torch.nn.functional.silu(cur @ wg[e].T) * (cur @ wu[e].T)
        out.index_add_(0, token, ((h @ wd[e].T) * weights[token, slot, None]).to(x.dtype))
    return out


def hf_routed(x, logits, wg, wu, wd, k):
    """Routing as transformers' Qwen3-MoE / Mixtral blocks write it (softmax in float32, top-k,
    renormalized), then the experts' loop."""
    weights, experts = torch.topk(torch.softmax(logits, dim=1, dtype=torch.float), k, dim=-1)
    return hf_experts(x, weights / weights.sum(dim=-1, keepdim=True), experts, wg, wu, wd)


def layer(count, k, hidden, inter, tokens):
    gen = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16
    x = torch.randn((tokens, hidden), device="cuda", dtype=bf, generator=gen)
    wg = torch.randn((count, inter, hidden), device="cuda", dtype=bf, generator=gen) / hidden ** 0.5
    wu = torch.randn((count, inter, hidden), device="cuda", dtype=bf, generator=gen) / hidden ** 0.5
    wd = torch.randn((count, hidden, inter), device="cuda", dtype=bf, generator=gen) / inter ** 0.5
    logits = torch.randn((tokens, count), device="cuda", dtype=torch.float32, generator=gen)
    route = nbx.moe_route(nbx.from_dlpack(logits), k)
    weights, experts = torch.from_dlpack(route.weights), torch.from_dlpack(route.experts)
    return (x, weights, experts, wg, wu, wd), logits


HEADER = (f"{'layer':<14} {'tokens':>6} {'nbx us':>9} {'torch us':>9} {'ratio':>6} {'wall us nbx/torch':>18} "
          f"{'gemm us':>9} {'TF/s':>6} {'%peak':>6} {'GB/s':>6} {'%HBM':>5} {'routed nbx/torch us':>20} {'ratio':>6} "
          f"{'%HBM':>5} {'launches':>8} {'route+align':>11} {'deviation':>9} {'cuBLAS same bytes us':>20} {'%HBM':>5}")


def dense_ceiling(x, experts, wg, wu, wd, cycles):
    """Kernel us of two cuBLAS products reading exactly the selected experts' weights (gate and up
    stacked, then down), from the tokens' rows: the bandwidth a vendor GEMV reaches on those bytes."""
    hit = torch.unique(experts)
    stacked = torch.cat([wg[hit], wu[hit]], dim=1).reshape(-1, wg.shape[2]).contiguous()
    down = wd[hit].permute(1, 0, 2).reshape(wd.shape[1], -1).contiguous()
    h = torch.randn((x.shape[0], down.shape[1]), device="cuda", dtype=x.dtype) / down.shape[1] ** 0.5
    run = lambda i: (x @ stacked.T, h @ down.T)   # noqa: E731
    return measure(run, 1, cycles)[0]


def case(name, count, k, hidden, inter, tokens, cycles):
    try:
        torch_args, logits = layer(count, k, hidden, inter, tokens)
        ours = [nbx.from_dlpack(t) for t in torch_args]
        nbx_fn = lambda i: nbx.moe_experts(*ours)            # noqa: E731
        torch_fn = lambda i: hf_experts(*torch_args)          # noqa: E731
        dev = deviation(nbx_fn(0), torch_fn(0))
        mine, peer = both(nbx_fn, torch_fn, 1, cycles)
        wall = [call_ms(lambda fn=fn: fn(0), 10) * 1e3 for fn in (nbx_fn, torch_fn)]
        stages = staged_runs(*ours)
        gemm_us = measure(lambda i: stages["gemms"](), 1, cycles)[0]
        view = nbx.from_dlpack(logits)
        x, _, _, wg, wu, wd = ours
        routed_fn = lambda i: nbx.moe_routed_experts(x, view, wg, wu, wd, k)                       # noqa: E731
        torch_routed_fn = lambda i: hf_routed(torch_args[0], logits, *torch_args[3:], k)          # noqa: E731
        dev = max(dev, deviation(routed_fn(0), torch_routed_fn(0)))
        routed, routed_peer = both(routed_fn, torch_routed_fn, 1, cycles)
        routed_stages = routed_staged_runs(x, view, wg, wu, wd, k)
        route_align_us = measure(lambda i: routed_stages["alignment"](), 1, cycles)[0]
        launches = price("moe_routed_experts", x, view, wg, wu, wd, k).launches
    except Exception as exc:  # report and go on: one failing case must not hide the rest
        print(f"{name:<14} {tokens:>6} FAILED: {type(exc).__name__}: {exc}", flush=True)
        return
    ceiling = (dense_ceiling(torch_args[0], torch_args[2], *torch_args[3:], cycles) if tokens <= 16 else None)
    pairs = tokens * k
    hit = int(torch.unique(torch_args[2]).numel())
    flops = 6 * pairs * hidden * inter
    weight_bytes = hit * 3 * hidden * inter * 2
    tflops, gbs = flops / gemm_us / 1e6, weight_bytes / mine.gpu_us / 1e3
    routed_gbs = weight_bytes / routed.gpu_us / 1e3
    share = 100 * route_align_us / routed.gpu_us
    print(f"{name:<14} {tokens:>6} {mine.gpu_us:9.1f} {peer.gpu_us:9.1f} {peer.gpu_us / mine.gpu_us:6.2f} "
          f"{wall[0]:8.1f}/{wall[1]:<9.1f} {gemm_us:9.1f} {tflops:6.1f} {100 * tflops / PEAK_TFLOPS:5.1f}% "
          f"{gbs:6.0f} {100 * gbs / PEAK_GBS:4.0f}% {routed.gpu_us:9.1f}/{routed_peer.gpu_us:<10.1f} "
          f"{routed_peer.gpu_us / routed.gpu_us:6.2f} {100 * routed_gbs / PEAK_GBS:4.0f}% {launches:>8} "
          f"{share:10.1f}% {dev:9.2e} "
          + (f"{ceiling:20.1f} {100 * weight_bytes / ceiling / 1e3 / PEAK_GBS:4.0f}%" if ceiling else f"{'-':>20} {'-':>5}")
          + f"{' (host-bound)' if mine.host_bound or routed.host_bound else ''}", flush=True)


def _int4(w):
    from nbx.core.quant import QuantizedTensor
    return QuantizedTensor.quantize(w.float().cpu().numpy(), 128, "asymmetric", "bfloat16").to("cuda")


def _fp8(w):
    from nbx.core import Float8BlockWeight
    return Float8BlockWeight.quantize(nbx.asarray(w.float().cpu().numpy()), (128, 128)).to("cuda")


QUANTIZED = {"int4 g128": _int4, "fp8 b128": _fp8}


def quantized_case(label, count, k, hidden, inter, tokens, cycles):
    """W4A16 (group 128, asymmetric) or block-scaled float8 (128 x 128, e4m3, W8A16) expert weights:
    GB/s over the selected experts' bytes (scales and minima included), against the bf16 torch
    loop over the same (dequantized) values."""
    torch_args, _ = layer(count, k, hidden, inter, tokens)
    quantized = [QUANTIZED[label](w) for w in torch_args[3:]]
    dense = [torch.from_dlpack(q.dequantize("bfloat16")) for q in quantized]
    ours = [nbx.from_dlpack(t) for t in torch_args[:3]] + quantized
    nbx_fn = lambda i: nbx.moe_experts(*ours)                    # noqa: E731
    torch_fn = lambda i: hf_experts(*torch_args[:3], *dense)     # noqa: E731
    dev = deviation(nbx_fn(0), torch_fn(0))
    mine, peer = both(nbx_fn, torch_fn, 1, cycles)
    hit = int(torch.unique(torch_args[2]).numel())
    weight_bytes = hit * sum(q.nbytes for q in quantized) // count
    gbs = weight_bytes / mine.gpu_us / 1e3
    print(f"{label:<14} {tokens:>6} {mine.gpu_us:9.1f} {peer.gpu_us:9.1f} {peer.gpu_us / mine.gpu_us:6.2f} "
          f"{'':>18} {'':>9} {'':>6} {'':>6} {gbs:6.0f} {100 * gbs / PEAK_GBS:4.0f}% {'':>11} {dev:9.2e}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="512 tokens and one decode token only")
    parser.add_argument("--int4", action="store_true", help="also Qwen3-30B-A3B's layer with int4 weights at "
                        "1, 8 and 512 tokens (quantizing on the host adds about a minute)")
    parser.add_argument("--fp8", action="store_true", help="also Qwen3-30B-A3B's layer with block-scaled float8 "
                        "weights (128 x 128 blocks) at 1, 8 and 512 tokens")
    parser.add_argument("--tokens", type=int, nargs="+", help=f"these token counts only (default {TOKENS})")
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    print(HEADER)
    for name, (count, k, hidden, inter) in LAYERS.items():
        for tokens in args.tokens or ((512, 1) if args.quick else TOKENS):
            case(name, count, k, hidden, inter, tokens, cycles)
            torch.cuda.empty_cache()
    for label in [name for name, asked in (("int4 g128", args.int4), ("fp8 b128", args.fp8)) if asked]:
        for tokens in (1, 8, 512):
            try:
                quantized_case(label, *LAYERS["qwen3-30b-a3b"], tokens, cycles)
            except Exception as exc:  # report and go on
                print(f"{label:<14} {tokens:>6} FAILED: {type(exc).__name__}: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
