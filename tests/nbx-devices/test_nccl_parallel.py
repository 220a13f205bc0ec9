"""The tensor-parallel linear layers on CPU, each rank a thread with a fake communicator that
implements the Communicator's collective interface over numpy (reductions accumulate rank by rank in
the tensor's dtype, as NCCL's ring does). Every layout must match the single-device linear layer
within the dtype's tolerance (the screen tolerance of the interp device file: the CPU computes with
numpy in the same dtypes). tests/gpu/test_nccl_collectives.py runs the layers on two GPUs."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import device_files
from nbx.core.errors import ArgumentError, ShapeError
from nbx.core.reference import deviation
from nbx.devices.nvidia.parallel import ColumnParallelLinear, RowParallelLinear, shard_range


class World:
    """N ranks in one process: each collective is a rendezvous of N threads at a barrier."""

    def __init__(self, n: int):
        self.n = n
        self.barrier = threading.Barrier(n, timeout=30)
        self.slots: list[np.ndarray | None] = [None] * n
        self.calls: list[str] = []

    def exchange(self, rank: int, value: np.ndarray, what: str) -> list[np.ndarray]:
        self.slots[rank] = np.array(value, copy=True)
        if rank == 0:
            self.calls.append(what)
        self.barrier.wait()
        parts = list(self.slots)
        self.barrier.wait()   # nobody overwrites a slot before every rank has read them all
        return parts


class FakeCommunicator:
    """Communicator's interface (rank, world_size, device, all_reduce[_], all_gather) on cpu tensors."""

    def __init__(self, world: World, rank: int):
        self.world, self.rank, self.world_size = world, rank, world.n
        self.device = nbx.as_device("cpu")

    def _reduced(self, x: nbx.Tensor, op: str) -> np.ndarray:
        assert op == "sum", op
        parts = self.world.exchange(self.rank, x.numpy(), f"all_reduce {op}")
        total = parts[0]
        for p in parts[1:]:
            total = (total + p).astype(x.dtype.host)   # rounded to the dtype at each step, like a ring
        return total

    def all_reduce(self, x, op="sum", *, out=None, stream=None):
        return nbx.from_numpy(self._reduced(x, op))

    def all_reduce_(self, x, op="sum", *, stream=None):
        x[...] = nbx.from_numpy(self._reduced(x, op))
        return x

    def all_gather(self, x, *, out=None, stream=None):
        return nbx.from_numpy(np.stack(self.world.exchange(self.rank, x.numpy(), "all_gather")))


def run_ranks(n: int, body):
    """body(comm) on n threads, one rank each; the results in rank order and the world's log."""
    world = World(n)
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(body, FakeCommunicator(world, r)) for r in range(n)]
        return [f.result(timeout=60) for f in futures], world


def single_device_linear(x, weight, bias=None):
    y = nbx.matmul(x, weight.T)
    return y if bias is None else y + bias


def data(dtype: str, lead=(3, 5), in_features=64, out_features=48, seed=0):
    rng = np.random.default_rng(seed)
    host = nbx.dtypes.TABLE[dtype].host
    x = rng.standard_normal((*lead, in_features)).astype(host)
    w = (rng.standard_normal((out_features, in_features)) / np.sqrt(in_features)).astype(host)
    b = rng.standard_normal(out_features).astype(host)
    return nbx.from_numpy(x), nbx.from_numpy(w), nbx.from_numpy(b)


def tolerance(dtype: str) -> float:
    return device_files.for_arch("interp").value("autotune.screen_tolerance")[dtype]


def assert_close(got: nbx.Tensor, want: nbx.Tensor) -> None:
    assert got.shape == want.shape and got.dtype is want.dtype
    dev = deviation(got.numpy(), want.numpy())
    assert dev <= tolerance(want.dtype.name), f"{want.dtype.name}: deviation {dev:.3g}"


