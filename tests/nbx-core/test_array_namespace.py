"""__array_namespace__ returns a namespace with the standard's spellings, refusing what is missing."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.errors import NotSupportedError


def test_namespace_spells_functions_as_the_standard():
    x = nbx.asarray([[1.0, 2.0], [3.0, 4.0]])
    xp = x.__array_namespace__()
    assert xp.__array_api_version__ == "2024.12"
    assert xp.sum(x, axis=0, keepdims=True).tolist() == [[4.0, 6.0]]
    assert xp.permute_dims(x, (1, 0)).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert xp.matrix_transpose(x).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert xp.clip(x, 2.0, 3.0).tolist() == [[2.0, 2.0], [3.0, 3.0]]
    assert xp.isdtype(xp.float32, "real floating") and not xp.isdtype(xp.int8, ("bool", "real floating"))
    assert xp.can_cast(xp.int8, xp.int16) and not xp.can_cast(xp.float32, xp.int32)
    assert xp.moveaxis(xp.zeros((2, 3, 4)), 0, -1).shape == (3, 4, 2)
    assert xp.cumulative_sum(xp.asarray([1, 2, 3])).tolist() == [1, 3, 6]
    assert xp.reshape(x, (4,), copy=True).storage is not x.storage


def test_namespace_functions_agree_with_numpy_on_a_small_program():
    a = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    x = nbx.asarray(a)
    xp = x.__array_namespace__()
    got = xp.mean(xp.exp(x - xp.max(x, axis=1, keepdims=True)), axis=1)
    expected = np.mean(np.exp(a - a.max(axis=1, keepdims=True)), axis=1)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("name", ["sort", "concat", "unique_values", "nonzero"])
def test_functions_not_implemented_yet_are_refused_by_name(name):
    xp = nbx.ones(1).__array_namespace__()
    with pytest.raises(NotSupportedError, match=f"the Array API function {name} is not implemented in nbx yet"):
        getattr(xp, name)


def test_an_unknown_api_version_is_refused():
    with pytest.raises(NotSupportedError, match="Array API version 2019.01"):
        nbx.ones(1).__array_namespace__(api_version="2019.01")
