"""Issue 16's model goal: a decoder's first `generate`, cold, after `nbx warmup`, and warm (GPU, torch-free).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/first_generate.py \\
        [--shape 8b] [--jobs 16] [--prompt 512] [--new 16]

Writes a seeded checkpoint of the shape (bfloat16, the Hugging Face layout; tools/bench/model_shapes.py),
then times fresh processes, each from its start to its exit: imports, `nbx.models.load`, one
`generate` of the prompt (greedy, every new token decoded), then the same `generate` again. The
second one is the run itself, so `setup` = the process's seconds less the second generate's: the
compiling, the neighbours' screens, loading and capturing.
- `cold`: empty Triton and nbx caches (a private TRITON_CACHE_DIR and NBX_CACHE_DIR).
- `warmup`: `nbx warmup --model PATH --jobs N` (the same plan: batch 1, the prompt, the new
  tokens) on fresh caches, then the run on them: the warm-up's seconds, the run's setup, their sum.
- `warm`: the run again on the warmed caches.
Goals (issue 16): 0 keys swept; setup <= 60 s cold, <= 20 s after `nbx warmup`, <= 5 s warm.

`--shape small --device interp` runs a small Llama on Triton's interpreter served as the H200 (the
host path, the screens and the census here; every figure of compiling is the GPU's only; its
`nbx warmup` is interp's own, not served as the H200, so its verdicts do not serve the runs after).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from first_run import serve_as_h200, time_resolving

GOALS = {"cold": 60.0, "warmup": 20.0, "warm": 5.0}


def config(shape: str) -> dict:
    if shape == "small":
        from nbx.models.writer import small_config
        return small_config("LlamaForCausalLM")
    from model_shapes import config_of
    return config_of(shape)


def prompt_ids(config: dict, length: int) -> list[int]:
    return [(7 + 31 * i) % config["vocab_size"] for i in range(length)]   # fixed, any ids of the vocabulary


def child(folder: str, device: str, prompt: int, new: int) -> int:
    """One run in this process; prints one JSON line: the seconds of each part and the report's counts."""
    began = time.monotonic()
    resolving = time_resolving()
    if device == "interp":
        serve_as_h200(device)
    from nbx import models
    from nbx.autotune import serving
    from nbx.core import synchronize
    model = models.load(folder, device=device)
    model.eos = ()   # seeded weights: every step runs
    loaded = time.monotonic()
    ids = prompt_ids(model.config, prompt)
    model.generate(ids, new)
    synchronize()
    first = time.monotonic()
    model.generate(ids, new)
    synchronize()
    second = time.monotonic()
    report = serving.report()
    print(json.dumps({"imports_and_load": loaded - began, "first": first - loaded, "second": second - first,
                      "resolving": resolving[0], "certified": report.certified, "neighbour": report.neighbour,
                      "swept": report.swept, "untuned": report.untuned, "line": report.line()}))
    return 0


def run_once(label: str, env: dict, args) -> dict:
    began = time.monotonic()
    done = subprocess.run([sys.executable, __file__, "--child", args.folder, "--device", args.device,
                           "--prompt", str(args.prompt), "--new", str(args.new)], env=env, capture_output=True,
                          text=True)
    seconds = time.monotonic() - began
    if done.returncode != 0:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"first_generate: the {label} run failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"], result["setup"] = seconds, seconds - result["second"]
    print(f"{label:6s} {seconds:7.2f} s process: setup {result['setup']:.2f} s (imports and load "
          f"{result['imports_and_load']:.2f}, first generate {result['first']:.2f}, of it resolving settings "
          f"{result['resolving']:.2f}); the run itself {result['second']:.2f} s; {result['certified']} certified, "
          f"{result['neighbour']} from a neighbour, {result['swept']} swept, {result['untuned']} device tile",
          flush=True)
    return result


def fresh(folder: str, env: dict) -> dict:
    return dict(env, TRITON_CACHE_DIR=os.path.join(folder, "triton"), NBX_CACHE_DIR=os.path.join(folder, "nbx"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8b", help="8b, 1b, qwen7b (tools/bench/model_shapes.py) or small")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=16, help="new tokens a generate")
    parser.add_argument("--jobs", type=int, default=16, help="nbx warmup's processes")
    parser.add_argument("--child", dest="folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.folder:
        return child(args.folder, args.device, args.prompt, args.new)
    import nbx.core as nbx
    from nbx import models
    cfg = config(args.shape)
    env = dict(os.environ, TRITON_INTERPRET="1" if args.device == "interp" else os.environ.get("TRITON_INTERPRET", "0"))
    for name in ("NBX_AUTOTUNE_SWEEP", "NBX_AUTOTUNE_NO_SWEEP", "NBX_AUTOTUNE_CERTIFIED_ONLY"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="nbx-first-generate-", dir="/tmp") as tmp:
        began = time.monotonic()
        draw_on = None if args.device == "interp" else args.device   # a GPU draws the weights in a moment
        args.folder = str(models.write_checkpoint(Path(tmp) / "model", cfg, seed=0, dtype="bfloat16", shards=4,
                                                  device=draw_on))
        nbx.synchronize()
        print(f"# issue 16's model run: {args.shape} shape ({cfg['num_hidden_layers']} layers, hidden "
              f"{cfg['hidden_size']}, vocab {cfg['vocab_size']}), bfloat16; a generate of {args.new} tokens after a "
              f"{args.prompt}-token prompt; checkpoint written in {time.monotonic() - began:.1f} s", flush=True)
        results = {"cold": run_once("cold", fresh(os.path.join(tmp, "cold"), env), args)}
        warmed = fresh(os.path.join(tmp, "warmup"), env)
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "nbx.core.cli", "warmup", "--model", args.folder,
                               "--jobs", str(args.jobs), "--batch", "1", "--prompt", str(args.prompt),
                               "--new-tokens", str(args.new), "--device", args.device], env=warmed,
                              capture_output=True, text=True)
        ahead = time.monotonic() - began
        print(f"warmup {ahead:7.2f} s: nbx warmup --jobs {args.jobs} (exit {done.returncode}) "
              f"{done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ''}", flush=True)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
        after = run_once("after", warmed, args)
        results["warmup"] = dict(after, setup=ahead + after["setup"])
        results["warm"] = run_once("warm", warmed, args)
    verdicts = "; ".join(f"{name} {results[name]['setup']:.1f} s (goal <= {goal:.0f}: "
                         f"{'met' if results[name]['setup'] <= goal else 'MISSED'})" for name, goal in GOALS.items())
    swept = sum(r["swept"] for r in results.values())
    print(f"# goals: 0 swept ({swept}); setup: {verdicts} (warmup = nbx warmup's seconds + the run's setup)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