DTYPES = ["float32", "float16", "bfloat16", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_a_column_parallel_layer_with_gathered_outputs_matches_the_single_device_layer(dtype, world_size):
    x, w, b = data(dtype)
    outs, world = run_ranks(world_size, lambda c: ColumnParallelLinear.from_full(w, b, comm=c, gather_output=True)(x))
    want = single_device_linear(x, w, b)
    for out in outs:
        assert_close(out, want)
    assert world.calls == ["all_gather"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_a_row_parallel_layer_over_the_full_input_matches_the_single_device_layer(dtype, world_size):
    x, w, b = data(dtype)
    outs, world = run_ranks(world_size, lambda c: RowParallelLinear.from_full(w, b, comm=c, input_is_parallel=False)(x))
    want = single_device_linear(x, w, b)
    for out in outs:
        assert_close(out, want)
        assert out.numpy().tobytes() == outs[0].numpy().tobytes()   # every rank holds the same sum
    assert world.calls == ["all_reduce sum"]


def test_without_gathering_rank_r_holds_the_r_th_block_of_the_output_features():
    x, w, b = data("float32", lead=(4,))
    outs, world = run_ranks(4, lambda c: ColumnParallelLinear.from_full(w, b, comm=c)(x))
    want = single_device_linear(x, w, b).numpy()
    for r, out in enumerate(outs):
        assert out.shape == (4, 12)
        assert deviation(out.numpy(), want[:, 12 * r:12 * (r + 1)]) <= tolerance("float32")
    assert world.calls == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_column_then_row_pair_needs_one_all_reduce_and_matches_two_single_device_layers(dtype):
    x, w1, b1 = data(dtype, in_features=32, out_features=64, seed=1)
    _, w2, b2 = data(dtype, in_features=64, out_features=24, seed=2)

    def mlp(comm):
        up = ColumnParallelLinear.from_full(w1, b1, comm=comm)
        down = RowParallelLinear.from_full(w2, b2, comm=comm, input_is_parallel=True)
        return down(up(x))

    outs, world = run_ranks(2, mlp)
    want = single_device_linear(single_device_linear(x, w1, b1), w2, b2)
    for out in outs:
        assert_close(out, want)
    assert world.calls == ["all_reduce sum"]


def test_layers_without_bias_match_and_a_rank_holds_only_its_shard():
    x, w, _ = data("float32")
    layers, _ = run_ranks(2, lambda c: (ColumnParallelLinear.from_full(w, comm=c, gather_output=True),
                                        RowParallelLinear.from_full(w, comm=c, input_is_parallel=False)))
    col, row = layers[1]
    assert col.weight_t.shape == (64, 24) and row.weight_t.shape == (32, 48)
    assert col.weight_t.numpy().tolist() == w.numpy()[24:].T.tolist()
    assert row.weight_t.numpy().tolist() == w.numpy()[:, 32:].T.tolist()
    assert repr(col) == "ColumnParallelLinear(64 -> 48, rank 1 of 2, cpu)"
    outs, _ = run_ranks(2, lambda c: (ColumnParallelLinear.from_full(w, comm=c, gather_output=True)(x),
                                      RowParallelLinear.from_full(w, comm=c, input_is_parallel=False)(x)))
    want = single_device_linear(x, w)
    for pair in outs:
        assert_close(pair[0], want)
        assert_close(pair[1], want)


def test_numpy_weights_are_taken_as_they_are():
    x, w, b = data("float32")
    outs, _ = run_ranks(2, lambda c: ColumnParallelLinear.from_full(w.numpy(), b.numpy(), comm=c,
                                                                    gather_output=True)(x))
    assert_close(outs[0], single_device_linear(x, w, b))


def test_uneven_splits_and_wrong_shapes_are_refused_by_name():
    with pytest.raises(ShapeError, match=r"48 output features do not split evenly among 5 ranks \(48 % 5 = 3\)"):
        shard_range(48, 0, 5, "output features")
    x, w, b = data("float32")
    world = World(1)
    comm = FakeCommunicator(world, 0)
    comm.world_size = 5
    with pytest.raises(ShapeError, match="64 input features do not split evenly among 5 ranks"):
        RowParallelLinear.from_full(w, comm=comm)
    layer = ColumnParallelLinear.from_full(w, b, comm=FakeCommunicator(World(1), 0))
    with pytest.raises(ShapeError, match=r"the input's last dim must be 64 \(rank 0 of 1\), got shape \(3, 5, 48\)"):
        layer(nbx.zeros((3, 5, 48)))
    with pytest.raises(ShapeError, match=r"weight is \(out_features, in_features\), got shape \(48,\)"):
        ColumnParallelLinear.from_full(b, comm=FakeCommunicator(World(1), 0))
    with pytest.raises(ShapeError, match=r"the bias has shape \(47,\); \(48,\) expected"):
        ColumnParallelLinear.from_full(w, b[:47], comm=FakeCommunicator(World(1), 0))
    with pytest.raises(ArgumentError, match="weight must be an nbx Tensor or a numpy array, got list"):
        ColumnParallelLinear.from_full([[1.0]], comm=FakeCommunicator(World(1), 0))
