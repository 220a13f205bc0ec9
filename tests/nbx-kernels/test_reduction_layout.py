"""How a reduction reads its input (in place, or through a declared contiguous copy), how long rows
split into partials, what each call declares as its cost, and the refusals on the kernel path."""
import math

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.errors import DTypeError, ShapeError
from nbx.kernels import launch
from nbx.kernels.cost import LAUNCH, RESULT, price
from nbx.kernels.reduction import layout

# shapes here are chosen from the device file's tiles to take each path: serve those tiles
pytestmark = pytest.mark.usefixtures("device_file_settings")

SETTINGS = {"block": 1024, "num_warps": 4, "programs": 4}


def strides_of(shape):
    return tuple(int(s) for s in np.cumprod((1,) + tuple(reversed(shape[1:])))[::-1])


def test_a_row_reduction_of_a_contiguous_tensor_reads_in_place():
    view = layout.plan((6, 100), (100, 1), (1,), ordered=False)
    assert (view.rows, view.cols, view.stride0, view.col_stride, view.copy) == (6, 100, 100, 1, None)


def test_a_transposed_tensor_collapses_for_a_sum_but_an_argmax_keeps_the_dims_order():
    shape, strides = (4, 5), (1, 4)  # the transpose of a contiguous (5, 4)
    assert layout.plan(shape, strides, None, ordered=False).copy is None
    ordered = layout.plan(shape, strides, None, ordered=True)
    assert ordered.copy == (0, 1) and (ordered.rows, ordered.cols) == (1, 20)


def test_two_kept_dims_are_indexed_in_place_and_two_apart_reduced_dims_are_copied():
    shape = (3, 4, 5)
    middle = layout.plan(shape, strides_of(shape), (1,), ordered=False)
    assert (middle.inner, middle.stride0, middle.stride1, middle.col_stride) == (5, 20, 1, 5)
    assert middle.rows_contiguous and middle.copy is None
    apart = layout.plan(shape, strides_of(shape), (0, 2), ordered=False)
    assert apart.copy == (1, 0, 2) and (apart.rows, apart.cols) == (4, 15)


def test_few_long_rows_split_into_column_ranges_and_many_rows_do_not():
    long_rows = layout.tile(layout.Rows(2, 5000, 1, 5000, 0, 1), SETTINGS)
    assert long_rows.block_c == 1024 and long_rows.splits == 2 and long_rows.split_len == 3072
    many = layout.tile(layout.Rows(64, 5000, 1, 5000, 0, 1), SETTINGS)
    assert many.splits == 1 and many.split_len >= 5000
    columns = layout.tile(layout.Rows(300, 7, 1, 1, 0, 300), SETTINGS)  # rows are the contiguous dim
    assert columns.block_r == 128 and columns.block_c == 8


def test_a_scan_collapses_input_and_output_together():
    shape = (3, 4, 5)
    x_view, out_view = layout.scan_plan(shape, strides_of(shape), strides_of(shape), 1)
    assert (x_view.rows, x_view.cols, x_view.inner, x_view.col_stride) == (15, 4, 5, 5)
    four = (2, 3, 4, 5)
    permuted = (60, 5, 15, 1)  # a (2, 4, 3, 5) tensor with its dims 1 and 2 swapped
    assert layout.scan_plan(four, permuted, strides_of(four), 3) == (None, None)


def test_the_declared_cost_of_an_in_place_row_reduction_is_its_output(device):
    x = nbx.zeros((8, 300), dtype=nbx.bfloat16, device=device)
    cost = price("sum", x, dim=1)
    assert [(b.name, b.nbytes, b.lifetime) for b in cost.buffers] == [("out", 8 * 2, RESULT)]
    assert cost.bytes_moved == x.nbytes + 16 and cost.launches == 1
    assert nbx.sum(x, dim=1).nbytes == cost.outputs


def test_split_rows_declare_their_partials_and_a_copy_is_declared_as_workspace(device):
    x = nbx.zeros((2, 5000), dtype=nbx.float16, device=device)
    splits = layout.tile(layout.Rows(2, 5000, 1, 5000, 0, 1), launch.tiles("reduction", device)).splits
    assert splits > 1  # two rows are far fewer programs than the device file asks for
    cost = price("logsumexp", x, dim=1)  # two float32 states per (row, column range)
    assert [(b.name, b.nbytes, b.lifetime) for b in cost.buffers] == [("out", 4, RESULT),
                                                                      ("partials", 2 * splits * 8, LAUNCH)]
    assert cost.launches == 2
    y = nbx.zeros((3, 4, 5), dtype=nbx.float32, device=device)
    copy = price("var", y, dim=(0, 2), keepdim=True)
    assert ("contiguous copy", y.nbytes, LAUNCH) in [(b.name, b.nbytes, b.lifetime) for b in copy.buffers]
    assert copy.outputs == 4 * 4 and copy.launches == 2


def test_indexed_reductions_and_scans_declare_every_output(device):
    x = nbx.zeros((6, 7), dtype=nbx.float16, device=device)
    assert price("argmax", x, dim=1).outputs == 6 * 8
    assert price("max_with_indices", x, dim=0, keepdim=True).outputs == 7 * 2 + 7 * 8
    assert price("cummax", x, dim=1).outputs == 42 * 2 + 42 * 8
    assert price("cumsum", x.T, dim=0).outputs == 42 * 2
    assert price("cumsum", nbx.zeros(5, dtype=nbx.int8, device=device)).outputs == 5 * 8
    assert price("vector_norm", x, 3, 1).outputs == 6 * 2
    assert price("count_nonzero", x).outputs == 8


def test_the_kernel_path_refuses_what_the_front_ends_refuse(device):
    flags = nbx.asarray([True, False]).to(device)
    with pytest.raises(DTypeError, match="sum does not accept bool"):
        nbx.sum(flags)
    with pytest.raises(DTypeError, match="mean does not accept int32"):
        nbx.mean(nbx.zeros(3, dtype=nbx.int32, device=device))
    with pytest.raises(ShapeError, match="max of an empty tensor"):
        nbx.max(nbx.zeros((2, 0), device=device), dim=1)
    with pytest.raises(ShapeError, match="argmax reduces over one dim or all of them"):
        nbx.argmax(nbx.zeros((2, 2), device=device), dim=(0, 1))
    with pytest.raises(ShapeError, match="vector_norm of ord -inf over an empty tensor"):
        nbx.vector_norm(nbx.zeros((0,), device=device), -math.inf)


def test_dtypes_without_a_triton_type_are_refused_by_name(device):
    z = nbx.asarray(np.ones((2, 3), np.complex64)).to(device)
    for op in (nbx.sum, nbx.mean, nbx.any, nbx.count_nonzero, nbx.vector_norm):
        with pytest.raises(DTypeError, match="Triton has no element type for complex64"):
            op(z)
