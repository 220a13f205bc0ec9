"""README.md: every ```python example runs in its own fresh interpreter; its commands are the CI's."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, source) of each ```python block."""
    return [(text[:m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"^```python\n(.*?)^```", text,
                                                                                 re.MULTILINE | re.DOTALL)]


BLOCKS = python_blocks(README)


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("line, source", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_example_runs_in_a_fresh_interpreter(line, source, tmp_path, source_env):
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, env=source_env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, f"README.md:{line} failed:\n{done.stderr}"


def fresh_machine_commands() -> list[str]:
    section = README.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```\n(.+?)\n```", section, re.MULTILINE)


def test_the_readme_gives_the_main_job_and_the_test_suite_commands():
    main_job, test_suite = fresh_machine_commands()
    assert "pip install -e packages/nbx-core -e packages/nbx-models" in main_job
    assert main_job.endswith("&& nbx demo")
    assert test_suite.endswith("hatch test")


def test_ci_runs_exactly_the_readme_test_command():
    _, test_suite = fresh_machine_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_suite in ci.splitlines()
    assert "set -euo pipefail" in ci
