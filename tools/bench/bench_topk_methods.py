"""top-k's two methods (the radix select, the chunk candidates of each chunk size and bound) against
torch.topk on vocabulary rows: an A/B of the `select` tunable's method, forced by setting= as the
certifier forces a candidate, beside what nbx.topk serves now.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_topk_methods.py

Each line: GPU us a call back to back (peer_timing.measure, the best of 3) and cold (the certifier's
method) for nbx at one setting and for torch; ratio = torch / nbx back to back (above 1: nbx faster).
Each nbx result is checked against torch's indices first (a wrong method prints WRONG, not a time).
"""
from __future__ import annotations

import numpy as np
import torch

import nbx.core as nbx
from nbx.kernels import launch
from nbx.kernels.sort.topk import select_rows, select_setting, takes_chunks
from peer_timing import banner, cold, measure

SHAPES = ((64, 151936), (1, 151936))
KS = (50, 1024)
CHUNKS = (2048, 4096, 8192)


def settings(device, shape, dtype, k):
    """(name, setting or None: served) for each method this k can take."""
    base = {**launch.tiles("select", device), **select_setting(device, shape[0], shape[1], dtype, k)}
    out = [("served", None), ("radix", {**base, "method": "radix"})]
    for chunk in CHUNKS:
        for bound in ("chunk", "row"):
            for warps in (4, 8):
                s = {**base, "method": "chunks", "chunk": chunk, "bound": bound, "num_warps": warps}
                if takes_chunks(s, k) and chunk // (32 * warps) <= 32:   # the tunable's words_fit
                    out.append((f"chunks {chunk} {bound} w{warps}", s))
    return out


def main() -> int:
    cycles = banner()
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"{'case':<30} {'nbx setting':<22} {'nbx us':>9} {'cold':>9} {'torch us':>9} {'cold':>9} {'ratio':>6}")
    for shape in SHAPES:
        for torch_dtype in (torch.float32, torch.bfloat16):
            logits = torch.randn(shape, device="cuda", generator=gen).to(torch_dtype)
            x = nbx.from_dlpack(logits)
            for k in KS:
                case = f"{list(shape)} {str(torch_dtype)[6:]} k={k}"
                peer = lambda i: torch.topk(logits, k)   # noqa: E731
                theirs, their_cold = measure(peer, 1, cycles)[0], cold(peer)
                reference = torch.topk(logits, k)
                expected = reference.indices.cpu().numpy(), reference.values.float().cpu().numpy()
                for name, s in settings(x.device, shape, x.dtype, k):
                    if s is None:
                        ours = lambda i: nbx.topk(x, k)   # noqa: E731
                    else:
                        ours = lambda i, s=s: select_rows(x, k, True, setting=s)   # noqa: E731
                    values, indices = ours(0)
                    # equal values may sit in another order in torch's answer: the values decide then
                    if not (np.array_equal(indices.numpy(), expected[0])
                            or np.array_equal(values.numpy().astype(np.float32), expected[1])):
                        print(f"{case:<30} {name:<22} WRONG", flush=True)
                        continue
                    us, cold_us = measure(ours, 1, cycles)[0], cold(ours)
                    print(f"{case:<30} {name:<22} {us:9.1f} {cold_us:9.1f} {theirs:9.1f} {their_cold:9.1f} "
                          f"{theirs / us:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
