"""Serving settings at launch: certified first, then the local cache, then a certified neighbour's setting.

    cfg = nbx.autotune.setting(ELEMENTWISE, device, n=n, dtype=out.dtype, dense=True)
    kernel[grid](..., BLOCK=cfg["block"], num_warps=cfg["num_warps"])

A key is resolved once per process (then a dict lookup). Certified-only mode
(NBX_AUTOTUNE_CERTIFIED_ONLY=1, or require_certified()) turns a key with no certified setting, or a
key that cannot be formed, into KeyNotCertified naming the kernel, the key and whether the census
(NBX_AUTOTUNE_CENSUS=<keys file>, or load_census()) knew it. A device whose file states
`autotune.sweeps: false` (Triton's interpreter) is served the device file's tile, no key formed.

Every run can print its report line (report_line()); NBX_AUTOTUNE_REPORT=1 prints it at exit, with the
kernels Triton compiled and each kernel compiled again for another specialization (warmup.CompileLog):
    [autotune] certified: N key(s) served without a sweep, M swept at runtime (kept locally), K from the local cache, J from a neighbour
A key with neither is served the setting of its nearest certified neighbour, screened first against
the float64 oracle on the key's own smallest launch (neighbours.py; its verdict is kept in the local
cache, so a later process reads it instead of screening again: verdicts.py); it is swept (timed here, kept
locally) only when asked: sweep_uncertified(), NBX_AUTOTUNE_SWEEP=1, or `nbx autotune sweep`.
NBX_AUTOTUNE_RECORD=<keys file> writes every key the run formed into that file at exit;
NBX_AUTOTUNE_NO_SWEEP=1 (set by `nbx autotune record`) serves a key with neither a certified nor a
local setting the device file's tile instead of sweeping it, and the report says how many.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import warnings
from pathlib import Path
from types import MappingProxyType

from nbx.core import device_files, dispatch
from nbx.core.device import as_device
from nbx.core.errors import CertificateError, KeyNotCertified, LaunchKeyError

from . import device_class, keys, neighbours, records, store, sweep, timing, verdicts

ENV_CERTIFIED_ONLY = "NBX_AUTOTUNE_CERTIFIED_ONLY"
ENV_REPORT = "NBX_AUTOTUNE_REPORT"
ENV_RECORD = "NBX_AUTOTUNE_RECORD"
ENV_CENSUS = "NBX_AUTOTUNE_CENSUS"
ENV_CACHE = "NBX_CACHE_DIR"
ENV_NO_SWEEP = "NBX_AUTOTUNE_NO_SWEEP"  # `nbx autotune record` sets it: keys are listed, not swept
ENV_SWEEP = "NBX_AUTOTUNE_SWEEP"        # `nbx autotune record --sweep` sets it for its command


class AutotuneWarning(UserWarning):
    """A refused certificate file, a local cache that cannot be written, a sweep under a drifting witness."""


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    """The local cache of swept settings: $NBX_CACHE_DIR/autotune, else the platform's user cache folder."""
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE]) / "autotune"
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "nbx" / "Cache"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches" / "nbx"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nbx"
    return base / "autotune"


