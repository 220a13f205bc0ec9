"""On two GPUs (nvidia-h200-x2; tools/nccl_run.sh runs this file): NCCL collectives on nbx tensors,
checked against float64 for every dtype NCCL reduces and byte-exact for every dtype it moves; the
tensor-parallel layers against the single-GPU layer; the bus bandwidth of all_reduce on 256 MiB.

Each test starts one process per GPU through nbx.devices.nvidia.nccl_launch -- this file run as a
script is the rank's program (`python test_nccl_collectives.py SCENARIO OUTDIR`) -- with the unique
id passed by a file or by an environment variable, and reads the JSON report each rank writes.
Ranks run with torch's import blocked, NVLink multicast off (NCCL_NVLS_ENABLE=0) and compiled
Triton kernels. Skipped, with the reason, where fewer than two CUDA devices exist."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from two_gpus import two_devices_reason

ROOT = Path(__file__).resolve().parents[2]
WORLD = 2
BUSBW_BYTES = 256 << 20
BUSBW_ITERS = 20
LARGE_COUNT = 1 << 24   # elements of the large checks: NCCL's bandwidth protocols and all its channels
RANK_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "TRITON_INTERPRET": "0", "PYTHONUNBUFFERED": "1"}


# ---- the plan both sides agree on ---------------------------------------------------------------
def plan(version, n: int) -> list[tuple]:
    """Every check a rank makes, in order: (collective, dtype, op or root)."""
    import nbx.core as nbx
    from nbx.devices.nvidia import nccl_types
    steps = []
    for name in sorted(nbx.dtypes.TABLE):
        for op in nccl_types.REDUCE_OPS:
            if nccl_types.reducible(name, op, version):
                steps += [(kind, name, op) for kind in ("all_reduce", "all_reduce_", "reduce_scatter",
                                                         "reduce_scatter_")]
        steps += [("all_gather", name, None), ("all_gather_", name, None), ("send_recv", name, None)]
        steps += [(kind, name, root) for root in range(n) for kind in ("broadcast", "broadcast_")]
    steps += [("large all_reduce", "float32", "sum"), ("large all_reduce", "bfloat16", "sum"),
              ("large all_gather", "float16", None)]
    return steps


# ---- the ranks' side ------------------------------------------------------------------------------
def rank_inputs(name: str, rank: int, shape) -> np.ndarray:
    """Rank's input, made alike on every rank (each computes the expected result itself)."""
    import nbx.core as nbx
    dt = nbx.dtypes.TABLE[name]
    rng = np.random.default_rng(1000 * rank + sum(map(ord, name)))
    if dt.kind == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in ("int", "uint"):
        return rng.integers(0 if dt.kind == "uint" else -5, 6, shape).astype(dt.host)
    if dt.kind == "complex":
        return (rng.uniform(-2, 2, shape) + 1j * rng.uniform(-2, 2, shape)).astype(dt.host)
    return rng.uniform(-2, 2, shape).astype(dt.host)


