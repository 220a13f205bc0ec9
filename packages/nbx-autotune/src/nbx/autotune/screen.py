"""The correctness screen: every candidate against the float64 oracle before anything is timed.

Each candidate runs on the key's representative launch with its output pre-filled with NaN, so a
position the kernel never writes shows up as a disagreement on finiteness (deviation infinite). An
integer or bool output has no NaN: it is filled twice, with two different values, and each run must
match the oracle exactly, so a position left unwritten cannot match both times. The deviation is
nbx.core.reference.deviation, max|out - ref| / max|ref|; the tolerance is the device file's
`autotune.screen_tolerance` for the output's dtype, and a missing one refuses the screen by name.
An output larger than `autotune.screen_max_bytes` is compared on three windows of rows (first,
middle, last). A candidate that fails, or whose launch raises, is excluded: it is never served.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from math import prod
from typing import Protocol

import numpy as np
from nbx.core import dtypes
from nbx.core.dtypes import DType
from nbx.core.errors import MissingFactError, ScreenRefusal
from nbx.core.reference import deviation as oracle_deviation

EXACT_KINDS = ("bool", "int", "uint")


class Workload(Protocol):
    """One representative launch of a kernel: its output, its launch per setting, its oracle."""

    out_dtype: DType
    out_shape: tuple[int, ...]

    def fill_output(self, value) -> None: ...
    def launch(self, setting: Mapping) -> None: ...
    def output_rows(self, rows: slice) -> np.ndarray: ...      # a host copy of out[rows]
    def reference_rows(self, rows: slice) -> np.ndarray: ...   # the float64 oracle of out[rows]


@dataclass
class TensorWorkload:
    """A Workload over an nbx Tensor output: `run(setting)` launches into `out`, `reference(rows)` is the oracle."""

    out: object
    run: Callable[[Mapping], None]
    reference: Callable[[slice], np.ndarray]

    @property
    def out_dtype(self) -> DType:
        return self.out.dtype

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.out.shape)

    def fill_output(self, value) -> None:
        # the backend's own fill (a memset on cuda): a kernel's fill compiles a specialization of its own per
        # dtype and size kind the screens meet, which no launch of the run reuses. A fill ignores element
        # order, so a permuted output (conv's and prefill's lead with their rows) is filled in its storage's
        # order: dense, where the backend's fill of the view itself would copy through a dense buffer
        from nbx.core.dispatch import backend_implementation
        out = self.out
        dense = out.permute(*sorted(range(out.ndim), key=lambda d: -out.strides[d]))
        backend_implementation("fill_", out.device)(dense if dense.is_contiguous() else out, value)

    def launch(self, setting: Mapping) -> None:
        self.run(setting)

    def output_rows(self, rows: slice) -> np.ndarray:
        return (self.out[rows] if self.out.ndim else self.out).numpy()

    def reference_rows(self, rows: slice) -> np.ndarray:
        return self.reference(rows)


_KEPT: dict = {}   # owner -> (key, arrays): the host inputs last drawn for it, while a scope is open
_SCOPES = [0]      # how many keeping_inputs scopes are open (nested: a sweep inside a certification)


@contextmanager
def keeping_inputs():
    """While open, kept_inputs keeps what it draws; when the outermost scope closes, every kept set
    goes. A certification, a compile-ahead shard, a warm-up and each sweep (sweep.prove) open one,
    so a run-time sweep of a MoE key holds that layer's host weights for the sweep only."""
    _SCOPES[0] += 1
    try:
        yield
    finally:
        _SCOPES[0] -= 1
        if not _SCOPES[0]:
            _KEPT.clear()


def kept_inputs(owner: str, key: tuple, draw: Callable[[], tuple]) -> tuple:
    """The host arrays draw() makes for key (made read-only), kept for the next workload of owner
    (a tunable, a family) that asks for the same key inside the same keeping_inputs scope: a
    certification screens a layer's keys one after another (Mixtral's expert weights, 1.4 G
    normals, took seconds to draw each time). One set an owner is kept, so the memo holds no more
    than the largest set a family draws; outside any scope nothing is kept."""
    held = _KEPT.get(owner)
    if held is None or held[0] != key:
        _KEPT.pop(owner, None)   # the old set goes before the new one is drawn: never two in memory
        arrays = tuple(draw())
        for array in arrays:
            array.flags.writeable = False
        if not _SCOPES[0]:
            return arrays
        _KEPT[owner] = held = (key, arrays)
    return held[1]


def forget_inputs() -> None:
    """Drop every kept input set (autotune.reset)."""
    _KEPT.clear()


@dataclass(frozen=True)
class Verdict:
    setting: dict
    deviation: float | None   # None: the launch raised
    passed: bool
    reason: str


@dataclass(frozen=True)
class ScreenResult:
    dtype: str
    tolerance: float
    windows: tuple[tuple[int, int], ...]
    verdicts: tuple[Verdict, ...]

    @property
    def passed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.passed]

    @property
    def excluded(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.passed]


