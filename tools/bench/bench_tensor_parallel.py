"""Tensor-parallel decoding on the GPUs of one host (issue 23's goals), one rank program per GPU.

    # TP=1 (one process), then TP=2 through nbx's launcher; tools/nccl_models_run.sh runs them all
    python3 tools/bench/bench_tensor_parallel.py decode --shape 8b --tp 1 --out DIR
    python3 -m nbx.devices.nvidia.nccl_launch --nproc 2 -- tools/bench/bench_tensor_parallel.py decode --shape 8b --tp 2 --out DIR
    python3 -m nbx.devices.nvidia.nccl_launch --nproc 2 -- tools/bench/bench_tensor_parallel.py allreduce --tp 2 --out DIR
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 tools/bench/bench_tensor_parallel.py allreduce-torch --tp 2 --out DIR
    python3 tools/bench/bench_tensor_parallel.py summary --out DIR

decode: a Llama of the shape (8b: Llama-3-8B, 70b: Llama-3-70B) with seeded bfloat16 weights drawn
on each rank's GPU (nbx.models.sharding.SeededWeights: every split of the seed holds the same model,
no checkpoint to write), prompt 128 seeded ids, 129 new tokens greedy, batch 1. Rank 0 reports
decode tokens/s and ms/token (every token after the first, each read back to the host), the decode
path (graph or eager), the weight bytes a rank reads per token and the roofline: rank bytes per
token over the copy bandwidth measured in the run (nbx clone of 1 GiB, read + write), which is the
summed HBM roofline of the ranks. The greedy tokens and the prompt's last logits row are saved for
the summary's TP=N vs TP=1 comparison.
allreduce: nbx's all_reduce_ (sum, bfloat16) of [batch, 8192], batch 1..64, 200 calls between CUDA
events after 20 warm-ups (GPU us per call) and host us per call; allreduce-torch: the same through
torch.distributed (NCCL's own latency, the peer). summary: prints and checks the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
               head_dim=128, num_hidden_layers=32, vocab_size=128256, tie_word_embeddings=False),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8,
                head_dim=128, num_hidden_layers=80, vocab_size=128256, tie_word_embeddings=False),
}
ROPE = {"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
BATCHES = (1, 2, 4, 8, 16, 32, 64)
HIDDEN = 8192
PROMPT, NEW = 128, 129


def config_of(shape: str) -> dict:
    from nbx.models.writer import small_config
    return small_config("LlamaForCausalLM", **SHAPES[shape], **ROPE, max_position_embeddings=8192,
                        rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=[])


def communicator(tp: int):
    if tp == 1:
        return None
    from nbx.devices.nvidia import nccl
    return nccl.Communicator.from_env()


def copy_bandwidth(device) -> float:
    """Bytes per second of an nbx clone of 1 GiB (read + write), median of 5."""
    import nbx.core as nbx
    from nbx.devices import nvidia
    x = nbx.ones(1 << 29, dtype="bfloat16", device=device)
    times = []
    for _ in range(6):
        start, end = nvidia.Event(device.index), nvidia.Event(device.index)
        start.record()
        x.clone()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * x.nbytes / float(np.median(times[1:]))


def weight_bytes_per_token(model) -> int:
    """Every weight a decode step reads once: the layers', the final norm's, the lm_head's (of an
    untied embedding one row per token: not counted)."""
    tensors = [model.norm, model.lm_head] + [t for layer in model.layers for t in vars(layer).values()
                                             if hasattr(t, "nbytes")]
    return sum(t.nbytes for t in tensors)


def decode(args) -> None:
    import nbx.core as nbx
    from nbx.models.decoder import FAMILIES, Decoder
    from nbx.models.running import Generated
    from nbx.models.sharding import SeededWeights, ShardPlan
    from nbx.models.tensor_parallel import TensorParallelDecoder
    comm = communicator(args.tp)
    device = nbx.as_device(args.device) if comm is None else comm.device
    config = config_of(args.shape)
    family = FAMILIES["LlamaForCausalLM"]
    start = time.perf_counter()
    if comm is None:
        model = Decoder(family, config, SeededWeights(config, seed=0, device=device))
    else:
        plan = ShardPlan.of(config, comm.rank, comm.world_size)
        model = TensorParallelDecoder(family, config, SeededWeights(config, seed=0, device=device, plan=plan), comm,
                                      timeout=900)
    built = time.perf_counter() - start
    prompt = np.random.default_rng(0).integers(0, config["vocab_size"], PROMPT).tolist()
    last_logits = model.logits(prompt)[-1].numpy()
    for _ in range(2):   # the first generation compiles, tunes and captures; the second is timed
        times = []
        t0 = time.perf_counter()
        tokens = model.generate(prompt, NEW, on_token=lambda _: times.append(time.perf_counter()))
    generated = Generated(tokens, PROMPT, times[0] - t0, times[-1] - times[0])
    per_token_s = generated.decode_s / (len(tokens) - 1)
    bandwidth = copy_bandwidth(device)
    rank_bytes = weight_bytes_per_token(model)
    rank = 0 if comm is None else comm.rank
    report = {"shape": args.shape, "tp": args.tp, "rank": rank, "device": str(device), "built_s": built,
              "line": generated.line(), "decode_tokens_per_s": 1 / per_token_s, "ms_per_token": per_token_s * 1e3,
              "decode": model.last_decode, "rank_weight_bytes_per_token": rank_bytes,
              "copy_bandwidth_Bps": bandwidth, "roofline_tokens_per_s": bandwidth / rank_bytes,
              "fraction_of_roofline": (1 / per_token_s) / (bandwidth / rank_bytes),
              "tokens": tokens, "torch_loaded": "torch" in sys.modules}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        np.save(out / f"logits_{args.shape}_tp{args.tp}.npy", last_logits)
        (out / f"decode_{args.shape}_tp{args.tp}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "tokens"}))
    if comm is not None:
        comm.destroy()


def _time_calls(call, index) -> tuple[float, float]:
    """(GPU us, host us) per call over 200 calls after 20 warm-ups."""
    from nbx.devices import nvidia
    for _ in range(20):
        call()
    start, end = nvidia.Event(index), nvidia.Event(index)
    t0 = time.perf_counter()
    start.record()
    for _ in range(200):
        call()
    end.record()
    host = (time.perf_counter() - t0) / 200 * 1e6
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / 200, host


def allreduce(args) -> None:
    import nbx.core as nbx
    comm = communicator(args.tp)
    rows = []
    for batch in BATCHES:
        x = nbx.ones(batch, HIDDEN, dtype="bfloat16", device=comm.device)
        comm.barrier()
        gpu_us, host_us = _time_calls(lambda x=x: comm.all_reduce_(x, "sum"), comm.device.index)
        rows.append({"batch": batch, "bytes": x.nbytes, "gpu_us": gpu_us, "host_us": host_us})
    _write_rank_rows(args, "nbx", comm.rank, rows)
    comm.destroy()


def allreduce_torch(args) -> None:
    import torch
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    rows = []
    for batch in BATCHES:
        x = torch.ones(batch, HIDDEN, dtype=torch.bfloat16, device="cuda")
        for _ in range(20):
            dist.all_reduce(x)
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        for _ in range(200):
            dist.all_reduce(x)
        end.record()
        host = (time.perf_counter() - t0) / 200 * 1e6
        end.synchronize()
        rows.append({"batch": batch, "bytes": x.numel() * 2, "gpu_us": start.elapsed_time(end) * 1e3 / 200,
                     "host_us": host})
    _write_rank_rows(args, "torch", rank, rows, torch.__version__)
    dist.destroy_process_group()


def _write_rank_rows(args, who: str, rank: int, rows, version=None) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"allreduce_{who}_tp{args.tp}_rank{rank}.json").write_text(json.dumps({"rows": rows, "version": version}))


def summary(args) -> int:
    """Print the goals' figures; exit 1 when a figure that was measured misses its goal."""
    out, misses = Path(args.out), []
    runs = {p.stem.removeprefix("decode_"): json.loads(p.read_text()) for p in sorted(out.glob("decode_*.json"))}
    for key, run in runs.items():
        print(f"{key}: {run['line']}; {run['decode']} decode; {run['fraction_of_roofline']:.0%} of the summed HBM "
              f"roofline ({run['rank_weight_bytes_per_token'] / 1e9:.2f} GB per rank per token at "
              f"{run['copy_bandwidth_Bps'] / 1e12:.2f} TB/s); weights built in {run['built_s']:.0f} s")
    base = runs.get("8b_tp1")
    for tp, goal in ((2, 1.7), (4, 3.0)):
        run = runs.get(f"8b_tp{tp}")
        if base and run:
            speedup = run["decode_tokens_per_s"] / base["decode_tokens_per_s"]
            same = run["tokens"] == base["tokens"]
            dev = _deviation(np.load(out / f"logits_8b_tp{tp}.npy"), np.load(out / "logits_8b_tp1.npy"))
            print(f"8b TP={tp}: {speedup:.2f}x TP=1 (goal >= {goal}x); greedy tokens equal to TP=1: {same}; "
                  f"last prompt logits deviation {dev:.3g}")
            misses += [f"8b TP={tp} speedup {speedup:.2f}"] * (speedup < goal) + [f"8b TP={tp} tokens"] * (not same)
    for tp in (2, 4):
        run = runs.get(f"70b_tp{tp}")
        if run:
            misses += [f"70b TP={tp} at {run['fraction_of_roofline']:.0%} of the roofline"] * (
                run["fraction_of_roofline"] < 0.6)
    for tp in (2, 4, 8):
        ours, peer = _slowest(out, "nbx", tp), _slowest(out, "torch", tp)
        for batch in sorted(ours):
            ratio = ours[batch] / peer[batch] if batch in peer else float("nan")
            print(f"all_reduce TP={tp} [{batch}, {HIDDEN}] bf16: nbx {ours[batch]:.1f} us, NCCL via torch "
                  f"{peer.get(batch, float('nan')):.1f} us: {ratio:.2f}x (goal <= 1.1x)")
            misses += [f"all_reduce TP={tp} batch {batch}: {ratio:.2f}x"] * (ratio > 1.1)
    print("goals missed: " + ("; ".join(misses) if misses else "none"))
    return 1 if misses else 0


def _deviation(a, b) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


def _slowest(out: Path, who: str, tp: int) -> dict[int, float]:
    """GPU us per call by batch, the slowest rank's (it bounds the collective)."""
    ranks = [json.loads(p.read_text())["rows"] for p in out.glob(f"allreduce_{who}_tp{tp}_rank*.json")]
    return {row["batch"]: max(r[i]["gpu_us"] for r in ranks) for i, row in enumerate(ranks[0])} if ranks else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("decode", "allreduce", "allreduce-torch", "summary"))
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda:0", help="TP=1's device (the ranks use their communicator's)")
    args = parser.parse_args()
    run = {"decode": decode, "allreduce": allreduce, "allreduce-torch": allreduce_torch, "summary": summary}
    return int(run[args.what](args) or 0)


if __name__ == "__main__":
    sys.exit(main())
