"""Mixture-of-experts layers: nbx.moe_experts (one plan: alignment, grouped SwiGLU gate/up, grouped
down with the routed weight, combine) against the same layer as Hugging Face writes it in torch (a
loop over the experts that got tokens), on the same GPU in one process (torch is the peer; nbx
never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_moe.py [--quick] [--int4]

Layers (bfloat16, weights [E, I, H] / [E, H, I], softmax routing, top-k renormalized):
- qwen3-30b-a3b: 128 experts, top-8, hidden 2048, expert intermediate 768
- mixtral-8x7b: 8 experts, top-2, hidden 4096, intermediate 14336
at prefill 512 and 4096 tokens and decode 1, 8 and 64 tokens (the band is 16 tokens or fewer).

Printed per case: kernel us of the layer, nbx and torch (back to back, peer_timing.measure), ratio =
torch / nbx, wall us of one call each (call_ms); the expert GEMMs alone (the plan's gate/up and down
launches rerun over one call's tables, nbx.kernels.moe.staged_runs): their us, TFLOP/s over the
pairs' useful flops (6 * pairs * H * I) and % of the H200's dense bf16 peak (989 TFLOP/s, the spec
sheet); GB/s over the bytes of the selected experts' weights in the layer's time and % of HBM
(4.8 TB/s, the spec sheet: the decode goal); routing + alignment (moe_route over the logits, then
the plan's alignment launches) as a share of routing + the layer; the deviation from torch's result.
Run after certifying the keys (tools/gpu_certify.sh with certificates/keys/nvidia-h200-140gb-moe.json),
or with NBX_AUTOTUNE_NO_SWEEP=1 for the device file's tiles; it takes about a minute.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import nbx.core as nbx
from nbx.kernels.moe import staged_runs
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
          f"{'gemm us':>9} {'TF/s':>6} {'%peak':>6} {'GB/s':>6} {'%HBM':>5} {'route+align':>11} {'deviation':>9}")


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
        route_align_us = measure(lambda i: (nbx.moe_route(view, k), stages["alignment"]()), 1, cycles)[0]
        route_us = measure(lambda i: nbx.moe_route(view, k), 1, cycles)[0]
    except Exception as exc:  # report and go on: one failing case must not hide the rest
        print(f"{name:<14} {tokens:>6} FAILED: {type(exc).__name__}: {exc}", flush=True)
        return
    pairs = tokens * k
    hit = int(torch.unique(torch_args[2]).numel())
    flops = 6 * pairs * hidden * inter
    weight_bytes = hit * 3 * hidden * inter * 2
    tflops, gbs = flops / gemm_us / 1e6, weight_bytes / mine.gpu_us / 1e3
    share = 100 * route_align_us / (route_us + mine.gpu_us)
    print(f"{name:<14} {tokens:>6} {mine.gpu_us:9.1f} {peer.gpu_us:9.1f} {peer.gpu_us / mine.gpu_us:6.2f} "
          f"{wall[0]:8.1f}/{wall[1]:<9.1f} {gemm_us:9.1f} {tflops:6.1f} {100 * tflops / PEAK_TFLOPS:5.1f}% "
          f"{gbs:6.0f} {100 * gbs / PEAK_GBS:4.0f}% {share:10.1f}% {dev:9.2e}"
          f"{' (host-bound)' if mine.host_bound else ''}", flush=True)


def int4_case(count, k, hidden, inter, tokens, cycles):
    """W4A16 (group 128, asymmetric) expert weights: GB/s over the selected experts' int4 bytes
    (scales and minima included), against the bf16 torch loop over the same (dequantized) values."""
    from nbx.core.quant import QuantizedTensor
    torch_args, _ = layer(count, k, hidden, inter, tokens)
    quantized = [QuantizedTensor.quantize(w.float().cpu().numpy(), 128, "asymmetric", "bfloat16").to("cuda")
                 for w in torch_args[3:]]
    dense = [torch.from_dlpack(q.dequantize("bfloat16")) for q in quantized]
    ours = [nbx.from_dlpack(t) for t in torch_args[:3]] + quantized
    nbx_fn = lambda i: nbx.moe_experts(*ours)                    # noqa: E731
    torch_fn = lambda i: hf_experts(*torch_args[:3], *dense)     # noqa: E731
    dev = deviation(nbx_fn(0), torch_fn(0))
    mine, peer = both(nbx_fn, torch_fn, 1, cycles)
    hit = int(torch.unique(torch_args[2]).numel())
    weight_bytes = hit * sum(q.nbytes for q in quantized) // count
    gbs = weight_bytes / mine.gpu_us / 1e3
    print(f"{'int4 g128':<14} {tokens:>6} {mine.gpu_us:9.1f} {peer.gpu_us:9.1f} {peer.gpu_us / mine.gpu_us:6.2f} "
          f"{'':>18} {'':>9} {'':>6} {'':>6} {gbs:6.0f} {100 * gbs / PEAK_GBS:4.0f}% {'':>11} {dev:9.2e}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="512 tokens and one decode token only")
    parser.add_argument("--int4", action="store_true", help="also Qwen3-30B-A3B's layer with int4 weights at "
                        "1, 8 and 512 tokens (quantizing on the host adds about a minute)")
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    print(HEADER)
    for name, (count, k, hidden, inter) in LAYERS.items():
        for tokens in ((512, 1) if args.quick else TOKENS):
            case(name, count, k, hidden, inter, tokens, cycles)
            torch.cuda.empty_cache()
    if args.int4:
        for tokens in (1, 8, 512):
            try:
                int4_case(*LAYERS["qwen3-30b-a3b"], tokens, cycles)
            except Exception as exc:  # report and go on
                print(f"{'int4 g128':<14} {tokens:>6} FAILED: {type(exc).__name__}: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
