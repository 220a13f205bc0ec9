"""The API reference builds from the docstrings (pdoc), one page per distribution, so it cannot rot."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_tool():
    spec = importlib.util.spec_from_file_location("nbx_tools_api_docs", ROOT / "tools" / "api_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_distribution_gets_its_page_of_the_api_reference(tmp_path, source_env):
    dists = load_tool().distributions()
    assert set(dists) == {p.name for p in (ROOT / "packages").glob("nbx-*")} and "nbx-core" in dists
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "api_docs.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, env=source_env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    index = (tmp_path / "index.html").read_text()
    for dist, module in dists.items():
        page = tmp_path / Path(*module.split(".")).with_suffix(".html")
        assert page.is_file() and f">{dist}</a>" in index
        assert module in page.read_text()
    core = (tmp_path / "nbx" / "core.html").read_text()
    for documented in ("asarray", "Tensor", "result_type", "load_safetensors", "promote_types"):
        assert documented in core