def tolerance(facts, dtype: DType) -> float:
    """The screen's bound for an output dtype; refused by name when the device file states none."""
    where = getattr(facts, "name", "the device file")
    try:
        table = facts.value("autotune.screen_tolerance")
    except MissingFactError as exc:
        raise ScreenRefusal(f"the screen of a {dtype.name} output needs autotune.screen_tolerance, which "
                            f"{where} does not state; nbx invents no tolerance: {exc}") from exc
    if dtype.name not in table:
        raise ScreenRefusal(f"autotune.screen_tolerance of {where} states no tolerance for {dtype.name}; "
                            f"nbx invents no tolerance")
    value = table[dtype.name]
    if dtype.kind in EXACT_KINDS and value != 0:
        raise ScreenRefusal(f"autotune.screen_tolerance.{dtype.name} of {where} is {value!r}; a {dtype.kind} "
                            f"output is compared exactly, so its tolerance is 0")
    return float(value)


def windows(shape: tuple[int, ...], itemsize: int, max_bytes: int) -> list[slice]:
    """Rows to compare: all of them, or first, middle and last windows of at most max_bytes in all."""
    if not shape:
        return [slice(None)]
    rows = shape[0]
    row_bytes = prod(shape[1:]) * itemsize
    if rows * row_bytes <= max_bytes:
        return [slice(0, rows)]
    width = max(1, max_bytes // (3 * max(row_bytes, 1)))
    starts = sorted({0, max(0, rows // 2 - width // 2), rows - width})
    spans: list[list[int]] = []
    for start in starts:
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], start + width)
        else:
            spans.append([start, start + width])
    return [slice(a, b) for a, b in spans]


def fills(dtype: DType) -> tuple:
    """What the output is filled with before a candidate runs: NaN, or two distinct integers."""
    if dtype.kind == "bool":
        return (True, False)
    if dtype.kind in ("int", "uint"):
        info = np.iinfo(dtype.host)
        return (int(info.max), int(info.min))
    return (complex("nan+nanj"),) if dtype.kind == "complex" else (float("nan"),)


def run(workload: Workload, settings: list[dict], facts, max_bytes_fact: str = "autotune.screen_max_bytes"
        ) -> ScreenResult:
    """Screen each setting on the workload; the verdicts in the order given. max_bytes_fact: the device
    fact bounding the rows compared (a neighbour's check reads autotune.neighbour_screen_max_bytes)."""
    dtype = dtypes.as_dtype(workload.out_dtype)
    bound = tolerance(facts, dtype)
    exact = dtype.kind in EXACT_KINDS
    spans = windows(tuple(workload.out_shape), dtype.itemsize, facts.value(max_bytes_fact))
    references = [np.asarray(workload.reference_rows(rows)) for rows in spans]
    verdicts = []
    for setting in settings:
        verdicts.append(_judge(workload, setting, spans, references, fills(dtype), exact, bound))
    span_pairs = tuple((0, 1) if s.start is None else (s.start, s.stop) for s in spans)
    return ScreenResult(dtype.name, bound, span_pairs, tuple(verdicts))


def _judge(workload, setting, spans, references, fill_values, exact, bound) -> Verdict:
    worst = 0.0
    for fill in fill_values:
        workload.fill_output(fill)
        try:
            workload.launch(setting)
        except Exception as exc:  # a candidate that does not compile or launch is excluded, with why
            return Verdict(dict(setting), None, False, f"launch failed: {type(exc).__name__}: {exc}")
        for rows, ref in zip(spans, references, strict=True):
            out = np.asarray(workload.output_rows(rows))
            if out.shape != ref.shape:
                return Verdict(dict(setting), float("inf"), False,
                               f"output rows of shape {out.shape}, the oracle's {ref.shape}")
            # an exact output equal to its oracle deviates by 0: its float64 deviation (a dozen passes
            # over float64 copies, seconds for a 256 MiB output a candidate) is worked out only for a mismatch
            if exact and np.array_equal(out, ref):
                continue
            dev = oracle_deviation(out, ref)
            worst = max(worst, dev)
            if exact:
                return Verdict(dict(setting), worst if worst > 0 else float("inf"), False,
                               f"an exact ({out.dtype}) output differs from the oracle (filled with {fill!r})")
    if worst > bound:
        return Verdict(dict(setting), worst, False, f"deviation {worst:.3g} above the tolerance {bound:.3g}")
    return Verdict(dict(setting), worst, True, "passed")


def require_pass(result: ScreenResult, kernel: str, key: str) -> list[Verdict]:
    """The passing verdicts; none passing refuses the key by name with every candidate's deviation."""
    passed = result.passed
    if passed:
        return passed
    lines = "; ".join(f"{v.setting}: {v.reason}" for v in result.verdicts) or "no candidate survived pruning"
    raise ScreenRefusal(f"kernel {kernel!r} key {key!r}: no candidate passed the screen ({result.dtype}, "
                        f"tolerance {result.tolerance:.3g}): {lines}")
