"""A first run that runs: issue 16's seven-shape run, cold and warm, and neighbours against a sweep (GPU, torch-free).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/first_run.py [--compare]

The run: softmax, rms_norm, silu(x) * x and sum over the last dim of seven shapes nobody
benchmarked, (3, 1000) (77, 768) (512, 2048) (1, 151936) (24, 5120) (1000, 1000) (8, 14336), in
float32 and bfloat16, served by the shipped certificates (nothing swept unless asked). Each run is
a fresh process, timed from its start to its exit (imports, compiling, screening neighbours,
launches): `cold` with empty Triton and nbx caches (a private TRITON_CACHE_DIR and NBX_CACHE_DIR),
then `warm` with the same folders again. Each prints its report: keys certified, from a neighbour,
swept, and the seconds. Goals (issue 16): 0 swept; cold <= 20 s, warm <= 3 s.

--compare then times, for each key served from a neighbour, every candidate a sweep of that key
keeps (screened, timed by the certifier's method) on the key's representative, and prints the
neighbour's setting's time against the fastest: the median and the worst of served / best - 1
(goal: median within 3 %).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SHAPES = ((3, 1000), (77, 768), (512, 2048), (1, 151936), (24, 5120), (1000, 1000), (8, 14336))
DTYPES = ("float32", "bfloat16")


def seven_shapes(device: str) -> None:
    """The run itself: every op over every shape and dtype once, then a synchronize."""
    import numpy as np

    import nbx.core as nbx
    from nbx.core import dtypes
    from nbx.core.device import as_device, get_backend
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        host = dtypes.as_dtype(dtype).host   # inputs made on the host: no cast or fill kernel joins the run's keys
        for rows, cols in SHAPES:
            x = nbx.asarray(rng.standard_normal((rows, cols)).astype(host), device=device)
            weight = nbx.asarray(np.ones(cols, dtype=host), device=device)
            nbx.softmax(x, dim=-1)
            nbx.rms_norm(x, (cols,), weight, 1e-6)
            nbx.multiply(nbx.silu(x), x)
            nbx.sum(x, dim=-1)
    get_backend(as_device(device).type).synchronize(as_device(device))


def child(device: str) -> int:
    """One run in this process; prints one JSON line: the report's counts and which neighbour served what."""
    began = time.monotonic()
    seven_shapes(device)
    from nbx.autotune import serving
    report = serving.report()
    print(json.dumps({"seconds_in_run": time.monotonic() - began, "certified": report.certified,
                      "neighbour": report.neighbour, "swept": report.swept, "local": report.local,
                      "untuned": report.untuned, "neighbours_refused": report.neighbours_refused,
                      "from_neighbour": [[k, key, near] for (k, key), near in report.from_neighbour.items()],
                      "line": report.line()}))
    serving.print_report()
    return 0


def run_once(label: str, env: dict, device: str) -> dict:
    began = time.monotonic()
    done = subprocess.run([sys.executable, __file__, "--child", "--device", device], env=env, capture_output=True,
                          text=True)
    seconds = time.monotonic() - began
    if done.returncode != 0:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"first_run: the {label} run failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{label:5s} {seconds:7.2f} s process ({result['seconds_in_run']:.2f} s in the run): "
          f"{result['certified']} certified, {result['neighbour']} from a neighbour, {result['swept']} swept, "
          f"{result['local']} local, {result['untuned']} device tile; {result['neighbours_refused']} neighbour "
          f"setting(s) refused by the screen", flush=True)
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
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.device)
    print(f"# issue 16's run: softmax, rms_norm, silu(x) * x, sum over {len(SHAPES)} shapes {SHAPES} in "
          f"{', '.join(DTYPES)}; shipped certificates, nothing swept unless asked")
    with tempfile.TemporaryDirectory(prefix="nbx-first-run-") as folder:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(folder, "triton"), NBX_CACHE_DIR=os.path.join(folder, "nbx"))
        for name in ("NBX_AUTOTUNE_SWEEP", "NBX_AUTOTUNE_NO_SWEEP", "NBX_AUTOTUNE_CERTIFIED_ONLY"):
            env.pop(name, None)
        cold = run_once("cold", env, args.device)
        warm = run_once("warm", env, args.device)
    print(f"# goals: 0 swept (cold {cold['swept']}, warm {warm['swept']}); cold <= 20 s ({cold['seconds']:.1f}); "
          f"warm <= 3 s ({warm['seconds']:.1f})")
    if args.compare and cold["from_neighbour"]:
        compare(cold["from_neighbour"], args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