def random_bytes(name: str, rank: int, shape) -> np.ndarray:
    import nbx.core as nbx
    dt = nbx.dtypes.TABLE[name]
    raw = np.random.default_rng(7 + rank).integers(0, 256, int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw %= 2
    return raw.view(dt.host).reshape(shape)


def oracle(parts, op: str) -> np.ndarray:
    wide = np.stack([p.astype(np.complex128 if np.iscomplexobj(p) else np.float64) for p in parts])
    if op == "avg" and parts[0].dtype.kind in "iu":
        return np.trunc(wide.sum(0) / len(parts))   # NCCL divides integer sums, truncating
    return {"sum": lambda: wide.sum(0), "prod": lambda: wide.prod(0), "max": lambda: wide.max(0),
            "min": lambda: wide.min(0), "avg": lambda: wide.sum(0) / len(parts)}[op]()


class Checks:
    def __init__(self, tolerances):
        self.tolerances, self.checked, self.failures, self.worst = tolerances, 0, [], {}

    def run(self, what: str, fn) -> None:
        self.checked += 1
        try:
            fn()
        except Exception as exc:   # recorded, and the next check goes on: every rank makes the same calls
            self.failures.append(f"{what}: {type(exc).__name__}: {exc}")

    def close(self, what: str, got, want) -> None:
        from nbx.core.reference import deviation
        values = got.numpy()
        assert values.shape == want.shape, (values.shape, want.shape)
        if values.dtype.kind in "biu":
            assert np.array_equal(values.astype(np.float64), want), f"{what}: integers differ"
            return
        dev, tol = deviation(values, want), self.tolerances[got.dtype.name]
        self.worst[what] = dev
        assert dev <= tol, f"deviation {dev:.3g} from float64 exceeds {got.dtype.name}'s {tol:.3g}"

    @staticmethod
    def same_bytes(got, want: np.ndarray) -> None:
        assert got.numpy().tobytes() == np.ascontiguousarray(want).tobytes(), "bytes differ"


def rank_collectives(comm) -> dict:
    from nbx.core import device_files
    checks = Checks(device_files.in_force(comm.device).value("autotune.screen_tolerance"))
    for kind, name, arg in plan(comm.nccl_version, comm.world_size):
        checks.run(f"{kind} {name} {arg}", lambda k=kind, d=name, a=arg: collective(comm, checks, k, d, a))
    return {"checked": checks.checked, "failures": checks.failures}


def collective(comm, checks: Checks, kind: str, name: str, arg) -> None:
    """One step of the plan: the collective on this rank's input, against what every rank expects."""
    import nbx.core as nbx
    if kind.startswith("large"):
        return large(comm, kind, name)
    n, r, what = comm.world_size, comm.rank, f"{kind} {name} {arg}"
    shape, block = (2 * n, 6), slice(2 * r, 2 * r + 2)
    if kind.startswith(("all_reduce", "reduce_scatter")):
        parts = [rank_inputs(name, q, shape) for q in range(n)]
        mine, want = nbx.from_numpy(parts[r], comm.device), oracle(parts, arg)
        if kind == "all_reduce":
            return checks.close(what, comm.all_reduce(mine, arg), want)
        if kind == "all_reduce_":
            return checks.close(what, comm.all_reduce_(mine.clone(), arg), want)
        if kind == "reduce_scatter":
            return checks.close(what, comm.reduce_scatter(mine, arg), want[block])
        return checks.close(what, comm.reduce_scatter_(mine.clone(), arg), want[block])
    raw = [random_bytes(name, q, shape) for q in range(n)]
    mine = nbx.from_numpy(raw[r], comm.device)
    if kind == "all_gather":
        return checks.same_bytes(comm.all_gather(mine), np.stack(raw))
    if kind == "all_gather_":
        return checks.same_bytes(gather_in_place(comm, mine), np.stack(raw))
    if kind == "send_recv":
        return checks.same_bytes(ring_exchange(comm, mine), raw[(r - 1) % n])
    if kind == "broadcast":
        return checks.same_bytes(comm.broadcast(mine, arg), raw[arg])
    return checks.same_bytes(comm.broadcast_(mine.clone(), arg), raw[arg])


def gather_in_place(comm, mine):
    import nbx.core as nbx
    buf = nbx.empty((comm.world_size, *mine.shape), mine.dtype, comm.device)
    buf[comm.rank] = mine
    return comm.all_gather_(buf)


def ring_exchange(comm, mine):
    import nbx.core as nbx
    out = nbx.empty(mine.shape, mine.dtype, comm.device)
    with comm.group():
        comm.send(mine, (comm.rank + 1) % comm.world_size)
        comm.recv(out, (comm.rank - 1) % comm.world_size)
    return out


def large(comm, kind: str, name: str) -> None:
    """LARGE_COUNT elements of small integers, whose sums are exact in every dtype here."""
    import nbx.core as nbx
    n, count = comm.world_size, LARGE_COUNT
    parts = [np.random.default_rng(q).integers(-8, 9, count).astype(nbx.dtypes.TABLE[name].host) for q in range(n)]
    mine = nbx.from_numpy(parts[comm.rank], comm.device)
    if kind == "large all_reduce":
        got, want = comm.all_reduce(mine), np.sum([p.astype(np.float64) for p in parts], axis=0)
        assert np.array_equal(got.numpy().astype(np.float64), want), "large all_reduce differs"
    else:
        assert comm.all_gather(mine).numpy().tobytes() == np.stack(parts).tobytes(), "large all_gather differs"


def rank_parallel(comm) -> dict:
    """Tensor-parallel layers against the same layer computed whole on this rank's GPU."""
    from nbx.core import device_files
    checks = Checks(device_files.in_force(comm.device).value("autotune.screen_tolerance"))
    for dtype in ("float32", "float16", "bfloat16"):
        parallel_checks(comm, checks, dtype)
    return {"checked": checks.checked, "failures": checks.failures, "deviations": checks.worst}


def parallel_checks(comm, checks: Checks, dtype: str) -> None:
    import nbx.core as nbx
    from nbx.devices.nvidia.parallel import ColumnParallelLinear, RowParallelLinear
    host = nbx.dtypes.TABLE[dtype].host
    rng = np.random.default_rng(5)   # the same weights and input on every rank
    x = rng.standard_normal((8, 1024)).astype(host)
    w1, b1 = (rng.standard_normal((4096, 1024)) / 32).astype(host), rng.standard_normal(4096).astype(host)
    w2, b2 = (rng.standard_normal((1024, 4096)) / 64).astype(host), rng.standard_normal(1024).astype(host)
    X = nbx.from_numpy(x, comm.device)

    def whole(inp, w, b):   # the single-GPU layer
        return nbx.matmul(inp, nbx.from_numpy(w, comm.device).T) + nbx.from_numpy(b, comm.device)

    def column():
        layer = ColumnParallelLinear.from_full(w1, b1, comm=comm, gather_output=True)
        checks.close(f"column {dtype}", layer(X), whole(X, w1, b1).numpy().astype(np.float64))

    def row():
        layer = RowParallelLinear.from_full(w2, b2, comm=comm, input_is_parallel=False)
        h = whole(X, w1, b1)
        checks.close(f"row {dtype}", layer(h), whole(h, w2, b2).numpy().astype(np.float64))

    def pair():
        up = ColumnParallelLinear.from_full(w1, b1, comm=comm)
        down = RowParallelLinear.from_full(w2, b2, comm=comm, input_is_parallel=True)
        checks.close(f"column+row {dtype}", down(up(X)), whole(whole(X, w1, b1), w2, b2).numpy().astype(np.float64))

    checks.run(f"column {dtype}", column)
    checks.run(f"row {dtype}", row)
    checks.run(f"column+row {dtype}", pair)


def rank_busbw(comm) -> dict:
    """all_reduce (sum, float32) of 256 MiB timed with CUDA events; nccl-tests' formulas."""
    import nbx.core as nbx
    from nbx.devices import nvidia
    n, count, index = comm.world_size, BUSBW_BYTES // 4, comm.device.index
    x, y = nbx.ones(count, dtype="float32", device=comm.device), nbx.empty(count, "float32", comm.device)
    z = nbx.zeros(count, dtype="float32", device=comm.device)
    for _ in range(5):
        comm.all_reduce(x, out=y)
    report = {"bytes": BUSBW_BYTES, "iters": BUSBW_ITERS, "world_size": n}
    for mode in ("out-of-place", "in-place"):
        comm.barrier()
        start, end = nvidia.Event(index), nvidia.Event(index)
        start.record()
        for _ in range(BUSBW_ITERS):
            comm.all_reduce(x, out=y) if mode == "out-of-place" else comm.all_reduce_(z)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / BUSBW_ITERS
        algbw = BUSBW_BYTES / (ms * 1e-3) / 1e9
        report[mode] = {"ms": ms, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (n - 1) / n}
    report["sum_ok"] = bool((y.numpy() == n).all() and (z.numpy() == 0).all())
    return report


def rank_hello(comm) -> dict:
    import nbx.core as nbx
    total = comm.all_reduce(nbx.full((4,), comm.rank + 1, dtype="int32", device=comm.device))
    return {"sum": total.numpy().tolist()}


SCENARIOS = {"collectives": rank_collectives, "parallel": rank_parallel, "busbw": rank_busbw, "hello": rank_hello}


def rank_main(scenario: str, outdir: str) -> None:
    class BlockTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"import of {name!r} blocked: nbx's ranks run without torch", name=name)

    sys.meta_path.insert(0, BlockTorch())
    from nbx.devices.nvidia import nccl, nccl_library
    with nccl.Communicator.from_env() as comm:
        report = SCENARIOS[scenario](comm)
        comm.barrier()
    report.update(rank=comm.rank, device=str(comm.device), nccl=list(comm.nccl_version),
                  library=nccl_library.nccl().path,
                  torch_loaded=any(m == "torch" or m.startswith("torch.") for m in sys.modules))
    Path(outdir, f"{scenario}_rank{comm.rank}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report)[:2000])


# ---- the tests (pytest's side) ---------------------------------------------------------------------
REASON = None if __name__ == "__main__" else two_devices_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def run_ranks(scenario: str, tmp_path, id_via: str = "file") -> list[dict]:
    from nbx.devices.nvidia import nccl_launch
    env = dict(os.environ, **RANK_ENV)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in sorted(ROOT.glob("packages/*/src"))),
                                         env.get("PYTHONPATH", "")])
    result = nccl_launch.launch([sys.executable, str(Path(__file__).resolve()), scenario, str(tmp_path)], WORLD,
                                id_via=id_via, timeout=420, log_dir=tmp_path, base_env=env)
    logs = "\n".join(f"--- rank {r}\n{(tmp_path / f'rank{r}.log').read_text()[-4000:]}" for r in range(WORLD))
    assert result.exit_code == 0, (f"ranks exited {result.codes} (first failing {result.first_failed}, timed out "
                                   f"{result.timed_out})\n{logs}")
    reports = [json.loads((tmp_path / f"{scenario}_rank{r}.json").read_text()) for r in range(WORLD)]
    assert [rep["torch_loaded"] for rep in reports] == [False] * WORLD
    return reports


