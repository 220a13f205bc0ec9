"""The Communicator on a simulated host of two GPUs: the simulated CUDA of test_nvidia_simulated
(device memory is host memory) and a fake libnccl that runs each collective once every rank of a
communicator has called it. One process holds both ranks, so what reaches NCCL -- pointers, counts,
type and op codes, roots, streams, the current device -- and what comes back is checked on any
machine. tests/gpu/test_nccl_collectives.py runs the same calls on two real GPUs."""
from __future__ import annotations

import ctypes
import gc
import importlib.util
import os
from pathlib import Path

import ml_dtypes
import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import device_files
from nbx.core.errors import ArgumentError, CrossDeviceError, DTypeError, ShapeError, ViewError
from nbx.core.reference import deviation
from nbx.devices import nvidia
from nbx.devices.nvidia import nccl, nccl_library, nccl_types, runtime
from nbx.devices.nvidia.errors import StreamMismatchError
from nbx.devices.nvidia.nccl_errors import CommunicatorClosedError, NcclBootstrapError, NcclDTypeError, NcclError


def _load_simulated_cuda():
    path = Path(__file__).with_name("test_nvidia_simulated.py")
    spec = importlib.util.spec_from_file_location("_nbx_simulated_cuda_for_nccl", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SIM = _load_simulated_cuda()
NP_TYPES = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64, 6: np.float16,
            7: np.float32, 8: np.float64, 9: ml_dtypes.bfloat16, 10: ml_dtypes.float8_e4m3fn,
            11: ml_dtypes.float8_e5m2}


def _array(ptr: int, count: int, code: int) -> np.ndarray:
    dt = np.dtype(NP_TYPES[code])
    return np.ctypeslib.as_array((ctypes.c_uint8 * (count * dt.itemsize)).from_address(ptr)).view(dt)


