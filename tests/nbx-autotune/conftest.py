"""Fakes for nbx.autotune's CPU tests: a numpy kernel with a wrong candidate, a virtual clock, facts overlays.

The fake kernel doubles its input block by block. Its grid is n // block (a floor where a ceiling
belongs), so a block that does not divide the launch leaves the tail unwritten: the candidate
block=100 is wrong, and the fake timings make it the fastest, so a screen that ranked on speed alone
would serve it.
"""
from __future__ import annotations

import types

import numpy as np
import pytest
from nbx.autotune import serving
from nbx.autotune.candidates import Tunable
from nbx.autotune.device_class import Identity
from nbx.autotune.timing import Witness
from nbx.core import device_files, dtypes
from nbx.core.errors import MissingFactError

WRONG_BLOCK = 100
BLOCK_MS = {64: 0.50, 128: 0.30, WRONG_BLOCK: 0.05}
IDENTITY = Identity("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda")
ABSENT = object()


class Clock:
    def __init__(self):
        self.now = 0.0
        self.launches = 0

    def advance(self, ms: float) -> None:
        self.now += ms


class FakeTimer:
    """Events read the virtual clock; the witness costs witness_ms(launches so far)."""

    description = "a virtual clock"
    flush_bytes = 100 << 20
    flush_method = "counted"

    def __init__(self, clock: Clock, witness_ms=lambda launches: 1.0):
        self.clock = clock
        self.witness_ms = witness_ms
        self.flushes = 0
        self.holds = []

    def event(self):
        return [None]

    def record(self, event) -> None:
        event[0] = self.clock.now

    def elapsed_ms(self, start, end) -> float:
        return end[0] - start[0]

    def synchronize(self) -> None:
        pass

    def flush_l2(self) -> None:
        self.flushes += 1

    def hold(self, ms: float) -> None:
        self.holds.append(ms)

    def witness(self) -> Witness:
        return Witness("fake witness", lambda: self.clock.advance(self.witness_ms(self.clock.launches)))

    def clocks(self):
        return None


def fake_kernel(x: np.ndarray, out: np.ndarray, block: int) -> None:
    """Each of the grid's programs doubles one block; all of them at once here, as numpy slices."""
    grid = x.size // block  # the bug: a floor where a ceiling (cdiv) belongs
    out[:grid * block] = x[:grid * block] * 2


class FakeWorkload:
    def __init__(self, rep, clock: Clock, block_ms: dict):
        n, dtype = rep["n"], rep["dtype"]
        self.out_dtype, self.out_shape = dtype, (n,)
        self.x = (np.arange(n) % 97 - 48).astype(dtype.host)
        self.out = np.empty(n, dtype.host)
        self.clock, self.block_ms = clock, block_ms
        self.reference_calls = []

    def fill_output(self, value) -> None:
        self.out[...] = value

    def launch(self, setting) -> None:
        fake_kernel(self.x, self.out, setting["block"])
        self.clock.launches += 1
        self.clock.advance(self.block_ms[setting["block"]] + 0.01 * setting["num_warps"])

    def output_rows(self, rows):
        return self.out[rows].copy()

    def reference_rows(self, rows):
        self.reference_calls.append(rows)
        return self.x[rows].astype(np.float64) * 2


def make_tunable(clock: Clock, name: str = "fake_scale", block_ms=None, **overrides) -> Tunable:
    block_ms = dict(BLOCK_MS if block_ms is None else block_ms)
    spec = dict(name=name, params={"block": tuple(block_ms), "num_warps": (1, 2)},
                key={"n": "elements", "dtype": "dtype"},
                workload=lambda rep, device: FakeWorkload(rep, clock, block_ms))
    spec.update(overrides)
    return Tunable(**spec)


class Overlay:
    """Real device facts with some keys replaced (or made ABSENT)."""

    def __init__(self, base, **values):
        self.base, self.name = base, base.name
        self.values = {k.replace("__", "."): v for k, v in values.items()}

    def value(self, key):
        if key in self.values:
            if self.values[key] is ABSENT:
                raise MissingFactError(f"device fact {key!r} is not stated (overlay)")
            return self.values[key]
        return self.base.value(key)

    def __contains__(self, key):
        try:
            self.value(key)
        except MissingFactError:
            return False
        return True


@pytest.fixture
def fakes():
    return types.SimpleNamespace(Clock=Clock, FakeTimer=FakeTimer, make_tunable=make_tunable, Overlay=Overlay,
                                 ABSENT=ABSENT, IDENTITY=IDENTITY, WRONG_BLOCK=WRONG_BLOCK, BLOCK_MS=BLOCK_MS, dtypes=dtypes,
                                 FakeWorkload=FakeWorkload)


@pytest.fixture
def hopper():
    return device_files.for_arch("sm_90")


@pytest.fixture(autouse=True)
def clean_autotune_state(monkeypatch, tmp_path):
    """Each test starts with no mode, census, report or tuner, and a private local cache folder."""
    for name in ("NBX_AUTOTUNE_CERTIFIED_ONLY", "NBX_AUTOTUNE_REPORT", "NBX_AUTOTUNE_RECORD",
                 "NBX_AUTOTUNE_CENSUS", "NBX_AUTOTUNE_CERTIFICATES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NBX_CACHE_DIR", str(tmp_path / "user-cache"))
    serving.reset()
    yield
    serving.reset()
