"""Every global a Triton kernel of nbx.kernels reads is something the compiler accepts.

Triton's compiler (3.6 on the H200) refuses a @triton.jit function that reads a module global
which is a plain Python int or float ("Cannot access global variable ... instantiated as
constexpr"), while the interpreter the suite runs on accepts it: kernels that pass every interp
test then fail to compile on the GPU. Such globals must be `tl.constexpr(...)` values."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap

import triton
import triton.language as tl

import nbx.kernels


def _kernel_types() -> tuple:
    """What @triton.jit makes: a JITFunction, or under TRITON_INTERPRET=1 (the suite) an InterpretedFunction."""
    kinds = [triton.runtime.jit.JITFunction]
    from triton.runtime import interpreter
    kinds.append(interpreter.InterpretedFunction)
    return tuple(kinds)


def _jit_functions():
    kinds = _kernel_types()
    for info in pkgutil.walk_packages(nbx.kernels.__path__, "nbx.kernels."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, kinds) and getattr(value.fn, "__module__", None) == module.__name__:
                yield module, name, value


def _free_names(fn) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    func = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    bound = {a.arg for a in func.args.args + func.args.kwonlyargs}
    loads = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    return loads - bound


def test_no_kernel_reads_a_plain_python_number_as_a_global():
    offending = []
    for module, name, kernel in _jit_functions():
        for free in _free_names(kernel.fn):
            if free not in kernel.fn.__globals__:
                continue
            value = kernel.fn.__globals__[free]
            if isinstance(value, (bool, int, float)) and not isinstance(value, tl.constexpr):
                offending.append(f"{module.__name__}.{name} reads {free} = {value!r}")
    assert not offending, "make these tl.constexpr(...):\n" + "\n".join(sorted(offending))


def test_the_walk_finds_the_kernels_of_every_family():
    found = {module.__name__.split(".")[2] for module, _, _ in _jit_functions()}
    assert {"elementwise", "copies", "fft", "sort", "sampling", "attention", "matmul"} <= found, found


def _constexpr_annotations_in_loops(fn) -> list[int]:
    """Lines of `name: tl.constexpr = ...` inside a loop of fn: Triton's compiler unrolls a
    static_range and then refuses the second assignment ("constexpr cannot be reassigned"), which
    the interpreter never sees."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    lines = []
    for loop in (node for node in ast.walk(tree) if isinstance(node, (ast.For, ast.While))):
        for node in ast.walk(loop):
            if isinstance(node, ast.AnnAssign) and "constexpr" in ast.unparse(node.annotation):
                lines.append(node.lineno)
    return lines


def test_no_kernel_annotates_a_constexpr_inside_a_loop():
    offending = [f"{module.__name__}.{name} line {line}" for module, name, kernel in _jit_functions()
                 for line in _constexpr_annotations_in_loops(kernel.fn)]
    assert not offending, "drop the tl.constexpr annotation (the value is constexpr already):\n" + "\n".join(offending)
