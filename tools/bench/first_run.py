"""A first run that runs: issue 16's seven-shape run, cold and warm, and neighbours against a sweep (GPU, torch-free).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/first_run.py [--compare]

The run: softmax, rms_norm, silu(x) * x and sum over the last dim of seven shapes nobody
benchmarked, (3, 1000) (77, 768) (512, 2048) (1, 151936) (24, 5120) (1000, 1000) (8, 14336), in
float32 and bfloat16, served by the shipped certificates (nothing swept unless asked). Each run is
a fresh process, timed from its start to its exit (imports, compiling, screening neighbours,
launches): `cold` with empty Triton and nbx caches (a private TRITON_CACHE_DIR and NBX_CACHE_DIR),
then `warm` with the same folders again. Each prints its report: keys certified, from a neighbour,
swept, and the seconds. Goals (issue 16): 0 swept; cold <= 20 s, warm <= 3 s.

On a machine without a GPU, `--device interp` runs the same host path on Triton's interpreter
served as the H200 is (its device file's ladders, the shipped nvidia-h200-140gb certificates, each
neighbour screened): every figure but the kernels' and Triton's compiling is the GPU run's, so
the screens, certificate parsing and neighbour search can be measured here. `--tiny` divides the
row counts by 8 (the keys' widths stay; fewer rows for the interpreter to walk).

--cache-dir DIR keeps the cold and warm runs' caches (DIR/triton, DIR/nbx), so that a warm child can
be profiled afterwards:

    TRITON_CACHE_DIR=DIR/triton NBX_CACHE_DIR=DIR/nbx TRITON_INTERPRET=0 \
        python -m cProfile -s cumtime tools/bench/first_run.py --child --device cuda:0 | head -80

--warmup-jobs N adds a third run on fresh caches: `nbx warmup`'s machinery (warmup.warm over the
run's launches, census.Launch, in N processes at once through warmup.run_shards) compiles the
kernels and screens the neighbours ahead (their verdicts kept in the shared NBX_CACHE_DIR), then
the run; it prints the warm-up's seconds and the run's (issue 16: <= 20 s cold with the warm-up).

--count-compiles runs the cold run's host path here, over the tests' simulated CUDA with Triton's JIT
stubbed (compile_count.py): it lists every distinct specialization the run compiles, with Triton's own
binder and cache key, and marks which a neighbour's screen launched (and whether the key's own launch
then reused it). Nothing runs on a device; the screens' verdicts are taken as passed.

--compare then times, for each key served from a neighbour, every candidate a sweep of that key
keeps (screened, timed by the certifier's method) on the key's representative, and prints the
neighbour's setting's time against the fastest: the median and the worst of served / best - 1
(goal: median within 3 %).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SHAPES = ((3, 1000), (77, 768), (512, 2048), (1, 151936), (24, 5120), (1000, 1000), (8, 14336))
DTYPES = ("float32", "bfloat16")
AS_H200 = ("sm_90", "nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda")   # what --device interp is served as


def shapes(tiny: bool) -> tuple:
    return tuple((max(1, rows // 8), cols) for rows, cols in SHAPES) if tiny else SHAPES


def serve_as_h200(device: str) -> None:
    """The interpreter served as the H200 (its device file's facts, its shipped certificates, its neighbours)."""
    from nbx.autotune import serving
    from nbx.autotune.device_class import Identity
    from nbx.core import device_files
    from nbx.core.device import as_device
    arch, vendor, device_class, compiler = AS_H200
    tuner = serving.Tuner(device_files.for_arch(arch), Identity(vendor, device_class, compiler),
                          device=as_device(device))
    serving.install(device, tuner)
    serving.install(as_device(device), tuner)


def time_resolving() -> list:
    """Seconds spent resolving keys (certificates read, neighbours ranked and screened), summed into the list."""
    from nbx.autotune import serving
    spent, resolve = [0.0], serving.Tuner._resolve

    def timed(self, tunable, key, *rest):
        began = time.monotonic()
        try:
            return resolve(self, tunable, key, *rest)
        finally:
            spent[0] += time.monotonic() - began
    serving.Tuner._resolve = timed
    return spent


def seven_shapes(device: str, tiny: bool = False) -> None:
    """The run itself: every op over every shape and dtype once, then a synchronize."""
    import numpy as np

    import nbx.core as nbx
    from nbx.core import dtypes
    from nbx.core.device import as_device, get_backend
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        host = dtypes.as_dtype(dtype).host   # inputs made on the host: no cast or fill kernel joins the run's keys
        for rows, cols in shapes(tiny):
            x = nbx.asarray(rng.standard_normal((rows, cols)).astype(host), device=device)
            weight = nbx.asarray(np.ones(cols, dtype=host), device=device)
            nbx.softmax(x, dim=-1)
            nbx.rms_norm(x, (cols,), weight, 1e-6)
            nbx.multiply(nbx.silu(x), x)
            nbx.sum(x, dim=-1)
    get_backend(as_device(device).type).synchronize(as_device(device))


def launches(tiny: bool) -> list:
    """The run's launches as `nbx warmup` takes them (census.Launch): op, operand shapes, dtype, kernel."""
    from nbx.autotune.census import Launch
    found = []
    for dtype in DTYPES:
        for shape in shapes(tiny):
            found += [Launch("softmax", (shape,), dtype, "softmax", {}), Launch("rms_norm", (shape,), dtype, "norm", {}),
                      Launch("silu", (shape,), dtype, "elementwise", {}),
                      Launch("multiply", (shape, shape), dtype, "elementwise", {}),
                      Launch("sum", (shape,), dtype, "reduction", {})]
    return found


def warm_shard(device: str, tiny: bool, shard: int, jobs: int) -> int:
    """One of `--warmup-jobs` processes: its share of the run's launches, as `nbx warmup --jobs` runs them."""
    from nbx.autotune import warmup
    from nbx.core.device import as_device
    if device == "interp":
        serve_as_h200(device)
    warmup.warm(launches(tiny), lambda launch: warmup.run_launch(launch, as_device(device)), shard, jobs,
                progress=None)
    return 0


def child(device: str, tiny: bool) -> int:
    """One run in this process; prints one JSON line: the report's counts and which neighbour served what."""
    began = time.monotonic()
    resolving = time_resolving()
    from nbx.autotune import serving, warmup
    log = warmup.log_compiles(quiet=True)   # the report's compile lines: what NBX_AUTOTUNE_REPORT=1 prints
    if device == "interp":
        serve_as_h200(device)
    seven_shapes(device, tiny)
    report = serving.report()
    kept = [t._kept_verdicts[0] for t in {id(t): t for t in serving._process.tuners.values()}.values()
            if t._kept_verdicts is not None]
    print(json.dumps({"seconds_in_run": time.monotonic() - began, "seconds_resolving": resolving[0], "certified": report.certified,
                      "neighbour": report.neighbour, "swept": report.swept, "local": report.local,
                      "untuned": report.untuned, "neighbours_refused": report.neighbours_refused,
                      "verdicts_read": sum(v.read for v in kept), "verdicts_kept": sum(v.written for v in kept),
                      "compiles": sum(log.counts.values()), "compiles_in_screens": log.screened,
                      "from_neighbour": [[k, key, near] for (k, key), near in report.from_neighbour.items()],
                      "line": report.line()}))
    serving.print_report()
    return 0


def count_compiles(tiny: bool, verbose: bool) -> dict:
    """The cold run's distinct Triton compiles, counted on the simulated CUDA (compile_count.py)."""
    import compile_count
    from host_sim import simulated_cuda
    simulated_cuda()
    from nbx.core import dispatch
    for op in ("copy_", "fill_"):   # the kernels' copy_ and fill_ serve them, as on a GPU (the fake's memsets not)
        dispatch._IMPLEMENTATIONS.pop((op, "cuda"), None)
    counter = compile_count.Counter().install()
    undo = compile_count.screens_counted(counter)
    try:
        with tempfile.TemporaryDirectory(prefix="nbx-count-") as folder:
            os.environ["NBX_CACHE_DIR"] = folder   # no kept verdicts: every neighbour is screened, as cold
            serve_as_h200("cuda:0")
            from nbx.autotune import serving
            serving.report_at_exit(True)   # the report's compile log (NBX_AUTOTUNE_REPORT=1) sees these compiles
            seven_shapes("cuda:0", tiny)
    finally:
        undo()
        counter.restore()
    summary = counter.summary()
    if verbose:
        print("\n".join(counter.lines()))
    print(f"# compiles of the cold run (simulated CUDA, sm_90, Triton's binder): {summary['compiles']} distinct: "
          f"{summary.get('run only', 0)} by the run only, {summary.get('both', 0)} screened then reused by the key's "
          f"launch, {summary.get('screen only', 0)} by a screen only (needless: the key's launch compiled another)")
    print(f"# {serving.report_line()}")
    return summary


def run_once(label: str, env: dict, device: str, tiny: bool = False) -> dict:
    began = time.monotonic()
    done = subprocess.run([sys.executable, __file__, "--child", "--device", device] + ["--tiny"] * tiny, env=env,
                          capture_output=True, text=True)
    seconds = time.monotonic() - began
    if done.returncode != 0:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"first_run: the {label} run failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{label:5s} {seconds:7.2f} s process ({result['seconds_in_run']:.2f} s in the run, "
          f"{result['seconds_resolving']:.2f} s resolving settings): "
          f"{result['certified']} certified, {result['neighbour']} from a neighbour, {result['swept']} swept, "
          f"{result['local']} local, {result['untuned']} device tile; {result['neighbours_refused']} neighbour "
          f"setting(s) refused by the screen; screen verdicts {result['verdicts_read']} read, "
          f"{result['verdicts_kept']} kept; {result['compiles']} kernel specialization(s) compiled or loaded from "
          f"Triton's cache, {result['compiles_in_screens']} of them in screens", flush=True)
    print(f"      {result['line']}")
    result["seconds"] = seconds
    return result


