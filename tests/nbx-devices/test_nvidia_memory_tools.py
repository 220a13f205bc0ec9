"""The GPU memory tools run end to end before the GPU machine sees them: tools/measure_vmm_chunk.py and
tools/bench/memory_vs_torch.py on the simulated CUDA of test_nvidia_memory_adapters.py (the bench's
peer is a stand-in torch module here, in this process and in its child), tools/record_trace.py's
recording on the simulated CUDA and its decode workload on the Triton interpreter."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from nbx.core.device import Device
from nbx.memory import allocator
from nbx.memory.fakes import FakeDevice
from nbx.memory.pool import NBX, Pool
from nbx.memory.trace import TraceRecorder, read_trace, write_trace

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


adapters = _load(Path(__file__).with_name("test_nvidia_memory_adapters.py"), "nvidia_memory_adapter_fakes")
cuda = adapters.cuda  # the simulated-CUDA fixture


def tool(relative: str):
    return _load(ROOT / relative, Path(relative).stem + "_under_test")


# ---- tools/measure_vmm_chunk.py -----------------------------------------------------------------
def test_the_vmm_chunk_is_the_smallest_size_whose_growth_costs_no_more_than_cudaMalloc():
    m = tool("tools/measure_vmm_chunk.py")
    rows = [(2 * MiB, 30.0, 10.0, 5, 5), (4 * MiB, 31.0, 30.5, 5, 5), (8 * MiB, 33.0, 40.0, 5, 5),
            (16 * MiB, 35.0, 20.0, 5, 5)]
    assert m.choose(rows) == (8 * MiB, 33.0, 40.0)
    assert m.choose(rows[:2]) is None


def test_measure_vmm_chunk_times_every_size_gives_everything_back_and_prints_a_yaml_fact(cuda, capsys, monkeypatch):
    m = tool("tools/measure_vmm_chunk.py")
    drv = cuda.driver
    monkeypatch.setattr(m, "choose", lambda rows: (rows[1][0], 1.0, 2.0))  # the simulated timings mean nothing
    assert m.main(["--repeats", "3", "--max-mib", "16"]) == 0
    out = capsys.readouterr().out
    assert drv.held == 0 and drv.mapped == {} and drv.ranges == {} and cuda.used == 0
    assert drv.count("cuMemCreate") == 1 + 4 * 3  # the warm-up, then sizes 2, 4, 8, 16 MiB three times each
    fact = yaml.safe_load("\n".join(line for line in out.splitlines() if not line.startswith("#")))
    chunk = fact["memory"]["vmm"]["chunk_bytes"]
    assert chunk["value"] == 4 * MiB
    assert chunk["measured"].startswith("Simulated GPU, ")
    assert chunk["measured"].endswith(", tools/measure_vmm_chunk.py")
    assert "create+map+access" in out and "cudaMalloc" in out


# ---- tools/record_trace.py ----------------------------------------------------------------------
def test_the_decode_workload_runs_with_nbx_ops_on_the_interpreter_and_reads_the_host_after_every_step():
    pytest.importorskip("triton", reason="the interp device runs Triton's interpreter")
    import nbx.core as nbx
    rt = tool("tools/record_trace.py")
    syncs = []
    model, done = rt.run(rt.TINY, "interp", ((2, 8),), 1, on_sync=lambda: syncs.append(1))
    assert done == [(2, 8)] and len(syncs) == 2
    assert model.layers[0]["gate"].shape == (rt.TINY.hidden, rt.TINY.intermediate)
    assert nbx.zeros(1, device="interp").numpy().tolist() == [0.0]


def test_record_trace_records_the_device_pool_and_checks_simulate_reproduces_its_peaks(cuda, tmp_path, monkeypatch,
                                                                                      capsys):
    import nbx.core as nbx
    rt = tool("tools/record_trace.py")

    def workload(shapes, device, requests, steps, on_sync=None, budget_s=None):
        keep = [nbx.empty((3 * MiB,), dtype="uint8", device=device)]  # 'weights'
        for i in range(40):
            t = nbx.empty(((i % 7 + 1) * 100_000,), dtype="float32", device=device)
            if i % 3:
                keep.append(t)
            if i % 10 == 9:
                keep = keep[:1]
                if on_sync:
                    on_sync()
        return keep, list(requests)

    monkeypatch.setattr(rt, "run", workload)
    out = tmp_path / "trace.tsv"
    assert rt.main(["--out", str(out)]) == 0
    trace = read_trace(out)
    assert "no GEMM kernel yet" in trace.meta["emulated"] and "tools/record_trace.py" in trace.meta["source"]
    assert trace.meta["requests"] == ("batch 1 / prompt 512 + 8 decode steps, batch 16 / prompt 256 + 8 decode "
                                      "steps, batch 64 / prompt 128 + 8 decode steps")
    assert sum(e.event == "sync" for e in trace.events) == 4
    assert sum(e.event == "alloc" for e in trace.events) == 41
    printed = capsys.readouterr().out
    assert "(the same)" in printed and "memory summary: cuda:0" in printed
    assert allocator.get_allocator("cuda").pool(Device("cuda", 0)).recorder is None


# ---- tools/bench/memory_vs_torch.py -------------------------------------------------------------
FAKE_TORCH = '''
"""A stand-in for torch's CUDA allocator interface (tests of tools/bench/memory_vs_torch.py)."""
__version__ = "0.0-stand-in"
uint8 = "uint8"


