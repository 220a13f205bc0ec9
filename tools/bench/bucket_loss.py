"""Bucket loss: the speed a certified setting loses on the neighbouring classes of its key (GPU, torch-free).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bucket_loss.py \\
        --compile-jobs 8 [--families elementwise,softmax,norm,reduction,matmul] [--keys-per-family 6] \\
        [--rungs 1] [--fields tokens,m] [--propose]

For each family, up to --keys-per-family of its shipped certified keys (spread over the file;
representatives of at most --max-elements elements), and for each size field of the key and each
distance d = 1 .. --rungs, the class d rungs below and above (the device file's ladder classes; a
row's width: the power of two d octaves away): the neighbour N. On N's representative every
candidate the sweep of N keeps is screened against the float64 oracle (windows of
autotune.neighbour_screen_max_bytes) and timed with the certifier's method (nbx.autotune.timing.measure:
L2 read-flushed, queued behind a hold, median of 21); then

    loss = time of K's certified setting on N / time of N's fastest passing candidate - 1

which is what serving K's setting to N costs (N's own best being what a certificate of N would
serve). A setting the sweep of N would prune is not served to N (neighbours.py): counted apart.
Printed: one line per pair (shapes and dtypes in the keys), then per family, field, ladder row
(up_to, step) of N's class and distance: the pairs, the median and the worst loss. --propose adds,
per ladder row, the coarsest step whose measured losses meet "< 3 % median, < 10 % worst": serving
a class's setting over m merged classes loses at most what serving it d < m rungs away loses.

--compile-jobs N first screens every (neighbour, candidate) in N processes at once, which fills
Triton's on-disk cache; the timing then runs alone in this process. Wall time per family is printed.
"""
from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from collections import defaultdict

from nbx.autotune import candidates, device_class, keys, screen, space, store, timing
from nbx.autotune.neighbours import MAX_BYTES_FACT
from nbx.core import dtypes
from nbx.core.device import as_device

MEDIAN_GOAL, WORST_GOAL = 0.03, 0.10


def _size(rep: dict) -> int:
    """A representative's element count: a product's three operands, a stated count, else the product of
    its sizes (attention's rows x k_len x head_dim, sampling's rows x vocab)."""
    if "m" in rep:
        return rep["m"] * rep["k"] + rep["k"] * rep["n"] + rep["m"] * rep["n"]
    if "elements" in rep or "n" in rep:
        return rep.get("elements", rep.get("n", 0))
    return math.prod(v for v in rep.values() if isinstance(v, int) and not isinstance(v, bool))