class Report:
    """Where this run's settings came from, counted once per key, and the certificate files refused."""

    def __init__(self):
        self.certified = self.swept = self.local = self.defaults = self.unkept = 0
        self.neighbour = self.untuned = self.neighbours_refused = 0
        self.from_neighbour: dict = {}   # (kernel, key) -> the certified key whose setting serves it
        self.stores: list[store.CertificateStore] = []
        self._lock = threading.Lock()

    def count(self, source: str) -> None:
        with self._lock:
            setattr(self, source, getattr(self, source) + 1)

    def line(self) -> str:
        text = (f"[autotune] certified: {self.certified} key(s) served without a sweep, {self.swept} swept at "
                f"runtime (kept locally), {self.local} from the local cache, {self.neighbour} from a neighbour")
        for (device_class_, compiler), others in sorted(self.other_compilers().items()):
            text += (f"; no certificates for the installed compiler {compiler} on {device_class_} (they are "
                     f"for {', '.join(sorted(others))}): each key takes the device file's setting after an "
                     f"oracle check, or is refused in certified-only mode")
        return text

    def other_compilers(self) -> dict[tuple[str, str], set[str]]:
        merged: dict[tuple[str, str], set[str]] = {}
        for s in self.stores:
            for where, others in s.other_compilers.items():
                merged.setdefault(where, set()).update(others)
        return merged

    def refusals(self) -> list[store.Refusal]:
        seen = []
        for s in self.stores:
            seen += [r for r in s.refusals if r not in seen]
        return seen

    def lines(self) -> list[str]:
        out = [self.line()]
        if self.defaults:
            out.append(f"[autotune] {self.defaults} key(s) took the device file's tile without a sweep "
                       f"(a device that does not sweep, or {ENV_NO_SWEEP}=1 while recording)")
        if self.untuned:
            out.append(f"[autotune] {self.untuned} key(s) had no certified neighbour that passed their screen and "
                       f"took the device file's tile, screened alike")
        if self.neighbours_refused:
            out.append(f"[autotune] {self.neighbours_refused} neighbour setting(s) failed a key's screen against "
                       f"the float64 oracle and were not served")
        if self.unkept:
            out.append(f"[autotune] {self.unkept} of the swept key(s) were timed under a drifting witness: served "
                       f"this run, not kept")
        out += [f"[autotune] refused {r}" for r in self.refusals()]
        from .warmup import installed_log
        log = installed_log()
        if log is not None:   # the compiles and each recompile, when a report was asked for (report_at_exit)
            out += log.report_lines()
        return out


class _Process:
    """What one process shares: the mode, the census, the report, the recorder, a tuner per device."""

    def __init__(self):
        self.certified_only: bool | None = None   # None: read NBX_AUTOTUNE_CERTIFIED_ONLY
        self.sweeps: bool | None = None           # None: read NBX_AUTOTUNE_SWEEP
        self.census: set | None = None
        self.census_loaded_from_env = False
        self.report = Report()
        self.recorder = records.Recorder(os.environ[ENV_RECORD]) if os.environ.get(ENV_RECORD) else None
        self.tuners: dict = {}
        self.store = store.CertificateStore()
        self.lock = threading.Lock()


_process = _Process()
_screening = threading.local()  # .active while this thread screens a neighbour (see _resolve)


def certified_only() -> bool:
    mode = _process.certified_only
    return _truthy(ENV_CERTIFIED_ONLY) if mode is None else mode


def require_certified(on: bool = True) -> None:
    """Certified-only mode for this process (over NBX_AUTOTUNE_CERTIFIED_ONLY)."""
    _process.certified_only = bool(on)


def sweeps_asked() -> bool:
    mode = _process.sweeps
    return _truthy(ENV_SWEEP) if mode is None else mode


def sweep_uncertified(on: bool = True) -> None:
    """Sweep a key with neither a certified nor a local setting at first use (timed on this machine, kept
    locally) instead of serving it a certified neighbour's setting. Off unless asked."""
    _process.sweeps = bool(on)


def load_census(source) -> int:
    """The keys a census (or a recorded run) listed: a keys file's path, or KeyRecords. The count."""
    found = records.load(source) if isinstance(source, (str, os.PathLike)) else list(source)
    _process.census = {(r.kernel, r.key) for r in found}
    return len(_process.census)


def _census() -> set | None:
    if _process.census is None and not _process.census_loaded_from_env and os.environ.get(ENV_CENSUS):
        _process.census_loaded_from_env = True
        load_census(os.environ[ENV_CENSUS])
    return _process.census


def screening() -> bool:
    """Whether a neighbour's screen is running in this thread (the compile log counts its compiles)."""
    return bool(getattr(_screening, "active", False))


def report() -> Report:
    return _process.report


def report_line() -> str:
    return _process.report.line()


def print_report(file=None) -> None:
    for line in _process.report.lines():
        print(line, file=file or sys.stderr)


_at_exit = False


def report_at_exit(on: bool = True) -> None:
    """Print the report when the process exits (NBX_AUTOTUNE_REPORT=1 asks for it too), with the kernels
    Triton compiled and each one compiled again for another specialization (a quiet compile log)."""
    global _at_exit
    if on and not _at_exit:
        atexit.register(_print_at_exit)
    if on:
        try:
            from .warmup import log_compiles
            log_compiles(quiet=True)
        except ImportError:   # no Triton: nothing compiles
            pass
    _at_exit = on


def _print_at_exit() -> None:
    if _at_exit:
        print_report()


def _flush_recorder() -> None:
    if _process.recorder is not None:
        _process.recorder.flush()


