"""Host work spreads over the machine's compute cores and computes what the serial code computes."""
import os

import ml_dtypes
import numpy as np

from nbx.core import host


def test_compute_cores_respects_the_process_affinity():
    cores = host.compute_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))


def test_row_chunks_cover_every_row_once_in_order():
    chunks = host.row_chunks(1000, 64 << 10)
    covered = [i for c in chunks for i in range(c.start, c.stop)]
    assert covered == list(range(1000))
    assert len(chunks) <= host.compute_cores()
    assert host.row_chunks(10, 4) == [slice(0, 10)]  # too small to be worth a thread


def test_parallel_convert_equals_a_serial_astype_bit_for_bit():
    src = np.random.default_rng(0).standard_normal(3_000_000).astype(ml_dtypes.bfloat16)
    out = host.parallel_convert(src, np.float32)
    np.testing.assert_array_equal(out, src.astype(np.float32))
    back = host.parallel_convert(out.reshape(1000, -1)[:, :3000], ml_dtypes.bfloat16)
    np.testing.assert_array_equal(back, out.reshape(1000, -1)[:, :3000].astype(ml_dtypes.bfloat16))


def test_parallel_map_keeps_the_order_of_its_items():
    assert host.parallel_map(lambda i: i * i, range(50)) == [i * i for i in range(50)]