def _reduce(parts: list[np.ndarray], op: int) -> np.ndarray:
    dt = parts[0].dtype
    if dt.kind in "iu":   # integers in their own width, as NCCL does; avg truncates toward zero
        stacked = np.stack(parts)
        total = {0: lambda: stacked.sum(0, dtype=dt), 1: lambda: stacked.prod(0, dtype=dt), 2: lambda: stacked.max(0),
                 3: lambda: stacked.min(0), 4: lambda: stacked.sum(0, dtype=dt)}[op]()
        return (np.sign(total) * (np.abs(total) // len(parts))).astype(dt) if op == 4 else total
    wide = np.stack([p.astype(np.float64) for p in parts])
    out = {0: wide.sum(0), 1: wide.prod(0), 2: wide.max(0), 3: wide.min(0), 4: wide.sum(0) / len(parts)}[op]
    return out.astype(dt)


class FakeNccl:
    """libnccl over the simulated CUDA: a collective runs when the last rank of its communicator calls it."""

    def __init__(self, cudart, version: int = 22703):
        self.cudart, self.version = cudart, version
        self.comms: dict[int, dict] = {}      # handle -> uid, rank, n, device, seq
        self.pending: dict[tuple, dict] = {}  # (uid, seq) -> {rank: (function, args)}
        self.mailbox: dict[tuple, list] = {}  # (uid, src, dst) -> sent arrays, then waiting receives
        self.next_handle, self.fail, self.async_error, self.groups = 0x5000, {}, 0, 0
        self.log: list[tuple] = []            # (function, current device, args) of every call
        for name in dir(type(self)):
            if name.startswith("nccl"):
                setattr(self, name, _Logged(self, name, getattr(self, name)))

    @property
    def current(self):
        return self.cudart.current

    def calls_of(self, name):
        return [args for fn, _, args in self.log if fn == name]

    # ---- library, ids, communicators --------------------------------------------------------
    def ncclGetVersion(self, p):
        return SIM._out(p, self.version)

    def ncclGetErrorString(self, code):
        return b"simulated failure"

    def ncclGetLastError(self, comm):
        return b"simulated detail"

    def ncclGetUniqueId(self, p):
        p._obj.internal[:] = list(os.urandom(128))
        return 0

    def ncclCommInitRank(self, p, n, uid, rank):
        self.next_handle += 0x10
        self.comms[self.next_handle] = {"uid": bytes(uid.internal), "rank": rank, "n": n,
                                        "device": self.current, "seq": 0}
        return SIM._out(p, self.next_handle)

    def ncclCommDestroy(self, comm):
        self.comms.pop(comm)
        return 0

    ncclCommAbort = ncclCommDestroy

    def ncclCommGetAsyncError(self, comm, p):
        return SIM._out(p, self.async_error)

    def _ok(self, *args):
        return 0

    ncclCommCount = ncclCommCuDevice = ncclCommUserRank = ncclReduce = _ok

    def ncclGroupStart(self):
        self.groups += 1
        return 0

    ncclGroupEnd = ncclGroupStart

    # ---- collectives ------------------------------------------------------------------------
    def _submit(self, function, comm, args):
        if function in self.fail:
            return self.fail[function]
        c = self.comms[comm]
        ranks = self.pending.setdefault((c["uid"], c["seq"]), {})
        ranks[c["rank"]] = (function, args)
        c["seq"] += 1
        if len(ranks) == c["n"]:
            kinds = {(f, a[2:]) for f, a in ranks.values()}  # everything but the buffers must agree
            if len(kinds) != 1:
                return 5  # ncclInvalidUsage
            getattr(self, "_run_" + function)([ranks[r][1] for r in range(c["n"])])
        return 0

    def _run_ncclAllReduce(self, calls):
        send, recv, count, code, op = zip(*calls, strict=True)
        total = _reduce([_array(s, count[0], code[0]).copy() for s in send], op[0])
        for r in recv:
            _array(r, count[0], code[0])[:] = total

    def _run_ncclBroadcast(self, calls):
        send, recv, count, code, root = zip(*calls, strict=True)
        data = _array(send[root[0]], count[0], code[0]).copy()
        for r in recv:
            _array(r, count[0], code[0])[:] = data

    def _run_ncclAllGather(self, calls):
        send, recv, count, code = zip(*calls, strict=True)
        data = np.concatenate([_array(s, count[0], code[0]).copy() for s in send])
        for r in recv:
            _array(r, len(data), code[0])[:] = data

    def _run_ncclReduceScatter(self, calls):
        send, recv, count, code, op = zip(*calls, strict=True)
        n = len(calls)
        total = _reduce([_array(s, count[0] * n, code[0]).copy() for s in send], op[0])
        for rank, r in enumerate(recv):
            _array(r, count[0], code[0])[:] = total[rank * count[0]:(rank + 1) * count[0]]

    def ncclAllReduce(self, send, recv, count, code, op, comm, stream):
        return self._submit("ncclAllReduce", comm, (send, recv, count, code, op))

    def ncclBroadcast(self, send, recv, count, code, root, comm, stream):
        return self._submit("ncclBroadcast", comm, (send, recv, count, code, root))

    def ncclAllGather(self, send, recv, count, code, comm, stream):
        return self._submit("ncclAllGather", comm, (send, recv, count, code))

    def ncclReduceScatter(self, send, recv, count, code, op, comm, stream):
        return self._submit("ncclReduceScatter", comm, (send, recv, count, code, op))

    def ncclSend(self, buf, count, code, peer, comm, stream):
        c = self.comms[comm]
        self.mailbox.setdefault((c["uid"], c["rank"], peer), []).append(_array(buf, count, code).copy())
        return 0

    def ncclRecv(self, buf, count, code, peer, comm, stream):
        c = self.comms[comm]
        sent = self.mailbox.get((c["uid"], peer, c["rank"]))
        if not sent or sent[0].size != count:
            return 5
        _array(buf, count, code)[:] = sent.pop(0)
        return 0


class _Logged:
    """Wraps the fake's functions to log (name, current device, args) and to carry argtypes."""

    def __init__(self, fake, name, impl):
        self.fake, self.name, self.impl = fake, name, impl

    def __call__(self, *args):
        self.fake.log.append((self.name, self.fake.current, args))
        return self.impl(*args)


@pytest.fixture
def fake(monkeypatch):
    cudart = SIM._install(monkeypatch, 2)
    lib = FakeNccl(cudart)
    monkeypatch.setattr(nccl_library, "_library", nccl_library.NcclLibrary(lib, "simulated libnccl"))
    yield lib
    gc.collect()   # communicators' finalisers run while the fakes are still installed
    SIM.properties.properties.cache_clear()


def pair(world: int = 2):
    uid = nccl.unique_id()
    return [nccl.Communicator(r, world, uid, f"cuda:{r}") for r in range(world)]


def on(rank: int, values) -> nbx.Tensor:
    return nbx.from_numpy(np.asarray(values), f"cuda:{rank}")


def inputs(name: str, shape=(4, 3)):
    dt = nbx.dtypes.TABLE[name]
    rng = np.random.default_rng(3)
    if dt.kind == "bool":
        return [rng.integers(0, 2, shape).astype(bool) for _ in range(2)]
    if dt.kind in ("int", "uint"):
        low = 0 if dt.kind == "uint" else -5
        return [rng.integers(low, 6, shape).astype(dt.host) for _ in range(2)]
    if dt.kind == "complex":
        return [(rng.uniform(-2, 2, shape) + 1j * rng.uniform(-2, 2, shape)).astype(dt.host) for _ in range(2)]
    return [rng.uniform(-2, 2, shape).astype(dt.host) for _ in range(2)]


def expected(parts, op):
    wide = [p.astype(np.complex128 if np.iscomplexobj(p) else np.float64) for p in parts]
    if op == "avg" and parts[0].dtype.kind in "iu":
        total = sum(wide)
        return np.trunc(total / len(parts))
    return {"sum": lambda: sum(wide), "prod": lambda: wide[0] * wide[1], "max": lambda: np.maximum(*wide),
            "min": lambda: np.minimum(*wide), "avg": lambda: sum(wide) / len(wide)}[op]()


REDUCIBLE = [(name, op) for name in sorted(nbx.dtypes.TABLE) for op in nccl.REDUCE_OPS
             if nccl_types.reducible(name, op, (2, 27, 3))]


# ---- lifecycle ------------------------------------------------------------------------------------
def test_each_rank_is_made_with_its_device_current_and_the_previous_device_comes_back(fake):
    comms = pair()
    assert [device for fn, device, _ in fake.log if fn == "ncclCommInitRank"] == [0, 1]
    assert [args[1] for args in fake.calls_of("ncclCommInitRank")] == [2, 2]   # nranks
    assert [args[3] for args in fake.calls_of("ncclCommInitRank")] == [0, 1]   # rank
    assert len({c["uid"] for c in fake.comms.values()}) == 1
    assert runtime.get_device() == 0
    assert [c.device for c in comms] == [nbx.as_device("cuda:0"), nbx.as_device("cuda:1")]
    assert repr(comms[1]) == "Communicator(rank 1 of 2, cuda:1, open)"


def test_use_after_destroy_is_a_named_error_and_a_second_destroy_does_nothing(fake):
    comm, other = pair()
    comm.destroy()
    comm.destroy()
    assert len(fake.calls_of("ncclCommDestroy")) == 1 and comm.closed
    with pytest.raises(CommunicatorClosedError, match=r"rank 0 of 2 on cuda:0 was destroyed; make a new "
                                                      r"Communicator \(every rank together\)"):
        comm.all_reduce(on(0, [1.0]))
    with pytest.raises(CommunicatorClosedError, match="was destroyed"):
        with comm:
            pass
    other.abort()
    with pytest.raises(CommunicatorClosedError, match="rank 1 of 2 on cuda:1 was aborted"):
        other.barrier()


def test_a_with_block_destroys_on_leaving_and_aborts_when_it_raised(fake):
    a, b = pair()
    with a:
        pass
    assert a.closed and len(fake.calls_of("ncclCommDestroy")) == 1
    with pytest.raises(RuntimeError, match="boom"):
        with b:
            raise RuntimeError("boom")
    assert b.closed
    assert len(fake.calls_of("ncclCommDestroy")) == 1 and len(fake.calls_of("ncclCommAbort")) == 1


def test_a_collected_communicator_is_destroyed_with_its_device_current(fake):
    comms = pair()
    del comms
    gc.collect()
    assert sorted(device for fn, device, _ in fake.log if fn == "ncclCommDestroy") == [0, 1]
    assert fake.comms == {} and runtime.get_device() == 0


def test_ranks_and_world_sizes_outside_their_range_are_refused(fake):
    uid = nccl.unique_id()
    with pytest.raises(ArgumentError, match=r"rank 2 is outside 0..1 \(world size 2\)"):
        nccl.Communicator(2, 2, uid, "cuda:0")
    with pytest.raises(ArgumentError, match="world_size is the number of ranks"):
        nccl.Communicator(0, 0, uid, "cuda:0")
    with pytest.raises(CrossDeviceError, match="an NCCL communicator works on a cuda device, not cpu"):
        nccl.Communicator(0, 2, uid, "cpu")
    assert fake.calls_of("ncclCommInitRank") == []


def test_an_asynchronous_nccl_error_is_raised_by_check(fake):
    comm, _ = pair()
    comm.check()
    fake.async_error = 6
    with pytest.raises(NcclError, match=r"ncclCommGetAsyncError failed with ncclRemoteError \(6\): simulated "
                                        r"failure \[simulated detail\]"):
        comm.check()


def test_a_failing_collective_is_an_nccl_error_naming_the_call(fake):
    comm, _ = pair()
    fake.fail["ncclAllReduce"] = 2
    with pytest.raises(NcclError, match=r"ncclAllReduce failed with ncclSystemError \(2\)"):
        comm.all_reduce(on(0, [1.0, 2.0]))


# ---- collectives ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, op", REDUCIBLE)
def test_all_reduce_of_every_reducible_dtype_matches_float64(fake, name, op):
    comms, parts = pair(), inputs(name)
    outs = [c.all_reduce(on(r, parts[r]), op) for r, c in enumerate(comms)]
    want = expected(parts, op)
    tol = device_files.for_arch("interp").value("autotune.screen_tolerance")[name]
    for out in outs:
        got = out.numpy()
        assert got.dtype == parts[0].dtype and got.shape == parts[0].shape
        if got.dtype.kind in "biu":
            assert got.astype(np.float64).tolist() == want.tolist()
        else:
            assert deviation(got, want) <= tol


def test_in_place_all_reduce_writes_the_input_and_returns_it(fake):
    comms = pair()
    xs = [on(r, np.full(5, r + 1, np.float32)) for r in range(2)]
    assert all(c.all_reduce_(x, "max") is x for c, x in zip(comms, xs, strict=True))
    assert all(x.numpy().tolist() == [2.0] * 5 for x in xs)
    assert [args[0] == args[1] for args in fake.calls_of("ncclAllReduce")] == [True, True]


@pytest.mark.parametrize("name", ["float32", "bfloat16", "int16", "complex128", "bool", "float8_e5m2"])
def test_all_gather_stacks_every_ranks_tensor_byte_exact(fake, name):
    comms, parts = pair(), inputs(name, (3, 2))
    outs = [c.all_gather(on(r, parts[r])) for r, c in enumerate(comms)]
    for out in outs:
        assert out.shape == (2, 3, 2) and out.numpy().tobytes() == np.stack(parts).tobytes()
    item = nbx.dtypes.TABLE[name].itemsize
    counts = {args[2] for args in fake.calls_of("ncclAllGather")}
    assert counts == ({6 * item} if name in ("int16", "complex128", "bool") else {6})


def test_in_place_all_gather_sends_the_ranks_own_chunk(fake):
    comms = pair()
    bufs = [on(r, np.array([10, 11, 20, 21], np.int64) * (np.arange(4) // 2 == r)) for r in range(2)]
    for c, b in zip(comms, bufs, strict=True):
        c.all_gather_(b)
    assert [b.numpy().tolist() for b in bufs] == [[10, 11, 20, 21]] * 2
    sends = [args[0] - args[1] for args in fake.calls_of("ncclAllGather")]
    assert sends == [0, 2 * 8]   # rank 1 sends from its chunk: 2 elements of 8 bytes in


@pytest.mark.parametrize("name, op", [("float32", "sum"), ("int32", "max"), ("complex64", "avg"), ("bool", "min")])
def test_reduce_scatter_gives_each_rank_its_block_of_dim_0(fake, name, op):
    comms, parts = pair(), inputs(name, (4, 3))
    outs = [c.reduce_scatter(on(r, parts[r]), op) for r, c in enumerate(comms)]
    want = expected(parts, op)
    for r, out in enumerate(outs):
        assert out.shape == (2, 3)
        np.testing.assert_allclose(out.numpy().astype(want.dtype), want[2 * r:2 * r + 2], rtol=1e-6)


def test_in_place_reduce_scatter_returns_the_view_of_the_ranks_block(fake):
    comms = pair()
    xs = [on(r, np.arange(8, dtype=np.float64).reshape(4, 2) * (r + 1)) for r in range(2)]
    blocks = [c.reduce_scatter_(x) for c, x in zip(comms, xs, strict=True)]
    full = np.arange(8, dtype=np.float64).reshape(4, 2) * 3
    assert blocks[0].numpy().tolist() == full[:2].tolist() and blocks[1].numpy().tolist() == full[2:].tolist()
    assert blocks[1].data_ptr() == xs[1].data_ptr() + 4 * 8
    assert [args[0] - args[1] for args in fake.calls_of("ncclReduceScatter")] == [0, -32]


@pytest.mark.parametrize("root", [0, 1])
def test_broadcast_copies_the_roots_tensor_to_every_rank_out_of_place_and_in_place(fake, root):
    comms, parts = pair(), inputs("complex64", (2, 3))
    outs = [c.broadcast(on(r, parts[r]), root) for r, c in enumerate(comms)]
    assert all(o.numpy().tobytes() == parts[root].tobytes() for o in outs)
    xs = [on(r, parts[r]) for r in range(2)]
    for c, x in zip(comms, xs, strict=True):
        c.broadcast_(x, root)
    assert all(x.numpy().tobytes() == parts[root].tobytes() for x in xs)
    assert {args[4] for args in fake.calls_of("ncclBroadcast")} == {root}


def test_send_and_recv_move_a_tensor_between_two_ranks_inside_a_group(fake):
    a, b = pair()
    payload = np.arange(6, dtype=np.int16).reshape(2, 3)
    out = nbx.empty((2, 3), "int16", "cuda:1")
    with a.group():
        a.send(on(0, payload), peer=1)
    with b.group():
        assert b.recv(out, peer=0) is out
    assert out.numpy().tolist() == payload.tolist()
    assert fake.groups == 4 and fake.calls_of("ncclSend")[0][1:4] == (12, 1, 1)  # 12 bytes, ncclUint8, peer 1


def test_collectives_run_on_the_current_stream_with_the_communicators_device_current(fake):
    comms = pair()
    assert runtime.get_device() == 0
    x1 = on(1, [1.0, 2.0])
    with nvidia.Stream(device=1) as s:
        comms[1].all_reduce(x1)
    comms[0].all_reduce(on(0, [3.0, 4.0]))
    calls = [(device, args[-1]) for fn, device, args in fake.log if fn == "ncclAllReduce"]
    assert calls == [(1, s.handle), (0, nvidia.current_stream(0).handle)]


def test_empty_tensors_make_no_nccl_call(fake):
    comms = pair()
    for r, c in enumerate(comms):
        assert c.all_reduce(nbx.empty((0, 3), "float32", f"cuda:{r}")).shape == (0, 3)
        assert c.all_gather(nbx.empty((0,), "float32", f"cuda:{r}")).shape == (2, 0)
    assert fake.calls_of("ncclAllReduce") == fake.calls_of("ncclAllGather") == []


# ---- refusals before NCCL is called ---------------------------------------------------------------
def test_buffers_on_another_device_or_not_contiguous_are_refused_before_nccl(fake):
    comm, _ = pair()
    fake.log.clear()
    with pytest.raises(CrossDeviceError, match=r"all_reduce's input is on cuda:1, but rank 0's communicator "
                                               r"works on cuda:0; copy it with .to\('cuda:0'\)"):
        comm.all_reduce(on(1, [1.0]))
    with pytest.raises(CrossDeviceError, match="broadcast's input is on cpu"):
        comm.broadcast(nbx.from_numpy(np.zeros(3, np.float32)))
    with pytest.raises(ViewError, match=r"send's buffer \(shape \(4,\), strides \(2,\)\) is not contiguous"):
        comm.send(on(0, np.zeros(8, np.float32))[::2], peer=1)
    with pytest.raises(StreamMismatchError, match="is not a stream of cuda:0"):
        comm.all_reduce(on(0, [1.0]), stream=nvidia.Stream(device=1))
    assert [fn for fn, _, _ in fake.log if fn.startswith("nccl") and fn != "ncclGetUniqueId"] == []


def test_outputs_of_the_wrong_size_or_dtype_and_unsplittable_inputs_are_refused(fake):
    comm, _ = pair()
    x = on(0, np.zeros((3, 2), np.float32))
    with pytest.raises(ShapeError, match=r"all_gather's output holds 6 elements \(shape \(3, 2\)\); 12 are needed"):
        comm.all_gather(x, out=on(0, np.zeros((3, 2), np.float32)))
    with pytest.raises(DTypeError, match="all_reduce's output is float64, the input float32; NCCL does not convert"):
        comm.all_reduce(x, out=on(0, np.zeros((3, 2), np.float64)))
    with pytest.raises(ShapeError, match=r"reduce_scatter splits dim 0 among 2 ranks; shape \(3, 2\) does not split"):
        comm.reduce_scatter(x)
    with pytest.raises(ShapeError, match="all_gather_'s buffer holds 3 elements, not a multiple of the world size 2"):
        comm.all_gather_(on(0, np.zeros(3, np.float32)))
    with pytest.raises(ArgumentError, match="root 2 is outside 0..1"):
        comm.broadcast_(x, root=2)
    with pytest.raises(NcclDTypeError, match="NCCL has no type for uint16, so it cannot sum-reduce it"):
        comm.all_reduce(on(0, np.zeros(2, np.uint16)))
    assert fake.calls_of("ncclAllReduce") == fake.calls_of("ncclAllGather") == []


def test_float8_reductions_on_an_nccl_before_2_24_are_refused_naming_the_version(fake):
    fake.version = 22105
    nccl_library._library = nccl_library.NcclLibrary(fake, "simulated libnccl 2.21.5")
    comm, other = pair()
    x = nbx.from_numpy(np.zeros(4, ml_dtypes.float8_e4m3fn), "cuda:0")
    with pytest.raises(NcclDTypeError, match="needs ncclFloat8e4m3, which arrived in NCCL 2.24; this is NCCL 2.21.5"):
        comm.all_reduce(x)
    gathered = [c.all_gather(nbx.from_numpy(np.ones(4, ml_dtypes.float8_e4m3fn), f"cuda:{r}"))
                for r, c in enumerate((comm, other))]
    assert gathered[0].numpy().astype(np.float32).tolist() == [[1.0] * 4] * 2
    assert {args[3] for args in fake.calls_of("ncclAllGather")} == {1}   # moved as ncclUint8


# ---- from the environment a launcher prepared ----------------------------------------------------
def test_from_env_rank_0_writes_the_id_file_and_rank_1_reads_it(fake, tmp_path):
    env = {"NBX_NCCL_WORLD_SIZE": "2", "NBX_NCCL_ID_FILE": str(tmp_path / "id.hex")}
    c0 = nccl.Communicator.from_env(environ=dict(env, NBX_NCCL_RANK="0", NBX_NCCL_DEVICE="cuda:0"))
    c1 = nccl.Communicator.from_env(environ=dict(env, NBX_NCCL_RANK="1", NBX_NCCL_DEVICE="cuda:1"), timeout=1)
    assert (c0.rank, c1.rank, c1.device) == (0, 1, nbx.as_device("cuda:1"))
    assert runtime.get_device() == 1   # the rank's device is the process's current one from now on
    assert len({c["uid"] for c in fake.comms.values()}) == 1
    with pytest.raises(NcclBootstrapError, match="exists already"):
        nccl.Communicator.from_env(environ=dict(env, NBX_NCCL_RANK="0", NBX_NCCL_DEVICE="cuda:0"))


def test_from_env_takes_the_hex_id_and_refuses_a_missing_device(fake):
    uid = nccl.unique_id()
    env = {"NBX_NCCL_WORLD_SIZE": "2", "NBX_NCCL_RANK": "1", "NBX_NCCL_UNIQUE_ID": uid.hex()}
    comm = nccl.Communicator.from_env(device=1, environ=env)
    assert comm.device == nbx.as_device("cuda:1") and fake.comms[comm.handle]["uid"] == uid.raw
    with pytest.raises(NcclBootstrapError, match=r"no device for rank 1: pass device= or set \$NBX_NCCL_DEVICE"):
        nccl.Communicator.from_env(environ=env)
