"""Proving one launch key: prune, screen against the oracle, time the survivors, keep the fastest.

The certifier and a first-use sweep at run time both call `prove`, so a setting kept locally has
passed the same screen and timing a certified one has, and carries the same proof.
"""
from __future__ import annotations

import datetime
import math
import platform
from collections.abc import Mapping

from nbx.core.dtypes import DType
from nbx.core.errors import ArgumentError, ScreenRefusal, WitnessDriftError

from . import keys, screen, timing
from .store import Entry


def _number(value):
    if value is None:
        return None
    return "inf" if math.isinf(value) else float(value)


def _plain(rep: Mapping) -> dict:
    return {k: (v.name if isinstance(v, DType) else v) for k, v in rep.items()}


def prove(tunable, key: keys.LaunchKey, facts, device, timer, *, warmup: int = timing.WARMUP,
          repeats: int = timing.REPEATS, retries: int = 1, allow_drift: bool = False) -> Entry:
    """The fastest setting that passes the screen for key, with its proof; refused by name otherwise.

    allow_drift: a witness that drifted in every attempt yields the last attempt's fastest setting
    (its proof shows the drift, so no store accepts it) instead of a WitnessDriftError.
    """
    if tunable.workload is None:
        raise ArgumentError(f"kernel {tunable.name!r} declares no workload, so no candidate can be screened")
    rep = keys.representative(key, tunable.key, facts)
    kept, pruned = tunable.candidates(facts, rep)
    if not kept:
        reasons = "; ".join(f"{s}: {why}" for s, why in pruned)
        raise ScreenRefusal(f"kernel {tunable.name!r} key {str(key)!r}: every candidate was pruned by the "
                            f"device's facts: {reasons}")
    with screen.keeping_inputs():   # a run-time sweep's kept host inputs go with it; a certification keeps them
        work = tunable.workload(rep, device)
        result = screen.run(work, kept, facts)
        passed = screen.require_pass(result, tunable.name, str(key))
        try:
            comparison = timing.compare([v.setting for v in passed], work.launch, timer,
                                        timing.drift_tolerance(facts), warmup, repeats, retries)
        except WitnessDriftError as exc:
            if not allow_drift:
                raise
            comparison = exc.last
    ranked = comparison.ranked
    best_setting, best = ranked[0]
    deviation = next(v.deviation for v in passed if v.setting == best_setting)
    default = tunable.default(facts) if tunable.default_from else None
    default_ms = next((m.median_ms for s, m in comparison.times if s == default), None)
    proof = {
        "deviation": float(deviation),
        "tolerance": result.tolerance,
        "dtype": result.dtype,
        "best_ms": best.median_ms,
        "second_ms": ranked[1][1].median_ms if len(ranked) > 1 else None,
        "default_ms": default_ms,
        "candidates_tried": len(kept),
        "pruned": len(pruned),
        "excluded": [{"setting": v.setting, "deviation": _number(v.deviation), "reason": v.reason}
                     for v in result.excluded],
        "witness": {"name": comparison.witness_name, "before_ms": comparison.before_ms,
                    "after_ms": comparison.after_ms, "drift": comparison.drift, "tolerance": comparison.tolerance},
        "clocks": timer.clocks(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.node()}; {timer.description}",
        "nbx_version": _version(),
        "representative": _plain(rep),
        "timing": {"warmup": comparison.warmup, "repeats": comparison.repeats,
                   "flush_bytes": comparison.flush_bytes, "flush": comparison.flush_method, "attempts": comparison.attempts,
                   "held_ms": max(m.held_ms for _, m in comparison.times),
                   "host_bound": any(m.host_bound for _, m in comparison.times)},
        "windows": [list(w) for w in result.windows],
    }
    return Entry(dict(best_setting), proof)


def _version() -> str:
    from .version import __version__
    return __version__
