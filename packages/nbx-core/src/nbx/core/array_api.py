"""nbx's Array API namespace as an importable module, `import nbx.core.array_api as xp`, as
array-api-compat and the conformance suites expect: the same namespace as x.__array_namespace__()
(not `nbx.array_api`: each distribution's wheel ships only its own subpackage of `nbx`)."""
from __future__ import annotations

from nbx.core.namespace import namespace as _namespace

globals().update({k: v for k, v in vars(_namespace()).items() if not k.startswith("_") or k.startswith("__array")})


def __getattr__(name: str):
    return getattr(_namespace(), name)  # a missing name raises MissingFunctionError (an AttributeError)


def __dir__():
    return sorted(vars(_namespace()))