def test_every_collective_matches_float64_or_moves_bytes_exactly_for_every_dtype(tmp_path):
    reports = run_ranks("collectives", tmp_path, id_via="file")
    print(f"\nNCCL {'.'.join(map(str, reports[0]['nccl']))} from {reports[0]['library']}")
    expected = len(plan(tuple(reports[0]["nccl"]), WORLD))
    for rep in reports:
        assert rep["failures"] == [], "\n".join(rep["failures"])
        assert rep["checked"] == expected


def test_the_unique_id_passed_by_an_environment_variable_joins_the_ranks(tmp_path):
    reports = run_ranks("hello", tmp_path, id_via="env")
    assert [rep["sum"] for rep in reports] == [[3, 3, 3, 3]] * WORLD
    assert [rep["device"] for rep in reports] == ["cuda:0", "cuda:1"]


def test_tensor_parallel_layers_on_two_gpus_match_the_single_gpu_layer(tmp_path):
    reports = run_ranks("parallel", tmp_path)
    for rep in reports:
        print(f"\nrank {rep['rank']} deviations from the single-GPU layer: {rep['deviations']}")
        assert rep["failures"] == [], "\n".join(rep["failures"])
        assert rep["checked"] == 9


def test_all_reduce_of_256_mib_sums_right_and_its_bus_bandwidth_is_reported(tmp_path):
    reports = run_ranks("busbw", tmp_path)
    for rep in reports:
        assert rep["sum_ok"]
        for mode in ("out-of-place", "in-place"):
            print(f"\nrank {rep['rank']} {mode}: {rep[mode]['ms']:.3f} ms, algbw {rep[mode]['algbw_GBps']:.1f} GB/s, "
                  f"busbw {rep[mode]['busbw_GBps']:.1f} GB/s (nccl-tests: busbw = algbw * 2(n-1)/n)")
            assert rep[mode]["busbw_GBps"] > 0


if __name__ == "__main__":
    rank_main(sys.argv[1], sys.argv[2])
