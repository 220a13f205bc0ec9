"""Call sites: what follows from an elementwise call's shapes, strides and dtypes is worked out once
and replayed; on a GPU the compiled kernel is launched directly, per pointer alignment; declared
costs of the activations and fused ops count what they read and write."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import plans
from nbx.kernels.cost import price
from nbx.kernels.elementwise import callsite, functions
from nbx.kernels.elementwise.kernel import DENSE, SPLAT, STRIDED, VALUE

rng = np.random.default_rng(3)


def test_a_repeated_call_reuses_its_plan_and_new_strides_make_a_new_one(device):
    a = nbx.asarray(rng.standard_normal((4, 6)), dtype="float32").to(device)
    plans.reset()
    first = a + a
    assert plans.cached_count("elementwise") == 1
    second = a + a
    assert plans.cached_count("elementwise") == 1
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    np.testing.assert_array_equal((a.permute(1, 0) + 1.0).numpy(), a.numpy().T + np.float32(1.0))
    assert plans.cached_count("elementwise") == 2


def test_a_plan_names_each_operands_kind_and_passes_none_for_what_the_kernel_does_not_read(device):
    f32 = nbx.float32
    dense = nbx.asarray(rng.standard_normal((3, 5)), dtype="float32").to(device)
    zero_d = nbx.asarray(2.0, dtype="float32").to(device)
    plan = callsite.plan_for(functions.add, [dense, 1.5], f32, f32, None)
    assert (plan.meta["A"], plan.meta["B"], plan.meta["OUT"]) == (DENSE, VALUE, DENSE)
    assert plan.template[1:5] == [None] * 4 and plan.template[6:9] == [None] * 3  # no strides, no sizes
    plan = callsite.plan_for(functions.add, [dense.permute(1, 0), zero_d], f32, f32, None)
    assert (plan.meta["A"], plan.meta["B"]) == (STRIDED, SPLAT)
    assert plan.meta["INDEX64"] is False and plan.grid == (1,)


def test_offsets_past_int32_switch_the_kernel_to_int64_indices(device):
    f32 = nbx.float32
    one = nbx.zeros((1,), dtype="float32", device=device)
    huge = one.broadcast_to((2 ** 31 + 7,))
    assert callsite.plan_for(functions.add, [huge, 1.0], f32, f32, None).meta["INDEX64"] is True
    small = one.broadcast_to((2 ** 20,))
    assert callsite.plan_for(functions.add, [small, 1.0], f32, f32, None).meta["INDEX64"] is False


def test_the_plan_cache_is_bounded(device, monkeypatch):
    monkeypatch.setattr(plans, "MAX_PLANS", 3)
    plans.reset()
    x = nbx.asarray(rng.standard_normal(16), dtype="float32").to(device)
    for n in range(1, 9):
        nbx.exp(x[:n])
    assert 1 <= plans.cached_count("elementwise") <= 3


def test_integer_scalars_specialised_by_triton_get_plans_of_their_own(device):
    x = nbx.asarray(np.arange(10), dtype="int32").to(device)
    plans.reset()
    for k in (1, 16, 3, 1, 5, 32):
        np.testing.assert_array_equal((x * k).numpy(), np.arange(10, dtype=np.int32) * k)
    assert plans.cached_count("elementwise") == 3  # 1, a multiple of 16, any other int32


def test_declared_costs_of_activations_and_fused_ops(device):
    x = nbx.asarray(rng.standard_normal((4, 8)), dtype="bfloat16").to(device)
    cost = price("glu", x, 1, nbx.bfloat16)
    assert cost.allocated == 4 * 4 * 2 and cost.bytes_moved == x.nbytes + 4 * 4 * 2
    t = nbx.asarray(rng.standard_normal(8), dtype="bfloat16").to(device)
    cost = price("addcmul", x, t, x, 0.5, nbx.bfloat16)
    assert cost.bytes_moved == 2 * x.nbytes + t.nbytes + x.nbytes
    assert price("gelu", x, "tanh").allocated == x.nbytes   # an OpSpec op: priced from its front-end arguments
    assert price("clamp", x, 0.0, None).allocated == x.nbytes
    assert price("masked_fill", x, nbx.asarray(np.ones(8, bool)).to(device), 1.0).bytes_moved == 2 * x.nbytes + 8


@pytest.mark.gpu
def test_on_a_gpu_repeated_calls_launch_the_compiled_kernel_once_per_alignment():
    device = nbx.as_device("cuda")
    base = nbx.asarray(rng.standard_normal(4099), dtype="float32").to(device)
    plans.reset()
    aligned = base[:4096]
    out1 = aligned * 2.0
    out2 = aligned * 2.0  # the direct launch
    assert plans.compiled_count() == 1
    shifted = base[1:4097]  # 4 bytes off 16-byte alignment: Triton would compile it apart
    out3 = shifted * 2.0
    assert plans.compiled_count() == 2
    out4 = shifted * 2.0
    host = base.numpy()
    np.testing.assert_array_equal(out1.numpy(), host[:4096] * 2)
    np.testing.assert_array_equal(out2.numpy(), host[:4096] * 2)
    np.testing.assert_array_equal(out3.numpy(), host[1:4097] * 2)
    np.testing.assert_array_equal(out4.numpy(), host[1:4097] * 2)