def jobs(identity, facts, families, per_family: int, rungs: int, max_elements: int, min_elements: int = 1 << 16,
         moved_fields=None) -> list:
    """(family, K text, K setting, field, d, N key) for every pair measured, in a fixed order: the certified
    keys of the dtypes models run (autotune.key_space) whose representatives hold min_elements to
    max_elements, spread from the smallest to the largest; moved_fields (names), when given, the only size
    fields moved (a MoE key's six each make a gigabyte-sized layer a neighbour)."""
    declared = candidates.declared()
    stated = facts.value("autotune.key_space")["dtypes"]
    out = []
    for family in families:
        tunable = declared[family]
        as_key = tunable.key_dtype or dtypes.as_dtype  # the copies key the word they move (u16)
        shipped = {as_key(dtypes.as_dtype(d)).key for d in stated}
        typed = [n for n, kind in tunable.key_fields if kind == "dtype"]   # a proof's dtype may be its output's
        entries = store.CertificateStore().entries(identity, tunable, facts)
        usable = sorted(((_size(e.proof["representative"]), text, e) for text, e in entries.items()
                         if all(keys.parse(family, tunable.key, text, facts).values()[n] in shipped for n in typed)
                         and min_elements <= _size(e.proof["representative"]) <= max_elements), key=lambda t: t[:2])
        usable = [(text, e) for _, text, e in usable]
        step = max(1, len(usable) // max(per_family, 1))
        for text, entry in usable[::step][:per_family]:
            key = keys.parse(family, tunable.key, text, facts)
            for index, (name, kind) in enumerate(tunable.key_fields):
                if kind not in keys.LADDERS and kind not in keys.OCTAVE_SIZES or moved_fields and name not in moved_fields:
                    continue
                ladder = keys.ladder(kind, facts) if kind in keys.LADDERS else None
                for d in range(1, rungs + 1):
                    for signed in (-d, d):
                        moved = space.neighbour_value(kind, ladder, key.fields[index][1], signed)
                        if moved is None:
                            continue
                        fields = list(key.fields)
                        fields[index] = (name, moved)
                        other = keys.LaunchKey(family, tuple(fields))
                        try:
                            rep = keys.representative(other, tunable.key, facts)
                        except Exception:  # an unbounded class: no top to time
                            continue
                        if _size({k: v for k, v in rep.items() if isinstance(v, int)}) > max_elements:
                            continue
                        out.append((family, text, dict(entry.setting), name, signed, other))
    return out


def _screened(tunable, other, facts, device):
    rep = keys.representative(other, tunable.key, facts)
    kept, _ = tunable.candidates(facts, rep)
    work = tunable.workload(rep, device)
    result = screen.run(work, kept, facts, MAX_BYTES_FACT)
    return rep, work, [v.setting for v in result.passed]


def screen_shard(args, device, facts) -> int:
    """Compile ahead: screen this shard's neighbours (each candidate compiled and run once)."""
    declared = candidates.declared()
    seen = set()
    for family, _, _, _, _, other in jobs(device_class.identify(device), facts, args.families.split(","),
                                          args.keys_per_family, args.rungs, args.max_elements,
                                          moved_fields=_fields(args))[args.screen_shard::args.compile_jobs]:
        if (family, str(other)) not in seen:
            seen.add((family, str(other)))
            _screened(declared[family], other, facts, device)
    return 0


def _fields(args) -> set | None:
    return set(args.fields.split(",")) if args.fields else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="elementwise,softmax,norm,reduction,matmul")
    parser.add_argument("--keys-per-family", type=int, default=6)
    parser.add_argument("--rungs", type=int, default=1, help="neighbours up to this many rungs away")
    parser.add_argument("--max-elements", type=int, default=1 << 26, help="skip larger representatives (a "
                                                                           "matmul's: its three operands)")
    parser.add_argument("--compile-jobs", type=int, default=1)
    parser.add_argument("--fields", help="move only these key fields (comma-separated names; default every size field)")
    parser.add_argument("--propose", action="store_true", help="print the coarser ladder steps the figures allow")
    parser.add_argument("--screen-shard", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from nbx.autotune.cli import _load_kernels
    from nbx.kernels.launch import facts as facts_of
    _load_kernels()  # every installed family declares its tunable
    device = as_device("cuda:0")
    facts = facts_of(device)
    if args.screen_shard is not None:
        return screen_shard(args, device, facts)
    began = time.monotonic()
    pairs = jobs(device_class.identify(device), facts, args.families.split(","), args.keys_per_family, args.rungs,
                 args.max_elements, moved_fields=_fields(args))
    if args.compile_jobs > 1:
        command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
        procs = [subprocess.Popen(command + ["--screen-shard", str(i)]) for i in range(args.compile_jobs)]
        codes = [p.wait() for p in procs]
        print(f"# compiled ahead in {args.compile_jobs} processes: {time.monotonic() - began:.0f} s (exit {codes})",
              flush=True)
    timer = timing.timer_for(device)
    declared = candidates.declared()
    losses = defaultdict(list)
    pruned = defaultdict(int)
    memo: dict = {}
    spent: dict = defaultdict(float)
    print(f"{'family':17s} {'certified key':52s} {'field':8s} {'d':>3s} {'neighbour':52s} {'served':>9s} "
          f"{'best':>9s} {'loss':>7s}")
    for family, text, setting, name, signed, other in pairs:
        pair_began = time.monotonic()
        tunable = declared[family]
        if (family, str(other)) not in memo:
            rep, work, passed = _screened(tunable, other, facts, device)
            times = {tuple(sorted(s.items())): timing.measure(lambda s=s: work.launch(s), timer).median_ms
                     for s in passed}
            memo[(family, str(other))] = (rep, work, times)
        rep, work, times = memo[(family, str(other))]
        spent[family] += time.monotonic() - pair_began
        kind = dict(tunable.key_fields)[name]
        value = dict(other.fields)[name]
        row = "pow2" if kind in keys.OCTAVE_SIZES else "up_to {up_to} step {step}".format(
            **space.row_of(keys.ladder(kind, facts), value))
        group = (family, name, row, abs(signed))
        if tunable.refusal(setting, facts, rep) is not None or not times:
            pruned[group] += 1
            continue
        served = times.get(tuple(sorted(setting.items())))
        if served is None:  # K's setting failed N's screen: never served there
            pruned[group] += 1
            continue
        best = min(times.values())
        loss = served / best - 1
        losses[group].append(loss)
        print(f"{family:17s} {text:52s} {name:8s} {signed:+3d} {str(other):52s} {served:9.4f} {best:9.4f} "
              f"{loss:7.1%}", flush=True)
    print("\n# per family, field, ladder row of the neighbour's class, distance: pairs, median and worst loss")
    for group in sorted(set(losses) | set(pruned)):
        got = losses.get(group, [])
        figures = f"median {statistics.median(got):6.1%} worst {max(got):6.1%}" if got else "no pair timed"
        print(f"{group[0]:17s} {group[1]:8s} {group[2]:28s} d={group[3]}: {len(got):3d} pair(s) {figures}"
              f"{f'; {pruned[group]} not servable (pruned or failing the screen)' if pruned.get(group) else ''}")
    print("# timing per family: " + ", ".join(f"{f} {s:.0f} s" for f, s in spent.items()))
    print(f"# {len(pairs)} pair(s), {len(memo)} neighbour(s) timed, {time.monotonic() - began:.0f} s in all")
    if args.propose:
        propose(losses, args.rungs)
    return 0


def propose(losses: dict, rungs: int) -> None:
    """Per (family, field, ladder row): the step multiplier m whose distances d < m all meet the goals."""
    print(f"\n# proposed steps (< {MEDIAN_GOAL:.0%} median, < {WORST_GOAL:.0%} worst at every distance below the "
          f"multiplier; measured up to {rungs} rung(s))")
    rows = sorted({g[:3] for g in losses})
    for family, name, row in rows:
        multiplier = 1
        for d in range(1, rungs + 1):
            got = losses.get((family, name, row, d), [])
            if not got or statistics.median(got) >= MEDIAN_GOAL or max(got) >= WORST_GOAL:
                break
            multiplier = d + 1
        verdict = "keep the step" if multiplier == 1 else f"step x{multiplier}"
        print(f"{family:17s} {name:8s} {row:28s} {verdict}")


if __name__ == "__main__":
    sys.exit(main())
