"""No nbx module imports torch: every module of every distribution, and every test module, imports
in a fresh interpreter where `import torch` (and `torch.*`) raises."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs in the child: install the blocker, then import each module named on stdin (JSON list) and
# print {module: error} for those that fail. A module that imports torch fails with the blocker's message.
IMPORT_ALL = r'''
import importlib, json, sys, traceback

class TorchBlocker:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"import of {name!r} blocked: nbx must never import torch", name=name)
        return None

for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
    del sys.modules[name]
sys.meta_path.insert(0, TorchBlocker())
try:
    import torch  # noqa: F401
    raise SystemExit("the torch blocker did not block")
except ModuleNotFoundError:
    pass

failures = {}
for module in json.load(sys.stdin):
    try:
        importlib.import_module(module)
    except BaseException as exc:  # pytest's Skipped is a BaseException; a skip-on-import is no failure
        if type(exc).__name__ == "Skipped":
            continue
        last = traceback.extract_tb(exc.__traceback__)[-1]
        failures[module] = f"{type(exc).__name__}: {exc} (at {last.filename}:{last.lineno})"
print(json.dumps(failures))
'''


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_modules() -> list[str]:
    """Every module file under packages/*/src/nbx (namespace portions without __init__.py included)."""
    names = set()
    for src in ROOT.glob("packages/*/src"):
        for path in (src / "nbx").rglob("*.py"):
            names.add(module_name(path, src))
    return sorted(names)


def imports_with_torch_blocked(modules: list[str], env: dict[str, str]) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], input=json.dumps(modules), capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_module_of_every_distribution_imports_without_torch(source_env):
    modules = product_modules()
    assert "nbx.core.tensor" in modules and "nbx.core.cli" in modules
    failures = imports_with_torch_blocked(modules, source_env)
    assert failures == {}, "\n".join(f"{m}: {e}" for m, e in failures.items())


def test_every_test_module_imports_without_torch(source_env):
    """Test modules import nbx the way users do; one that needs torch must say so with importorskip."""
    tests = sorted(ROOT.glob("tests/**/test_*.py"))
    assert Path(__file__) in tests
    # each test module is imported by file under a unique name, as pytest's importlib mode does
    loader = ("import importlib.util, sys\n"
              "def load(path, name):\n"
              "    spec = importlib.util.spec_from_file_location(name, path)\n"
              "    module = importlib.util.module_from_spec(spec); sys.modules[name] = module\n"
              "    spec.loader.exec_module(module)\n")
    script = IMPORT_ALL.replace("importlib.import_module(module)", "load(*module)")
    script = script.replace("failures[module]", "failures[module[0]]")
    pairs = [[str(p), f"nbx_suite_{i}_{p.stem}"] for i, p in enumerate(tests)]
    # the folders pytest puts on sys.path (pyproject's pythonpath: shared test helpers)
    listed = re.search(r"^pythonpath = \[(.*)\]", (ROOT / "pyproject.toml").read_text(), re.M)
    folders = [str(ROOT / f.strip(' "')) for f in listed.group(1).split(",")] if listed else []
    source_env["PYTHONPATH"] = ":".join(folders + [source_env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-c", loader + script], input=json.dumps(pairs), capture_output=True,
                          text=True, env=source_env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert failures == {}, "\n".join(f"{m}: {e}" for m, e in failures.items())


def test_a_module_that_imports_torch_is_caught(tmp_path: Path, source_env):
    (tmp_path / "uses_torch.py").write_text("import numpy\nfrom torch.nn import functional\n")
    (tmp_path / "plain.py").write_text("import numpy\n")
    source_env["PYTHONPATH"] = f"{tmp_path}:{source_env['PYTHONPATH']}"
    failures = imports_with_torch_blocked(["uses_torch", "plain"], source_env)
    assert list(failures) == ["uses_torch"]
    assert "import of 'torch' blocked: nbx must never import torch" in failures["uses_torch"]
