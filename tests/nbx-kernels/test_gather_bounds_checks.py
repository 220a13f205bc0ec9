"""The gather family's bounds checks read nothing back at the call: a bad index is masked by the
kernel and raises the device's pending record, read at the next synchronization (a host read,
nbx.synchronize, a DLPack export the host reads); on cpu the check is immediate."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import deferred_checks
from nbx.core.errors import IndexingError
from nbx.core.tensor import Tensor

rng = np.random.default_rng(31)


def _table(device):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    return a, nbx.asarray(a).to(device)


def _bad_calls(d, device):
    """(op name in the message, dim size, the call) of every checked op given one bad index."""
    ids = lambda v: nbx.asarray(v).to(device)  # noqa: E731
    return [
        ("take", 4, lambda: nbx.take(d, ids([0, 4]), axis=0)),
        ("take", 4, lambda: nbx.take(d, ids([-5]), axis=0)),
        ("take", 4, lambda: nbx.embedding(ids([[1, 99]]), d)),
        ("take", 6, lambda: nbx.index_select(d, 1, ids([6]))),
        ("take_along_axis", 6, lambda: nbx.take_along_axis(d, ids([[6]] * 4), axis=1)),
        ("take_along_axis", 4, lambda: nbx.gather(d, 0, ids([[0, 4]]))),
        ("scatter", 4, lambda: nbx.scatter(d, 0, ids([[4]]), 1.0)),
        ("scatter", 4, lambda: nbx.scatter(d, 0, ids([[4]]), 1.0, reduce="sum")),
        ("scatter", 4, lambda: nbx.scatter(d, 0, ids([[1], [4]]), 1.0, reduce="mean", include_self=False)),
        ("scatter", 4, lambda: nbx.scatter(d, 0, ids([[-5]]), 1.0, reduce="amax")),
        ("scatter", 4, lambda: nbx.index_add(d, 0, ids([4]), nbx.ones(1, 6).to(device))),
        ("scatter", 4, lambda: nbx.index_put(d, (ids([4]),), nbx.asarray(np.float32(1)).to(device), accumulate=True)),
    ] + ([("take", 4, lambda: d[ids([[0], [7]])])] if device.type == "cuda" else [])  # interp indexes on the host


@pytest.fixture
def host_reads(monkeypatch, device):
    """Counts Tensor.numpy calls and the device's synchronizations."""
    from nbx.core.device import get_backend
    counts = {"numpy": 0, "synchronize": 0}
    numpy, backend = Tensor.numpy, get_backend(device.type)
    sync = backend.synchronize

    def counted_numpy(self):
        counts["numpy"] += 1
        return numpy(self)

    def counted_sync(device):
        counts["synchronize"] += 1
        return sync(device)
    monkeypatch.setattr(Tensor, "numpy", counted_numpy)
    monkeypatch.setattr(backend, "synchronize", counted_sync)
    return counts


def test_a_bad_index_of_every_checked_op_raises_naming_the_op_and_the_dim_at_the_next_host_read(device):
    a, d = _table(device)
    for op, size, call in _bad_calls(d, device):
        out = call()  # no read-back: the call returns
        with pytest.raises(IndexingError, match=f"^{op}: an index is out of range for a dim of size {size} "):
            out.numpy()
        out.numpy()  # the record was cleared when read: once only
    np.testing.assert_array_equal(d.numpy(), a)  # out of place: the table is unchanged


def test_no_call_reads_anything_back_and_one_bad_call_among_good_ones_is_reported_once(device, host_reads):
    a, d = _table(device)
    good, bad, one = nbx.asarray([3, 0, -1]).to(device), nbx.asarray([2, 9]).to(device), nbx.asarray([[1]]).to(device)
    before = dict(host_reads)
    for _ in range(3):
        nbx.embedding(good, d)
        nbx.scatter(d, 0, one, 2.0, reduce="sum")
        nbx.index_put(d, (good,), d[:3], accumulate=True)
    nbx.embedding(bad, d)
    last = nbx.embedding(good, d)  # a good call after the bad one
    assert host_reads == before  # neither a host read nor a synchronization a call
    with pytest.raises(IndexingError, match="take: .*dim of size 4"):
        last.numpy()
    np.testing.assert_array_equal(last.numpy(), a[[3, 0, -1]])  # then the record is clear
    np.testing.assert_array_equal(nbx.embedding(good, d).numpy(), a[[3, 0, -1]])


@pytest.mark.parametrize("sync", ["item", "to_cpu", "synchronize", "dlpack", "tolist"])
def test_every_point_where_the_host_waits_for_the_device_raises_the_pending_check(device, sync):
    a, d = _table(device)
    out = nbx.take(d, nbx.asarray([5]).to(device), axis=0)
    wait = {"item": lambda: out[0, 0].item(), "to_cpu": lambda: out.to("cpu"),
            "synchronize": lambda: nbx.synchronize(device), "tolist": out.tolist,
            "dlpack": lambda: np.from_dlpack(out.to("cpu") if device.type == "cuda" else out)}[sync]
    with pytest.raises(IndexingError, match="take: .*dim of size 4"):
        wait()
    nbx.synchronize(device)  # nothing pending any more


def test_on_the_cpu_a_bad_index_is_refused_at_the_call():
    a, c = _table("cpu")
    with pytest.raises(IndexingError):
        nbx.take(c, nbx.asarray([4]), axis=0)
    with pytest.raises(IndexingError):
        nbx.scatter(c, 0, nbx.asarray([[4]]), 1.0, reduce="sum")
    with pytest.raises(IndexingError):
        nbx.index_put(c, (nbx.asarray([4]),), nbx.asarray(np.float32(1)))


def test_an_integer_array_assignment_checks_before_it_writes_back_leaving_the_target_unchanged(device):
    from nbx.core import indexing
    a, d = _table(device)
    with pytest.raises(IndexingError, match="scatter: .*dim of size 4"):  # the index_copy's check
        d[nbx.asarray([0, 4]).to(device)] = 5.0
    np.testing.assert_array_equal(d.numpy(), a)


def test_the_record_is_made_once_a_device_and_launched_with_every_call():
    device = nbx.as_device("interp")
    _, d = _table(device)
    nbx.take(d, nbx.asarray([0]).to(device), axis=0)
    flag = deferred_checks.flag_for(device, "take", 4)
    nbx.scatter(d, 0, nbx.asarray([[1]]).to(device), 1.0, reduce="sum")
    assert deferred_checks.flag_for(device, "take", 4) is flag and flag.dtype is nbx.int64
    nbx.synchronize(device)
