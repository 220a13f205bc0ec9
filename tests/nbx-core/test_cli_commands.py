"""The `nbx` command: info, demo-cpu, and subcommands added by vendor plugins."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import nbx.core as nbx
from nbx.core import cli, cli_info
from nbx.core.errors import MissingFactError

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "VERSION").read_text().strip()
DISTRIBUTIONS = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))


def run_nbx(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbx.core.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def add_plugin(tmp_path: Path, env: dict[str, str], name: str, source: str) -> None:
    """A vendor plugin module nbx.devices.<name> in a folder put first on the child's PYTHONPATH."""
    folder = tmp_path / "plugins" / "nbx" / "devices" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(source)
    env["PYTHONPATH"] = f"{tmp_path / 'plugins'}:{env['PYTHONPATH']}"


def test_info_lists_every_distribution_with_its_version_and_the_cpu_backend(source_env):
    done = run_nbx("info", env=source_env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name in DISTRIBUTIONS:
        assert any(line.split()[:2] == [name, VERSION] for line in lines), f"{name} {VERSION} not listed"
    assert "  cpu      1 device(s): cpu" in lines
    for section in ("distributions:", "backends:", "plugin errors:", "device file in force:", "certificates:"):
        assert section in lines
    for vendor in ("amd", "apple", "nvidia"):
        assert any(line.startswith(f"  {vendor}: ") and "kernel certificate(s)" in line for line in lines)


def test_info_reports_a_plugin_that_fails_to_import(tmp_path, source_env):
    add_plugin(tmp_path, source_env, "zz_broken_import", "raise ImportError('libfake.so not found')\n")
    done = run_nbx("info", env=source_env)
    assert done.returncode == 0, done.stderr
    assert "  zz_broken_import: ImportError: libfake.so not found" in done.stdout.splitlines()


def test_demo_cpu_agrees_with_the_float64_oracle(capsys):
    assert cli.main(["demo-cpu", "--tokens", "16", "--dim", "8"]) == 0
    out = capsys.readouterr().out
    assert "attention head on cpu: q, k, v 16x8" in out
    error = float(out.split("max |out - float64 oracle| = ")[1].split(";")[0])
    assert error < 1e-5


def test_no_command_prints_the_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().out


@pytest.fixture
def plugin_folder(tmp_path, monkeypatch):
    """Write nbx.devices.<name> plugins into a folder on sys.path (the namespace follows sys.path)."""
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    written = []

    def write(name: str, source: str) -> None:
        folder = tmp_path / "plugins" / "nbx" / "devices" / name
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text(source)
        written.append(f"nbx.devices.{name}")

    yield write
    for module in written:
        sys.modules.pop(module, None)


def test_a_plugin_adds_a_subcommand_with_its_own_arguments_and_exit_status(plugin_folder, capsys):
    plugin_folder("zz_fake_vendor", '''
def add_cli_commands(subparsers):
    hello = subparsers.add_parser("fake-hello", help="say hello from the fake vendor")
    hello.add_argument("--name", default="world")
    hello.set_defaults(func=lambda args: print(f"hello {args.name}") or 3)
''')
    assert cli.main(["fake-hello", "--name", "h200"]) == 3
    assert capsys.readouterr().out == "hello h200\n"
    assert "say hello from the fake vendor" in cli.build_parser().format_help()


def test_a_plugin_whose_hook_fails_is_reported_and_the_other_commands_still_work(plugin_folder, capsys):
    plugin_folder("zz_bad_hook", "def add_cli_commands(subparsers):\n    raise RuntimeError('boom')\n")
    assert cli.main(["demo-cpu", "--tokens", "4"]) == 0
    assert "nbx: plugin zz_bad_hook: add_cli_commands failed: RuntimeError: boom" in capsys.readouterr().err


def test_info_names_the_device_file_in_force_and_whether_the_hardware_is_proven(monkeypatch):
    from nbx.core import device_files
    monkeypatch.setattr(cli_info, "_gpu_devices", lambda: ["cuda:0"])
    monkeypatch.setattr(device_files, "in_force", lambda device=None: device_files.for_arch("sm_90"))
    [line] = cli_info.device_file_lines()
    assert line.startswith("cuda:0: nvidia/hopper (") and "hopper.yml); proven (measured: NVIDIA H200, 2026-11-29" in line
    monkeypatch.setattr(device_files, "in_force", lambda device=None: device_files.for_arch("sm_70"))
    assert "); not proven (chosen: no device of this architecture has run" in cli_info.device_file_lines()[0]


def test_info_shows_the_refusal_when_no_device_file_applies(monkeypatch):
    from nbx.core import device_files

    def in_force(device=None):
        raise MissingFactError("no device file matches 'NVIDIA Z100'")
    monkeypatch.setattr(device_files, "in_force", in_force)
    monkeypatch.setattr(cli_info, "_gpu_devices", lambda: ["cuda:0"])
    assert cli_info.device_file_lines() == ["cuda:0: MissingFactError: no device file matches 'NVIDIA Z100'"]


def test_info_says_no_gpu_backend_plainly_on_a_cpu_only_install(monkeypatch):
    from nbx.core import device
    monkeypatch.setattr(cli_info, "backends", lambda: {"cpu": device.get_backend("cpu")})
    assert cli_info.device_file_lines() == ["none (no GPU backend)"]


def test_info_gives_a_gpu_backend_without_a_device_its_one_line_reason(monkeypatch):
    class Driverless:
        indexed, host_accessible = True, False

        def device_count(self):
            raise nbx.DeviceError("no NVIDIA driver found on this machine\nsecond line")
    monkeypatch.setattr(cli_info, "backends", lambda: {"cuda": Driverless()})
    assert cli_info.device_file_lines() == [
        "none (no GPU device: cuda: DeviceError: no NVIDIA driver found on this machine)"]


def test_nbx_version_prints_the_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"nbx {nbx.__version__}"


@pytest.mark.parametrize("installed, says", [
    ("3.6.0", "the installed Triton 3.6.0 is served them"),
    ("3.9.0", "the installed Triton 3.9.0 has NO certificates: no certified setting is served, each launch key "
              "takes the device file's setting after an oracle check"),
    (None, "no Triton installed")])
def test_info_says_whether_the_installed_triton_has_certificates(monkeypatch, installed, says):
    monkeypatch.setattr(cli_info, "installed_triton", lambda: installed)
    line = cli_info._compiler_line(["triton-3.6.0-cuda"])
    assert line.startswith("  made under triton-3.6.0-cuda; ") and says in line
    if installed == "3.9.0":
        assert line.endswith("install triton==3.6.0 to be served them")