class _Stream:
    def __init__(self):
        self.cuda_stream = 0


class _Cuda:
    def __init__(self):
        self.live, self.peak, self.next, self.sizes = 0, 0, 4096, {}

    def init(self):
        pass

    def current_stream(self, device=None):
        return _Stream()

    Stream = _Stream

    def caching_allocator_alloc(self, size, device=None, stream=None):
        ptr, self.next = self.next, self.next + size + 512
        self.sizes[ptr] = size
        self.live += size
        self.peak = max(self.peak, self.live)
        return ptr

    def caching_allocator_delete(self, ptr):
        self.live -= self.sizes.pop(ptr)

    def synchronize(self):
        pass

    def empty_cache(self):
        pass

    def reset_peak_memory_stats(self):
        self.peak = self.live

    def max_memory_allocated(self):
        return self.peak

    def max_memory_reserved(self):
        return 2 * self.peak


cuda = _Cuda()


def empty(n, dtype=None, device=None):
    return bytearray(1)
'''


def small_trace(path: Path) -> None:
    recorder = TraceRecorder(source="tests: a random run of a fake pool")
    pool = Pool(FakeDevice().segments, NBX, parked_fraction=1.0)
    pool.recorder = recorder
    rng = np.random.default_rng(3)
    live = []
    for i in range(300):
        if live and rng.random() < 0.45:
            live.pop(int(rng.integers(len(live)))).release()
        else:
            live.append(pool.allocate(int(rng.choice([700, 90_000, 3 * MiB, 11 * MiB]))))
        if i % 50 == 49:
            recorder.sync()
    write_trace(path, recorder.trace())


def test_the_bench_runs_end_to_end_on_the_simulated_gpu_with_a_stand_in_peer(cuda, tmp_path, monkeypatch, capsys):
    cuda.memory = 8 << 30
    cuda.driver.capacity = 8 << 30
    package = tmp_path / "peer" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_TORCH)
    monkeypatch.setenv("PYTHONPATH", f"{package.parent}:{':'.join(sys.path)}")
    stand_in = importlib.util.module_from_spec(importlib.util.spec_from_file_location("torch", package / "__init__.py"))
    stand_in.__spec__.loader.exec_module(stand_in)
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    bench = tool("tools/bench/memory_vs_torch.py")
    monkeypatch.setattr(bench, "SIZES", (4096, 8 * MiB))
    monkeypatch.setattr(bench, "CHUNKS", (2 * MiB, 8 * MiB))
    monkeypatch.setattr("nbx.memory.trace.shipped_traces", lambda: [])
    trace = tmp_path / "small.tsv"
    small_trace(trace)
    assert bench.main(["--quick", "--trace", str(trace), "--trace", str(tmp_path / "absent.tsv")]) == 0
    out = capsys.readouterr().out
    results = json.loads(out.split("results (JSON): ", 1)[1].splitlines()[0])
    frag = results["small.tsv"]["fragmentation"]
    assert frag["device_matches_simulate"] and frag["range_device_matches_simulate"]
    live = read_trace(trace).live_peak
    assert frag["torch 0.0-stand-in, default"]["reserved_peak"] == 2 * live  # the stand-in's figures came back
    assert "torch 0.0-stand-in, expandable_segments:True" in frag
    assert results["small.tsv"]["slab"]["whole run"]["live_peak"] == live
    assert [row["bytes"] for row in results["latency"]] == [4096, 8 * MiB]
    assert "no trace at" in out and cuda.driver.held == 0
