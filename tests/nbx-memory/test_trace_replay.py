"""Traces: the TSV format, the pool's recorder, and simulate replaying the shipped trace."""
import random
import subprocess
import sys
from pathlib import Path

import pytest

from nbx.core.errors import FileFormatError
from nbx.memory.fakes import FakeDevice, FakeStreams
from nbx.memory.pool import NBX, Pool, simulate
from nbx.memory.rules import NO_HALF_RULE, ONE_CLASS, TORCH_LIKE
from nbx.memory.trace import (Trace, TraceEvent, TraceRecorder, format_trace, parse_trace, read_trace,
                              shipped_trace, shipped_traces, write_trace)

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
SHIPPED = "synthetic_decode_qwen2.5-0.5b_shapes.tsv"


@pytest.fixture(scope="module")
def decode():
    return shipped_trace(SHIPPED)


def test_a_trace_survives_writing_and_reading(tmp_path):
    trace = Trace([TraceEvent("alloc", 100, 0, 1, 5), TraceEvent("record", 0, 1, 1, 6),
                   TraceEvent("sync", 0, 0, 0, 7), TraceEvent("free", 100, 0, 1, 9)], {"source": "a test"})
    write_trace(tmp_path / "t.tsv", trace)
    assert read_trace(tmp_path / "t.tsv") == trace
    assert format_trace(trace).startswith("# nbx allocation trace v1\n# source: a test\nevent\tbytes")


@pytest.mark.parametrize("text, message", [
    ("alloc\t1\t0\t1\t0\n", "column line must be"),
    ("# only comments\n", "no column line"),
    ("event\tbytes\tstream\tblock\ttime_ns\nmalloc\t1\t0\t1\t0\n", "expected 5 tab-separated cells"),
    ("event\tbytes\tstream\tblock\ttime_ns\nalloc\tx\t0\t1\t0\n", "must be integers"),
    ("event\tbytes\tstream\tblock\ttime_ns\nfree\t8\t0\t1\t0\n", "which is not live with that size"),
    ("event\tbytes\tstream\tblock\ttime_ns\nalloc\t8\t0\t1\t0\nalloc\t8\t0\t1\t0\n", "allocated while live"),
    ("event\tbytes\tstream\tblock\ttime_ns\nrecord\t0\t1\t4\t0\n", "record_stream of block 4"),
])
def test_a_malformed_trace_is_refused_with_its_line(text, message):
    with pytest.raises(FileFormatError, match=message):
        parse_trace(text, "t.tsv")


def test_the_recorder_sees_what_the_pool_serves_and_simulate_reproduces_its_figures():
    device, streams = FakeDevice(), FakeStreams()
    pool = Pool(device.segments, NBX, parked_fraction=1.0, events=streams, synchronize=streams.synchronize)
    pool.recorder = recorder = TraceRecorder(source="a test")
    rnd = random.Random(7)
    live = []
    for _ in range(600):
        if live and rnd.random() < 0.45:
            live.pop(rnd.randrange(len(live))).release()
        else:
            size = rnd.choice([rnd.randint(1, 4096), rnd.randint(4096, MiB), rnd.randint(MiB, 30 * MiB)])
            live.append(pool.allocate(size, stream=rnd.choice("ab")))
            if rnd.random() < 0.1:
                pool.record_stream(live[-1], "copy")
        if rnd.random() < 0.05:
            streams.complete_all()
            recorder.sync()
    trace = recorder.trace()
    assert [e.event for e in trace.events].count("alloc") == pool.stats().allocations
    report = simulate(parse_trace(format_trace(trace)), NBX)
    stats = pool.stats()
    assert report.completed and report.stats.allocations == stats.allocations
    assert (report.reserved_peak, report.allocated_peak) == (stats.reserved_peak, stats.allocated_peak)
    assert report.live_peak == stats.requested_peak


def test_the_shipped_trace_is_named_synthetic_and_is_what_its_generator_writes(decode):
    assert SHIPPED in shipped_traces()
    assert decode.meta["source"].startswith("SYNTHETIC")
    done = subprocess.run([sys.executable, str(ROOT / "tools/bench/memory_synthetic_trace.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_simulate_reports_reserved_at_peak_against_live_at_peak(decode):
    report = simulate(decode, NBX)
    assert report.completed and report.events == len(decode)
    assert report.live_peak == decode.live_peak
    assert report.live_peak <= report.allocated_peak <= report.reserved_peak
    assert report.overhead == report.reserved_peak / report.live_peak
    freed = {e.block for e in decode.events if e.event == "free"}
    weights = [e.nbytes for e in decode.events if e.event == "alloc" and e.block not in freed]
    assert report.stats.allocated == sum(NBX.round(n) for n in weights)  # only the weights stay live
    assert "reserved at peak" in report.line()


def test_simulate_refuses_what_is_not_a_trace():
    with pytest.raises(FileFormatError, match="simulate needs a Trace"):
        simulate(42, NBX)


def test_on_a_tight_card_only_the_nbx_rules_complete_the_shipped_trace(decode):
    # The rules were chosen on this: at 1400 MiB (1.078 x the live peak) the half rule completes the
    # run; without it, or with torch's 20 MiB growth, or with one class, a large block is refused.
    capacity = 1400 * MiB
    assert simulate(decode, NBX, capacity=capacity).completed
    for rules in (NO_HALF_RULE, TORCH_LIKE, ONE_CLASS):
        report = simulate(decode, rules, capacity=capacity)
        assert not report.completed and report.error.total == capacity, rules.name


def test_the_expandable_range_holds_less_than_driver_segments_on_the_shipped_trace(decode):
    segments = simulate(decode, NBX)
    ranged = simulate(decode, NBX, vmm_chunk=32 * MiB)
    assert ranged.completed and ranged.reserved_peak < segments.reserved_peak
    assert ranged.overhead < 1.07
    assert simulate(decode, NBX, capacity=1328 * MiB, vmm_chunk=32 * MiB).completed  # where segments fail
    assert not simulate(decode, NBX, capacity=1328 * MiB).completed


def test_nbx_rules_hold_no_more_than_torchs_allocator_did_on_the_h200_trace():
    # torch 2.11's default caching allocator replaying this trace on the H200: 1.0538 x live at peak
    trace = shipped_trace("h200_decode_llama1b_shapes.2026-11-29.tsv")
    report = simulate(trace, NBX)
    assert report.completed and report.overhead <= 1.0538
    assert simulate(trace, NBX, capacity=3622 * MiB).completed  # a card 1.017 x live still completes it