def reset() -> None:
    """Forget every setting served, the mode, census, report and tuners (tests, long-lived servers)."""
    global _process
    _process = _Process()
    device_files.advance_generation()  # plans built from the settings served so far are stale
    from .screen import forget_inputs
    forget_inputs()


class Tuner:
    """Settings for one device: facts, identity (vendor, class, compiler), stores and timer."""

    def __init__(self, facts, identity=None, *, device=None, certificates=None, cache=None, timer_factory=None,
                 warmup: int = timing.WARMUP, repeats: int = timing.REPEATS):
        self.facts = facts
        self.device = device
        self.sweeps = bool(facts.value("autotune.sweeps"))
        self._identity = identity
        self.certificates = certificates if certificates is not None else _process.store
        self.cache = cache if cache is not None else store.CertificateStore(trees=[cache_dir()], packaged=False)
        self._timer_factory = timer_factory or (lambda: timing.timer_for(device))
        self._timer = None
        self.warmup, self.repeats = warmup, repeats
        self._memo: dict = {}
        self._defaults: dict = {}
        self._kept_verdicts = None
        self._parsed: dict = {}   # kernel -> (its certified entries, their count, neighbours.parsed of them)
        self._lock = threading.RLock()
        for s in (self.certificates, self.cache):
            if s not in _process.report.stores:
                _process.report.stores.append(s)

    @property
    def identity(self) -> device_class.Identity:
        if callable(self._identity):
            self._identity = self._identity()
        return self._identity

    def setting(self, tunable, **inputs):
        """The setting (a read-only mapping of the kernel's parameters) for this launch (inputs: the launch's
        own sizes; the key classes them and keeps them as key.observed, which a neighbour's screen runs)."""
        if not self.sweeps:
            found = self._defaults.get(tunable.name)
            if found is None:
                found = self._defaults[tunable.name] = MappingProxyType(tunable.default(self.facts))
                _process.report.count("defaults")
            return found
        try:
            key = keys.form(tunable.name, tunable.key_fields, self.facts, **inputs)
        except LaunchKeyError as exc:
            if certified_only():
                raise KeyNotCertified(f"kernel {tunable.name!r}: the launch key cannot be formed ({exc}); in "
                                      f"certified-only mode no sweep may run instead", kernel=tunable.name,
                                      key=None, census_knew=None) from exc
            raise
        if _process.recorder is not None:
            self._record(key)
        found = self._memo.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._memo.get(key)
            if found is None:
                found = self._memo[key] = self._resolve(tunable, key)
            return found

    def _record(self, key: keys.LaunchKey) -> None:
        ident = self.identity
        _process.recorder.add(records.KeyRecord(key.kernel, str(key), self.facts.name, ident.device_class,
                                                ident.compiler, dict(key.observed)))

    def _entries(self, which: store.CertificateStore, tunable) -> dict:
        before = len(which.refusals)
        found = which.entries(self.identity, tunable, self.facts)
        for refusal in which.refusals[before:]:
            warnings.warn(f"nbx.autotune refused {refusal}", AutotuneWarning, stacklevel=4)
        return found

    def _resolve(self, tunable, key: keys.LaunchKey):
        text = str(key)
        entry = self._entries(self.certificates, tunable).get(text)
        source = "certified"
        if entry is None and certified_only():
            raise self._not_certified(tunable, text)
        if entry is None:
            entry, source = self._entries(self.cache, tunable).get(text), "local"
        if entry is None and (_truthy(ENV_NO_SWEEP) or screening()):
            # inside a neighbour's screen, the launches that make its inputs (uploads, fills) take the
            # device file's tile: screening them too would recurse, key after key
            entry, source = store.Entry(tunable.default(self.facts), {}), "defaults"
        if entry is None and sweeps_asked():
            entry, source = self._sweep(tunable, key), "swept"
        if entry is None:
            entry, source = self._from_neighbour(tunable, key)
        _process.report.count(source)
        return MappingProxyType(dict(entry.setting))

    def _from_neighbour(self, tunable, key: keys.LaunchKey):
        """The nearest certified neighbour's setting that passes this key's screen; else the device file's
        tile, screened alike (neighbours.py). The screen's launches are the tuner's own: a step being
        recorded (nbx.core.graph) does not see them, and their own keys are not screened in turn."""
        _screening.active = True
        try:
            with dispatch.observed(None):
                kept, where = self._verdicts()
                certified = self._entries(self.certificates, tunable)
                known = self._parsed.get(tunable.name)
                if known is None or known[0] is not certified or known[1] != len(certified):
                    known = self._parsed[tunable.name] = (certified, len(certified),
                                                          neighbours.parsed(tunable, certified, self.facts))
                choice, screener = neighbours.choose(tunable, key, certified, self.facts, self.device, kept, where,
                                                     known[2])
                with _process.report._lock:
                    _process.report.neighbours_refused += sum(1 for _, why in choice.refused if "screen:" in why)
                if choice.entry is not None:
                    _process.report.from_neighbour[(tunable.name, str(key))] = choice.key
                    return choice.entry, "neighbour"
                return neighbours.default_checked(tunable, key, self.facts, screener), "untuned"
        finally:
            _screening.active = False

    def _verdicts(self) -> tuple[verdicts.VerdictCache, dict]:
        """The screen verdicts kept in the local cache for this device class and compiler, and what a verdict
        read from them must have been decided under (made once per tuner)."""
        if self._kept_verdicts is None:
            self._kept_verdicts = (verdicts.VerdictCache(verdicts.folder_for(self.cache, self.identity)),
                                   verdicts.context(self.facts, neighbours.MAX_BYTES_FACT))
        return self._kept_verdicts

    def _not_certified(self, tunable, text: str) -> KeyNotCertified:
        census = _census()
        knew = None if census is None else (tunable.name, text) in census
        note = {None: "no census loaded", True: "the census listed this key",
                False: "the census did not list this key"}[knew]
        ident = self.identity
        return KeyNotCertified(
            f"kernel {tunable.name!r} has no certified setting for key {text!r} on {ident.device_class} under "
            f"{ident.compiler} (certified-only mode; {note}); certify it: nbx autotune certify --device-class "
            f"{ident.device_class} --keys <a keys file listing it> --out <folder>",
            kernel=tunable.name, key=text, census_knew=knew)

    def _sweep(self, tunable, key: keys.LaunchKey) -> store.Entry:
        if self._timer is None:
            self._timer = self._timer_factory()
        entry = sweep.prove(tunable, key, self.facts, self.device, self._timer, warmup=self.warmup,
                            repeats=self.repeats, allow_drift=True)
        witness = entry.proof["witness"]
        if witness["drift"] > witness["tolerance"]:
            _process.report.count("unkept")
            warnings.warn(f"nbx.autotune: kernel {tunable.name!r} key {str(key)!r} was timed under a drifting "
                          f"witness ({witness['drift']:.3g} > {witness['tolerance']:.3g}); its fastest screened "
                          f"setting serves this run and is not kept", AutotuneWarning, stacklevel=5)
            return entry
        ident = self.identity
        target = None
        try:
            target = store.path_in(self.cache.writable_folder(ident.vendor), ident, tunable.name)
            store.write(target, store.header(tunable, ident), {str(key): entry}, tunable)
            self.cache.entries(ident, tunable, self.facts)[str(key)] = entry
        except (OSError, CertificateError) as exc:
            warnings.warn(f"nbx.autotune: the swept setting of kernel {tunable.name!r} key {str(key)!r} serves "
                          f"this run but cannot be kept in {target or 'the local cache'}: {exc}", AutotuneWarning,
                          stacklevel=5)
        return entry


def tuner(device) -> Tuner:
    """The tuner of a device (made at first use from its device file and its backend)."""
    found = _process.tuners.get(device)
    if found is not None:
        return found
    dev = as_device(device)
    with _process.lock:
        found = _process.tuners.get(dev)
        if found is None:
            found = Tuner(device_files.in_force(dev), lambda: device_class.identify(dev), device=dev)
            _process.tuners[dev] = found
        _process.tuners[device] = found
    return found


def install(device, tuner_: Tuner) -> None:
    """Serve launches naming `device` (as given: a Device or a string) through a given tuner
    (an application with its own stores or timer; tests)."""
    _process.tuners[device] = tuner_


def setting(tunable, device, **inputs):
    """The kernel's setting for this launch on device: certified, from the local cache, a certified
    neighbour's (screened on this key: on the launch itself, key.observed, where the tunable says so), or
    swept once when asked."""
    return tuner(device).setting(tunable, **inputs)


if _truthy(ENV_REPORT):
    report_at_exit(True)
atexit.register(_flush_recorder)
