"""Where a decode token's time goes: every kernel of nbx's captured decode step, timed by CUPTI
(torch.profiler, the peer here, traces every context of the process: nbx's launches and graph
replays included), summed by kernel name per token, against the step's wall time.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/profile_decode.py
    ... profile_decode.py --shape 8b --layers 2    # Llama-3-8B's shape cut to 2 layers

Printed: per kernel name, its launches a token, its GPU time a token and the bytes it must read
where the weight it streams is known (HBM time at the copy bandwidth measured here); then the
token's wall time, the sum of its kernels' times and the rest (the gaps between kernels in the
replay and the host's share). nbx's choices do not depend on this tool; it tells which kernel or
which gap to work on next.
"""
from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from nbx import models
from nbx.kernels import dependent_launch
from nbx.models import decoder
from bench_models import copy_bandwidth, read_bytes_per_step, with_layers
from model_shapes import NAMES, config_of


def kernel_events(prof):
    """(name, microseconds) of every GPU kernel the profiler saw, in the order they started."""
    out = []
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time > 0:
            out.append((event.time_range.start, event.name, event.device_time))
    return [(name, us) for _, name, us in sorted(out)]


def step_sequence(events, first: str):
    """Each decode step's kernels by position (a step begins with `first`, the embedding's take),
    averaged over the steps of the most common length: [(name, mean us)]."""
    starts = [i for i, (name, _) in enumerate(events) if name == first]
    steps = [events[a:b] for a, b in zip(starts, starts[1:])]
    if not steps:
        return []
    length = collections.Counter(len(s) for s in steps).most_common(1)[0][0]
    steps = [s for s in steps if len(s) == length]
    return [(steps[0][i][0], sum(s[i][1] for s in steps) / len(steps)) for i in range(length)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=["1b", "8b", "qwen7b"], default="1b")
    parser.add_argument("--layers", type=int, default=0, help="cut the checkpoint to this many layers (0: all)")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--norm-rows", type=int, help="decoder.NORM_FUSED_ROWS for this run (the rows up to which "
                                                      "an RMS norm rides in its product's loads): compare the two")
    parser.add_argument("--plain-launches", action="store_true", help="launch every kernel plainly, not dependent "
                                                                       "(nbx.kernels.dependent_launch): compare the two")
    args = parser.parse_args()
    if args.plain_launches:
        dependent_launch.allowed = lambda device: False
    if args.norm_rows is not None:
        decoder.NORM_FUSED_ROWS = args.norm_rows
    bandwidth = copy_bandwidth()
    config = config_of(args.shape)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, config["vocab_size"], (args.prompt,), generator=gen).tolist()
    with tempfile.TemporaryDirectory(prefix="nbx-profile-", dir="/tmp") as tmp:
        (Path(tmp) / "full").mkdir()
        folder = models.write_checkpoint(Path(tmp) / "full", config, seed=0, dtype="bfloat16", shards=2, device="cuda")
        if args.layers:
            folder = with_layers(folder, args.layers, Path(tmp) / "cut")
            config = dict(config, num_hidden_layers=args.layers)
        model = models.load(folder, device="cuda")
        model.eos = ()
        model.generate(prompt, args.new)   # compiled, screened, the decode step captured
        started = []
        model.generate(prompt, args.new, on_token=lambda token: started.append(time.perf_counter()))
        wall_us = (started[-1] - started[0]) * 1e6 / (len(started) - 1)
        prof, tracing = profile(activities=[ProfilerActivity.CUDA]), []

        def start_at_the_first_token(token):   # the prompt's forward done (its token read back): decode only
            if not tracing:
                tracing.append(prof.start())
        model.generate(prompt, args.new, on_token=start_at_the_first_token)
        torch.cuda.synchronize()
        prof.stop()
    events = kernel_events(prof)
    sequence = step_sequence(events, "take_rows_kernel")
    per_name = collections.defaultdict(lambda: [0, 0.0])
    for name, us in events:
        per_name[name][0] += 1
        per_name[name][1] += us
    # traced from the first token on: the args.new - 1 decode steps alone (the last token's read included)
    steps = args.new - 1
    decode = per_name
    total = sum(t for c, t in decode.values()) / steps
    step_bytes = read_bytes_per_step(model, config, 1, args.prompt, args.new)
    print(f"{NAMES[args.shape]} shape, {config['num_hidden_layers']} layers, bf16, prompt {args.prompt}, "
          f"norms fused up to {decoder.NORM_FUSED_ROWS} rows, "
          f"{args.new} new; copy bandwidth {bandwidth / 1e12:.2f} TB/s; a step reads {step_bytes / 2**20:,.1f} MiB: "
          f"roofline {step_bytes / bandwidth * 1e6:.1f} us a token")
    print(f"{'kernel':<72} {'a token':>8} {'us/token':>9} {'us each':>8} {'share':>6}")
    for name, (count, us) in sorted(decode.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{name[:72]:<72} {count / steps:>8.1f} {us / steps:>9.1f} {us / count:>8.2f} {us / steps / total:>6.1%}")
    if sequence:
        print(f"one decode step in order (mean over the steps; the first layer, then what follows the last):")
        layer = (len(sequence) - 8) // config["num_hidden_layers"]
        for i, (name, us) in enumerate(sequence):
            if i < layer + 3 or i >= len(sequence) - 8:
                print(f"  {i:>4} {name[:60]:<60} {us:8.2f} us")
    launches = sum(c for c, _ in decode.values()) / steps
    print(f"wall {wall_us:.1f} us a token (unprofiled run); kernels {total:.1f} us a token in {launches:.0f} "
          f"launches; the rest {wall_us - total:.1f} us (gaps between the replay's kernels and the host's share)")


if __name__ == "__main__":
    main()
