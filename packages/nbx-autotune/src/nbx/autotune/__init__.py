"""nbx.autotune: certified kernel settings.

A kernel declares what it tunes (`Tunable`), and its wrapper asks `setting(tunable, device, **key)`
at each launch: the certified setting of the launch key, else the local cache's, else the setting
of its nearest certified neighbour, screened against the float64 oracle on the key's own launch
(a sweep, timed here and kept locally, only when asked: sweep_uncertified()). The `nbx
autotune` command records keys, certifies them, checks certificate files and reports coverage.
docs/autotune.md describes the method and how a kernel family adopts it.
"""
from __future__ import annotations

from .candidates import Tunable, all_of, declare, declared, lookup, registers, shared_memory
from .device_class import Identity
from .keys import LaunchKey
from .keys import form as form_key
from .screen import TensorWorkload, Workload, keeping_inputs, kept_inputs
from .serving import (
    AutotuneWarning,
    Tuner,
    certified_only,
    install,
    load_census,
    print_report,
    report_at_exit,
    report_line,
    require_certified,
    reset,
    setting,
    sweep_uncertified,
    sweeps_asked,
)
from .store import add_tree as add_certificate_dir
from .version import __version__

from nbx.core import services as _services

_services.provide("autotune_report", report_line)  # nbx.models prints it without importing nbx.autotune

__all__ = [
    "Tunable", "declare", "declared", "lookup", "shared_memory", "registers", "all_of", "Identity",
    "LaunchKey", "form_key", "TensorWorkload", "Workload", "kept_inputs", "keeping_inputs", "AutotuneWarning", "Tuner", "setting",
    "certified_only", "require_certified", "load_census", "report_line", "print_report", "report_at_exit",
    "install", "reset", "add_certificate_dir", "sweep_uncertified", "sweeps_asked", "__version__",
]
