"""A dry run of the two-GPU rank programs (tests/gpu/test_nccl_collectives.py) before a two-GPU
machine runs them: two threads, one rank each, on the simulated host of two GPUs with a fake libnccl
that blocks each collective until both ranks have called it, as NCCL's ranks wait for each other.
What the rank programs compute and compare runs here; NCCL's own arithmetic is the fake's (float64,
rounded once), so this proves the programs, their plan and their oracles, not NCCL."""
from __future__ import annotations

import gc
import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from nbx.devices.nvidia import nccl, nccl_library

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKES = _load(HERE / "test_nccl_communicator.py", "_nbx_nccl_fakes_for_rank_programs")
SIM = FAKES.SIM
GPU = _load(HERE.parent / "gpu" / "test_nccl_collectives.py", "_nbx_nccl_rank_programs")


class ThreadedCudart(SIM.FakeCudart):
    """The simulated runtime with a current device per thread, as CUDA has."""
    _local = threading.local()

    @property
    def current(self):
        return getattr(self._local, "current", 0)

    @current.setter
    def current(self, index):
        self._local.current = index


class BlockingNccl(FAKES.FakeNccl):
    """A collective returns once every rank has called it; a receive waits for its message."""

    def __init__(self, cudart):
        self.cond, self.done = threading.Condition(), set()
        super().__init__(cudart)

    def _submit(self, function, comm, args):
        with self.cond:
            c = self.comms[comm]
            key = (c["uid"], c["seq"])
            code = super()._submit(function, comm, args)
            if code or len(self.pending[key]) == c["n"]:
                self.done.add(key)
                self.cond.notify_all()
                return code
            return 0 if self.cond.wait_for(lambda: key in self.done, timeout=60) else 3

    def ncclSend(self, *args):
        with self.cond:
            code = super().ncclSend(*args)
            self.cond.notify_all()
            return code

    def ncclRecv(self, buf, count, code, peer, comm, stream):
        with self.cond:
            c = self.comms[comm]
            box = (c["uid"], peer, c["rank"])
            if not self.cond.wait_for(lambda: self.mailbox.get(box), timeout=60):
                return 3
            return super().ncclRecv(buf, count, code, peer, comm, stream)


@pytest.fixture
def threaded_host(monkeypatch):
    monkeypatch.setattr(SIM, "FakeCudart", ThreadedCudart)
    cudart = SIM._install(monkeypatch, 2)
    cudart.memory = 4 << 30
    lib = BlockingNccl(cudart)
    monkeypatch.setattr(nccl_library, "_library", nccl_library.NcclLibrary(lib, "simulated libnccl"))
    yield lib
    gc.collect()
    SIM.properties.properties.cache_clear()


def run_ranks(program) -> list[dict]:
    uid = nccl.unique_id()

    def rank(r):
        with nccl.Communicator(r, 2, uid, f"cuda:{r}") as comm:
            return program(comm)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return [f.result(timeout=120) for f in [pool.submit(rank, r) for r in range(2)]]


def test_the_collectives_rank_program_passes_every_step_of_its_plan(threaded_host, monkeypatch):
    monkeypatch.setattr(GPU, "LARGE_COUNT", 1 << 12)
    reports = run_ranks(GPU.rank_collectives)
    steps = GPU.plan((2, 27, 3), 2)
    assert len(steps) > 17 * 7
    for rep in reports:
        assert rep["failures"] == [], "\n".join(rep["failures"][:20])
        assert rep["checked"] == len(steps)


def test_the_hello_rank_program_sums_the_ranks(threaded_host):
    assert [rep["sum"] for rep in run_ranks(GPU.rank_hello)] == [[3, 3, 3, 3]] * 2


def test_the_bus_bandwidth_rank_program_reports_nccl_tests_figures(threaded_host, monkeypatch):
    monkeypatch.setattr(GPU, "BUSBW_BYTES", 1 << 20)
    monkeypatch.setattr(GPU, "BUSBW_ITERS", 2)
    for rep in run_ranks(GPU.rank_busbw):
        assert rep["sum_ok"] and rep["bytes"] == 1 << 20
        for mode in ("out-of-place", "in-place"):
            figures = rep[mode]   # the fake's events say 1 ms between any two records
            assert figures["algbw_GBps"] == pytest.approx((1 << 20) / (figures["ms"] * 1e-3) / 1e9)
            assert figures["busbw_GBps"] == pytest.approx(figures["algbw_GBps"] * 2 * (2 - 1) / 2)


def test_the_tensor_parallel_rank_program_matches_the_whole_layer(threaded_host, monkeypatch):
    """The products and sums run on the host here (the simulated GPU runs no kernels): what is
    checked is the layers' sharding, their collectives and the rank program's comparison."""
    from nbx.core import dispatch
    from nbx.core.ops import elementwise, linalg

    def on_host(cpu_impl):
        return lambda *args: cpu_impl(*args).to(args[0].device if hasattr(args[0], "device") else args[1][0].device)

    monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("matmul", "cuda"), on_host(linalg._matmul_cpu))
    monkeypatch.setitem(dispatch._IMPLEMENTATIONS, ("add", "cuda"), on_host(elementwise._cpu))
    for rep in run_ranks(GPU.rank_parallel):
        assert rep["failures"] == [], "\n".join(rep["failures"])
        assert rep["checked"] == 9 and len(rep["deviations"]) == 9
