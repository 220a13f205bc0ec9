"""The certifier's loop and the coverage of a keys file: what `nbx autotune certify|coverage` run.

certify() proves each recorded key (sweep.prove: prune, screen, time under the witness) and merges
each entry into <out>/<vendor>/<device class>/<compiler>/<kernel>.json as soon as it is proven, so
an interrupted certification keeps what it finished. A key that cannot be proven is listed with
its reason, never written.

compile_ahead() launches the candidates of a shard of the same keys once, untimed. A certification is bound by
compiling (each candidate of each key is a kernel Triton compiles, about a second each), and the
timing must run alone on the GPU: `certify --compile-jobs N` first runs N shards at once in their
own processes, which fill Triton's on-disk cache, then times every key in one process that loads
the compiled kernels from it.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbx.core.errors import NbxError

from . import keys, records, screen, store, sweep, timing


@dataclass
class Outcome:
    certified: list = field(default_factory=list)   # (kernel, key, setting, best_ms)
    refused: list = field(default_factory=list)     # (kernel, key, reason)
    skipped: list = field(default_factory=list)     # (kernel, key, reason): another class, or done already


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // max(total, 1)
    return "#" * filled + "-" * (width - filled)


@screen.keeping_inputs()   # a layer's keys one after another share its drawn host inputs, dropped at the end
def certify(key_records, *, tunables: dict, facts, identity, device, timer, out, warmup: int = timing.WARMUP,
            repeats: int = timing.REPEATS, retries: int = 1, progress=sys.stderr, missing_only: bool = False) -> Outcome:
    """Prove every key recorded for this device class; write each proven entry into out.

    missing_only: keys that out already certifies for this class and compiler are skipped (a
    certification resumed after an interruption, or a second keys file over the same tree)."""
    result = Outcome()
    todo = _to_prove(key_records, tunables, facts, identity, out, missing_only, result)
    started = time.monotonic()
    for done, rec in enumerate(todo, 1):
        began = time.monotonic()
        try:
            tunable = tunables.get(rec.kernel)
            if tunable is None:
                raise NbxError(f"no installed kernel declares {rec.kernel!r} (declared: {sorted(tunables)})")
            key = keys.parse(rec.kernel, tunable.key, rec.key, facts, rec.observed)
            entry = sweep.prove(tunable, key, facts, device, timer, warmup=warmup, repeats=repeats, retries=retries)
            path = store.path_in(Path(out) / identity.vendor, identity, rec.kernel)
            store.write(path, store.header(tunable, identity), {rec.key: entry}, tunable)
            result.certified.append((rec.kernel, rec.key, entry.setting, entry.proof["best_ms"]))
            verdict = f"{entry.setting} {entry.proof['best_ms']:.4g} ms"
        except NbxError as exc:
            result.refused.append((rec.kernel, rec.key, f"{type(exc).__name__}: {exc}"))
            verdict = f"refused ({type(exc).__name__})"
        if progress is not None:
            rate = (time.monotonic() - started) / done
            left = rate * (len(todo) - done)
            print(f"[{_bar(done, len(todo))}] {done}/{len(todo)} {rec.kernel} {rec.key}: {verdict} "
                  f"({time.monotonic() - began:.1f} s; about {left:.0f} s left)", file=progress, flush=True)
    return result


def _to_prove(key_records, tunables, facts, identity, out, missing_only: bool, result: Outcome) -> list:
    """The records certify() proves; the others go to result.skipped or result.refused."""
    todo = []
    done_tree = store.CertificateStore(trees=[Path(out)], packaged=False) if missing_only else None
    for rec in records.merge(key_records):
        tunable = tunables.get(rec.kernel)
        if done_tree is not None and tunable is not None and rec.key in done_tree.entries(identity, tunable, facts):
            result.skipped.append((rec.kernel, rec.key, f"certified already in {out}"))
        elif rec.device_class not in (None, identity.device_class):
            result.skipped.append((rec.kernel, rec.key, f"recorded on {rec.device_class}"))
        elif rec.device_file != facts.name:
            result.refused.append((rec.kernel, rec.key, f"classed by the ladders of {rec.device_file}, this "
                                                        f"device's file is {facts.name}: record the keys again"))
        else:
            todo.append(rec)
    return todo


@screen.keeping_inputs()
def compile_ahead(key_records, *, tunables: dict, facts, identity, device, out, shard: int, shards: int,
                  missing_only: bool = False) -> int:
    """Launch once each candidate of this shard's keys among those certify() would prove, so that
    Triton compiles it into its cache; nothing is timed, screened or written (certify() screens
    every candidate itself). Shards take whole keys where they can (a key's workload and its oracle
    are made once per shard that holds part of it: an attention key's float64 oracle takes GBs and
    seconds), and a key holding more candidates than a shard's share is split (shard_parts: three
    radix sort keys of 33 candidates, about 10 s of compiling each, kept 3 of 16 shards busy for
    minutes). The number of candidates launched; one whose key cannot be formed or whose launch
    raises is left for certify() to refuse or exclude with its reason."""
    todo = _to_prove(key_records, tunables, facts, identity, out, missing_only, Outcome())
    formed = [_candidates_of(rec, tunables.get(rec.kernel), facts) for rec in todo]
    mine: dict[int, list[slice]] = {}
    for i, part in shard_parts([len(kept) for _, kept in formed], shards)[shard]:
        mine.setdefault(i, []).append(part)
    launched = 0
    for i, parts in mine.items():
        rep, kept = formed[i]
        work = tunables[todo[i].kernel].workload(rep, device)
        for setting in (s for part in parts for s in kept[part]):
            try:
                work.launch(setting)
            except Exception:  # noqa: BLE001 (certify() runs it again and excludes it with why)
                continue
            launched += 1
    return launched


def shard_parts(counts: list[int], shards: int) -> list[list[tuple[int, slice]]]:
    """Each shard's (key, slice of its candidates), given each key's candidate count. A key is cut
    into as many even parts as whole shares (the total over the shards, rounded up) it holds, at
    least one; while there are fewer parts than shards, the key whose parts are largest takes one
    more. So keys stay whole where there are as many as shards, and a few large keys spread over the
    idle shards. The parts go largest first onto the least loaded shard (the lowest-numbered of
    equals). The same answer in every shard's process."""
    share = max(1, -(-sum(counts) // max(1, shards)))
    pieces = [max(1, count // share) if count else 0 for count in counts]
    while sum(pieces) < shards:
        j = max(range(len(counts)), key=lambda j: (counts[j] / pieces[j] if pieces[j] else 0, -j), default=None)
        if j is None or counts[j] <= pieces[j]:
            break
        pieces[j] += 1
    parts = []
    for i, (count, n) in enumerate(zip(counts, pieces)):
        bounds = [count * j // n for j in range(n + 1)] if n else []
        parts += [(i, slice(a, b)) for a, b in zip(bounds, bounds[1:])]
    loads, owned = [0] * shards, [[] for _ in range(shards)]
    for i, part in sorted(parts, key=lambda p: (p[1].start - p[1].stop, p[0], p[1].start)):
        b = min(range(shards), key=lambda b: (loads[b], b))
        owned[b].append((i, part))
        loads[b] += part.stop - part.start
    return owned


def _candidates_of(rec, tunable, facts) -> tuple:
    """(representative, kept candidates) of a recorded key; (None, []) where none can be formed."""
    if tunable is None or tunable.workload is None:
        return None, []
    try:
        rep = keys.representative(keys.parse(rec.kernel, tunable.key, rec.key, facts, rec.observed),
                                  tunable.key, facts)
        return rep, tunable.candidates(facts, rep)[0]
    except NbxError:
        return None, []


@dataclass
class Coverage:
    certified: list = field(default_factory=list)   # (kernel, key, device class, compiler)
    missing: list = field(default_factory=list)     # (kernel, key, device class, compiler, why)


def coverage(key_records, *, tunables: dict, certificates: store.CertificateStore, identity_of) -> Coverage:
    """Which recorded keys have a certified setting; identity_of(record) names its class and compiler."""
    result = Coverage()
    for rec in records.merge(key_records):
        ident = identity_of(rec)
        tunable = tunables.get(rec.kernel)
        if tunable is None:
            result.missing.append((rec.kernel, rec.key, ident.device_class, ident.compiler,
                                   "no installed kernel declares it"))
            continue
        if rec.key in certificates.entries(ident, tunable):
            result.certified.append((rec.kernel, rec.key, ident.device_class, ident.compiler))
        else:
            result.missing.append((rec.kernel, rec.key, ident.device_class, ident.compiler, "not certified"))
    return result
