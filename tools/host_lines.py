"""Host-side lines of nbx's launch path at two commits (issue 14's "fewer lines on the host side").

    python3 tools/host_lines.py [BEFORE [AFTER]]     # defaults: 3416720 (the tree issue 14 was filed on), HEAD

A host line is a line of Python code (not blank, not a comment, not a docstring) outside the
bodies of @triton.jit functions. Counted per module of the families and shared machinery that
existed at BEFORE, plus the modules the launch-path work added to hold what they share (plans.py,
rows.py, nbx.core's op specs). Modules that later issues added for new features (matmul's int4,
fused and Hopper products, ...) are listed apart: they are new kernels' host code, not the path.
"""
from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize

KERNELS = "packages/nbx-kernels/src/nbx/kernels/"
FAMILIES = ("elementwise/", "softmax/", "norm/", "reduction/", "random/", "matmul/")
SHARED = ("__init__.py", "cost.py", "interp.py", "launch.py", "registry.py", "types.py", "version.py",
          "plans.py", "rows.py")
OTHERS = ("packages/nbx-core/src/nbx/core/spec.py", "packages/nbx-devices-nvidia/src/nbx/devices/nvidia/copies.py")


def files_at(commit: str) -> dict[str, str]:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, KERNELS, *OTHERS], check=True,
                           capture_output=True, text=True).stdout.split()
    wanted = [n for n in names if n.endswith(".py") and (n in OTHERS or n[len(KERNELS):] in SHARED
                                                         or n[len(KERNELS):].startswith(FAMILIES))]
    return {n: subprocess.run(["git", "show", f"{commit}:{n}"], check=True, capture_output=True,
                              text=True).stdout for n in wanted}


def _jit_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def host_lines(source: str) -> int:
    tree = ast.parse(source)
    skip = _jit_lines(tree) | _docstring_lines(tree)
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENDMARKER):
            code.update(range(tok.start[0], tok.end[0] + 1))
    return len(code - skip)


def main(before: str = "3416720", after: str = "HEAD") -> None:
    old, new = files_at(before), files_at(after)
    counts = {c: {n: host_lines(s) for n, s in files.items()} for c, files in ((before, old), (after, new))}
    both = sorted(set(old) & set(new))
    added = sorted(set(new) - set(old))
    gone = sorted(set(old) - set(new))
    path_added = [n for n in added if n in OTHERS or n[len(KERNELS):] in SHARED]
    feature_added = [n for n in added if n not in path_added]
    print(f"{'module':58} {before:>9} {after:>9}")
    for n in both + gone + path_added:
        print(f"{n.replace(KERNELS, ''):58} {counts[before].get(n, 0):9} {counts[after].get(n, 0):9}")
    total_before = sum(counts[before].values())
    total_after = sum(counts[after][n] for n in both + path_added)
    print(f"{'host lines of the launch path and its families':58} {total_before:9} {total_after:9}")
    print("modules added since for new features (not counted above):")
    for n in feature_added:
        print(f"  {n.replace(KERNELS, ''):56} {counts[after][n]:9}")


if __name__ == "__main__":
    main(*sys.argv[1:])