def compare(served: list, device_name: str) -> None:
    """Each neighbour-served key: its served setting's time against the fastest candidate a sweep keeps."""
    from nbx.autotune import candidates, device_class, keys, screen, timing
    from nbx.autotune.store import CertificateStore
    from nbx.core.device import as_device
    from nbx.kernels import elementwise, norm, reduction, softmax  # noqa: F401  (declare the tunables)
    from nbx.kernels.launch import facts as facts_of
    device = as_device(device_name)
    facts = facts_of(device)
    timer = timing.timer_for(device)
    certified = CertificateStore()
    gaps = []
    print(f"{'kernel':17s} {'key (served from a neighbour)':52s} {'neighbour':52s} {'served':>9s} {'best':>9s} "
          f"{'gap':>7s}")
    for kernel, text, near in served:
        tunable = candidates.declared()[kernel]
        key = keys.parse(kernel, tunable.key, text, facts)
        setting = dict(certified.entries(device_class.identify(device), tunable, facts)[near].setting)
        rep = keys.representative(key, tunable.key, facts)
        kept, _ = tunable.candidates(facts, rep)
        work = tunable.workload(rep, device)
        passed = [v.setting for v in screen.run(work, kept, facts).passed]
        times = {tuple(sorted(s.items())): timing.measure(lambda s=s: work.launch(s), timer).median_ms for s in passed}
        mine = times.get(tuple(sorted(setting.items())))
        if mine is None:
            mine = timing.measure(lambda: work.launch(setting), timer).median_ms
        best = min(times.values())
        gaps.append(mine / best - 1)
        print(f"{kernel:17s} {text:52s} {near:52s} {mine:9.4f} {best:9.4f} {gaps[-1]:7.1%}", flush=True)
    if gaps:
        print(f"# {len(gaps)} neighbour-served key(s): served / best - 1, median {statistics.median(gaps):.1%}, "
              f"worst {max(gaps):.1%} (goal: median within 3 %)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--compare", action="store_true", help="time neighbour-served keys against a sweep")
    parser.add_argument("--tiny", action="store_true", help="an eighth of the rows (for --device interp)")
    parser.add_argument("--cache-dir", help="keep the cold and warm runs' caches here (DIR/triton, DIR/nbx) to "
                                            "profile a warm child afterwards")
    parser.add_argument("--warmup-jobs", type=int, default=0,
                        help="also time `nbx warmup` over the run's launches in this many processes, then the run")
    parser.add_argument("--count-compiles", action="store_true",
                        help="count the cold run's distinct Triton compiles here (simulated CUDA, no GPU) and list them")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm-shard", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.device, args.tiny)
    if args.count_compiles:
        count_compiles(args.tiny, verbose=True)
        return 0
    if args.warm_shard is not None:
        return warm_shard(args.device, args.tiny, args.warm_shard, args.warmup_jobs)
    print(f"# issue 16's run: softmax, rms_norm, silu(x) * x, sum over {len(SHAPES)} shapes {SHAPES} in "
          f"{', '.join(DTYPES)}; shipped certificates, nothing swept unless asked"
          + (" (Triton's interpreter served as the H200)" if args.device == "interp" else ""))
    kept = contextlib.nullcontext(args.cache_dir) if args.cache_dir else None
    with kept or tempfile.TemporaryDirectory(prefix="nbx-first-run-") as folder:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(folder, "triton"), NBX_CACHE_DIR=os.path.join(folder, "nbx"))
        if args.device == "interp":
            env["TRITON_INTERPRET"] = "1"
        for name in ("NBX_AUTOTUNE_SWEEP", "NBX_AUTOTUNE_NO_SWEEP", "NBX_AUTOTUNE_CERTIFIED_ONLY"):
            env.pop(name, None)
        cold = run_once("cold", env, args.device, args.tiny)
        warm = run_once("warm", env, args.device, args.tiny)
    if args.warmup_jobs:
        with tempfile.TemporaryDirectory(prefix="nbx-first-run-warmup-") as folder:
            env.update(TRITON_CACHE_DIR=os.path.join(folder, "triton"), NBX_CACHE_DIR=os.path.join(folder, "nbx"))
            from nbx.autotune import warmup
            began = time.monotonic()
            command = [sys.executable, __file__, "--device", args.device, "--warmup-jobs", str(args.warmup_jobs)]
            codes = warmup.run_shards(command + ["--tiny"] * args.tiny, args.warmup_jobs, "--warm-shard", env)
            ahead = time.monotonic() - began
            print(f"warmup {ahead:7.2f} s: {len(launches(args.tiny))} launch(es) in {args.warmup_jobs} processes "
                  f"(exit codes {codes})", flush=True)
            after = run_once("after", env, args.device, args.tiny)
        print(f"# with `nbx warmup --jobs {args.warmup_jobs}` first: {ahead:.1f} s + {after['seconds']:.1f} s = "
              f"{ahead + after['seconds']:.1f} s (goal <= 20 s)")
    print(f"# goals: 0 swept (cold {cold['swept']}, warm {warm['swept']}); cold <= 20 s ({cold['seconds']:.1f}); "
          f"warm <= 3 s ({warm['seconds']:.1f})")
    if args.compare and cold["from_neighbour"]:
        compare(cold["from_neighbour"], args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
