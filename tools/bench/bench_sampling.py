"""The decoding step (nbx.sample) against the same step in torch, on the same GPU, in one process
(torch is the peer here; nbx itself never imports it), and the nbx step's launches one by one.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_sampling.py

Timing as bench_datamove.py (peer_timing.measure: GPU us a call back to back behind a spin, host
us a call). ratio = torch us / nbx us (above 1: nbx faster). torch's step: softmax of logits / T,
then per filter torch.topk (top-k), torch.sort + torch.cumsum (top-p), the min-p mask, and
torch.multinomial. The logits: randn * 3 in bfloat16 (torch's generator, seed 0); then flat ones,
randn * 0.3 at T=1 p=0.9, whose top-p band of near-equal weights passes the copies' cap (the fine
steps' path of sampling/kernel.py's resolve). The breakdown
lists each launch of the [64, 151936] top-p plan alone (the median of single calls between two
events, so a launch's fixed cost shows), the uniforms' draw excluded.
"""
from __future__ import annotations

import sys

import nbx.core as nbx
import numpy as np
import torch
from peer_timing import banner, call_ms, measure

VOCAB = 151936


def torch_step(logits, temperature, top_k=None, top_p=None, min_p=None):
    probs = torch.softmax(logits.float() / temperature, -1)
    if top_k is not None:
        kth = torch.topk(probs, top_k, dim=-1).values[:, -1:]
        probs = torch.where(probs >= kth, probs, 0)
    if top_p is not None:
        ordered, order = torch.sort(probs, descending=True)
        mass = torch.cumsum(ordered, -1)
        ordered[(mass - ordered) > top_p] = 0
        return order.gather(-1, torch.multinomial(ordered, 1))
    if min_p is not None:
        probs = torch.where(probs >= min_p * probs.amax(-1, keepdim=True), probs, 0)
    return torch.multinomial(probs, 1)


CASES = (("T=0.7 p=0.9", dict(temperature=0.7, top_p=0.9)),
         ("T=1 k=50 p=0.9", dict(temperature=1.0, top_k=50, top_p=0.9)),
         ("T=1 min_p=0.05", dict(temperature=1.0, min_p=0.05)),
         ("T=1", dict(temperature=1.0)))


def breakdown(logits, options) -> None:
    """Each launch of the nbx plan alone, us (single calls between events)."""
    from nbx.core.ops.sampling import floor_weight
    from nbx.kernels import plans
    from nbx.kernels.sampling import sample_plan
    rows, vocab = logits.shape
    p = options.get("top_p", 1.0)
    plan = sample_plan(rows, vocab, logits.dtype, False, p < 1.0, False, logits.device)
    u = nbx.rand(rows, generator=nbx.Generator(seed=0), device=logits.device)
    values = plans.execute(plan, {"x": logits, "u": u, "inv_t": float(np.float32(1 / options["temperature"])),
                                  "k": vocab, "p": float(np.float32(p)), "floor": floor_weight(0.0)})
    total = 0.0
    for one in plan.launches:
        alone = plans.prepared(plans.LaunchPlan(plan.device, (one,)))   # this launch over the call's buffers
        us = call_ms(lambda: alone(values), 51) * 1e3
        total += us
        print(f"  {one.kernel.fn.__name__:<22} grid {str(one.grid):<12} {us:8.1f} us", flush=True)
    print(f"  {'sum':<35} {total:8.1f} us", flush=True)


def main() -> int:
    cycles = banner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"{'case':<20} {'shape':<16} {'nbx us':>9} {'torch us':>9} {'ratio':>6} {'host us nbx/torch':>18}",
          flush=True)
    for rows in (1, 64):
        logits = torch.randn((rows, VOCAB), device="cuda", dtype=torch.bfloat16, generator=gen) * 3
        view = nbx.from_dlpack(logits)
        g = nbx.Generator(seed=0)
        for name, options in CASES:
            ours = measure(lambda i: nbx.sample(view, generator=g, **options), 1, cycles)
            peer = measure(lambda i: torch_step(logits, **options), 1, cycles)
            print(f"{name:<20} {str([rows, VOCAB]):<16} {ours[0]:9.1f} {peer[0]:9.1f} {peer[0] / ours[0]:6.2f} "
                  f"{ours[1]:8.1f}/{peer[1]:<8.1f}", flush=True)
        flat = torch.randn((rows, VOCAB), device="cuda", dtype=torch.bfloat16, generator=gen) * 0.3
        options = dict(temperature=1.0, top_p=0.9)
        ours = measure(lambda i: nbx.sample(nbx.from_dlpack(flat), generator=g, **options), 1, cycles)
        peer = measure(lambda i: torch_step(flat, **options), 1, cycles)
        print(f"{'flat T=1 p=0.9':<20} {str([rows, VOCAB]):<16} {ours[0]:9.1f} {peer[0]:9.1f} {peer[0] / ours[0]:6.2f} "
              f"{ours[1]:8.1f}/{peer[1]:<8.1f}", flush=True)
        if rows == 64:
            print(f"# launches of the {[rows, VOCAB]} bf16 T=0.7 p=0.9 plan:", flush=True)
            breakdown(view, CASES[0][1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
