"""nbx.core.spec: one spec per op binds, checks once per signature, and hands one named call on."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import device_files, dispatch, spec
from nbx.core.errors import ArgumentError, DTypeError, ShapeError, SignatureError


@pytest.fixture
def counted_check():
    """A throwaway op whose check counts its runs, registered on the cpu."""
    runs = []

    def check(call, facts):
        runs.append(call.x.shape)
        if call.x.dtype.kind != "float":
            raise DTypeError("spec_probe takes floats")
        facts.device, facts.out_dtype, facts.row_dim = call.x.device, call.x.dtype, call.dim % max(call.x.ndim, 1)

    op = spec.front_end(spec.define(spec.OpSpec("spec_probe", spec.params("x", dim=-1, scale=1.0), check)))
    dispatch.register("spec_probe", "cpu", provider="test_op_specs")(
        lambda call: nbx.asarray(np.asarray(call.x.numpy() * call.scale)))
    yield op, runs
    spec.forget()


def test_a_repeated_signature_runs_its_check_once_and_new_floats_still_reach_the_implementation(counted_check):
    op, runs = counted_check
    x = nbx.asarray(np.ones(3, np.float32))
    assert op(x, scale=2.0).tolist() == [2.0, 2.0, 2.0]
    assert op(x, scale=5.0).tolist() == [5.0, 5.0, 5.0]
    assert len(runs) == 1
    op(nbx.asarray(np.ones(4, np.float32)), scale=2.0)  # another shape: another signature
    assert len(runs) == 2


def test_a_refused_call_is_refused_every_time(counted_check):
    op, runs = counted_check
    x = nbx.asarray(np.ones(3, np.int32))
    for _ in range(2):
        with pytest.raises(DTypeError):
            op(x)
    assert len(runs) == 2


def test_a_new_registration_or_device_facts_generation_drops_the_prepared_signatures(counted_check):
    op, runs = counted_check
    x = nbx.asarray(np.ones(3, np.float32))
    op(x)
    dispatch.register("spec_probe", "cpu", provider="test_op_specs")(lambda call: call.x)
    op(x)
    device_files.advance_generation()
    op(x)
    assert len(runs) == 3


def test_calls_watched_by_an_observer_are_checked_and_recorded_every_time(counted_check):
    op, runs = counted_check
    x = nbx.asarray(np.ones(3, np.float32))
    seen = []

    class Observer:
        def record(self, name, fn, *args, **kwargs):
            seen.append((name, type(args[0]).__name__))
            return fn(*args, **kwargs)

        def host_access(self, tensor, what):
            pass

        def allocated(self, storage):
            pass

    op(x)
    with dispatch.observed(Observer()):
        op(x)
        op(x)
    assert len(runs) == 3 and seen == [("spec_probe", "spec_probe_call")] * 2


def test_keywords_bind_by_name_and_numpy_spelling_and_wrong_calls_are_named_errors(counted_check):
    op, _ = counted_check
    x = nbx.asarray(np.ones((2, 3), np.float32))
    call = spec.spec_of("spec_probe").bind(x, axis=0)
    assert (call.dim, call.scale, call.row_dim, call.out_dtype) == (0, 1.0, 0, nbx.float32)
    with pytest.raises(ArgumentError, match="spec_probe got both dim= and axis="):
        op(x, dim=0, axis=0)
    with pytest.raises(SignatureError, match="unexpected keyword argument 'keepdims'"):
        op(x, keepdims=True)
    with pytest.raises(TypeError, match="missing its argument 'x'"):
        op()
    with pytest.raises(TypeError, match="at most 3 positional"):
        op(x, 0, 1.0, 2)


def test_a_fact_named_as_a_parameter_is_refused_when_the_spec_is_first_used():
    def check(call, facts):
        facts.device, facts.out_dtype, facts.dim = call.x.device, call.x.dtype, 0

    bad = spec.OpSpec("spec_shadow", spec.params("x", dim=-1), check)
    with pytest.raises(TypeError, match="named as its parameters"):
        bad.bind(nbx.asarray(np.ones(2, np.float32)))


def test_the_hot_ops_have_one_spec_each_and_their_rules_come_from_it():
    for name in ("add", "multiply", "exp", "sum", "argmax", "softmax", "rms_norm", "layer_norm", "add_rms_norm",
                 "matmul"):
        assert spec.spec_of(name) is not None, name
    x = nbx.asarray(np.ones((2, 3), np.float16))
    call = spec.spec_of("sum").bind(x, axis=1, keepdims=True)
    assert (call.dims, call.out_dtype, call.compute_dtype) == ((1,), nbx.float16, nbx.float32)
    assert spec.spec_of("add").bind(x, 2).out_dtype is nbx.float16
    with pytest.raises(ShapeError):
        nbx.add(x, nbx.asarray(np.ones(4, np.float16)))


def test_a_repeat_through_slots_fills_them_from_each_calls_arguments_its_defaults_and_fixed_values():
    def check(call, facts):
        facts.device, facts.out_dtype = call.x.device, call.x.dtype

    filled = []

    def run(values):
        filled.append(dict(values))
        values["out"] = values["v"]
        return values

    op = spec.front_end(spec.define(spec.OpSpec("spec_slots_probe", spec.params("x", dim=-1, scale=1.0), check)))
    impl = dispatch.register("spec_slots_probe", "cpu", provider="test_op_specs")(lambda call: None)
    impl.prepare = lambda call: spec.Slots(run, {"v": spec.Arg("x"), "s": spec.Arg("scale"), "d": spec.Arg("dim"),
                                                 "k": 7, "out": None}, "out")
    try:
        x, y = nbx.asarray(np.ones(3, np.float32)), nbx.asarray(np.zeros(3, np.float32))
        assert op(x, scale=2.0) is x    # the first call: Slots over its Call
        assert op(y, scale=5.0) is y    # the repeat: the generated function over the arguments
        assert op(x, scale=3.0) is x
        assert [(f["v"] is t, f["s"], f["d"], f["k"], f["out"]) for f, t in zip(filled, (x, y, x))] == [
            (True, 2.0, -1, 7, None), (True, 5.0, -1, 7, None), (True, 3.0, -1, 7, None)]
    finally:
        spec.forget()
