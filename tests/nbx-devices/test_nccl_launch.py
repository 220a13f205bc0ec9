"""The launcher of one process per GPU, with small Python programs for ranks (no GPU, no NCCL): each
rank's environment, the id's two routes, and that a failing or slow rank stops the whole launch."""
from __future__ import annotations

import sys
import time

import pytest
from nbx.core.errors import ArgumentError
from nbx.devices.nvidia import nccl_launch
from nbx.devices.nvidia.nccl_bootstrap import UniqueId

SHOW_ENV = ("import os; print(*(os.environ.get(k, '-') for k in ('NBX_NCCL_RANK', 'NBX_NCCL_WORLD_SIZE', "
            "'NBX_NCCL_DEVICE', 'NBX_NCCL_ID_FILE', 'NBX_NCCL_UNIQUE_ID')))")


def test_each_rank_gets_its_rank_device_and_the_shared_id_file(tmp_path):
    envs = nccl_launch.rank_environments(3, "file", base={"NBX_NCCL_UNIQUE_ID": "stale", "KEEP": "1"},
                                         workdir=tmp_path)
    assert [(e["NBX_NCCL_RANK"], e["NBX_NCCL_WORLD_SIZE"], e["NBX_NCCL_DEVICE"]) for e in envs] == [
        ("0", "3", "cuda:0"), ("1", "3", "cuda:1"), ("2", "3", "cuda:2")]
    assert {e["NBX_NCCL_ID_FILE"] for e in envs} == {str(tmp_path / "nccl_unique_id.hex")}
    assert all("NBX_NCCL_UNIQUE_ID" not in e and e["KEEP"] == "1" for e in envs)


def test_the_env_route_makes_the_id_in_the_launcher_and_passes_it_as_hex(monkeypatch):
    monkeypatch.setattr(nccl_launch, "unique_id", lambda: UniqueId(bytes(range(128))))
    envs = nccl_launch.rank_environments(2, "env", base={"NBX_NCCL_ID_FILE": "/stale/path"})
    assert {e["NBX_NCCL_UNIQUE_ID"] for e in envs} == {bytes(range(128)).hex()}
    assert all("NBX_NCCL_ID_FILE" not in e for e in envs)


def test_launch_arguments_outside_their_range_are_refused():
    with pytest.raises(ArgumentError, match=r"nproc is the number of ranks \(>= 1\), got 0"):
        nccl_launch.rank_environments(0)
    with pytest.raises(ArgumentError, match="id_via is 'file' or 'env', got 'pipe'"):
        nccl_launch.rank_environments(2, "pipe")


def test_every_rank_runs_with_its_environment_and_its_own_log(tmp_path):
    result = nccl_launch.launch([sys.executable, "-c", SHOW_ENV], 2, timeout=60, log_dir=tmp_path)
    assert (result.codes, result.first_failed, result.timed_out, result.exit_code) == ([0, 0], None, False, 0)
    lines = [(tmp_path / f"rank{r}.log").read_text().split() for r in range(2)]
    assert [line[:3] for line in lines] == [["0", "2", "cuda:0"], ["1", "2", "cuda:1"]]
    assert lines[0][3] == lines[1][3] and lines[0][3].endswith("nccl_unique_id.hex") and lines[0][4] == "-"


def test_a_failing_rank_stops_the_others_and_gives_its_exit_status(tmp_path):
    code = "import os, sys, time; r = int(os.environ['NBX_NCCL_RANK']); time.sleep(60) if r == 0 else sys.exit(3)"
    started = time.monotonic()
    result = nccl_launch.launch([sys.executable, "-c", code], 2, timeout=120, log_dir=tmp_path)
    assert time.monotonic() - started < 30
    assert result.first_failed == 1 and result.exit_code == 3 and not result.timed_out
    assert result.codes[1] == 3 and result.codes[0] < 0   # rank 0 was killed while it waited


def test_ranks_still_running_at_the_timeout_are_stopped_and_the_status_is_124(tmp_path):
    result = nccl_launch.launch([sys.executable, "-c", "import time; time.sleep(60)"], 2, timeout=0.5,
                                log_dir=tmp_path)
    assert result.timed_out and result.first_failed is None and result.exit_code == 124
    assert all(c < 0 for c in result.codes)


def test_the_command_line_runs_a_script_once_per_rank(tmp_path, capsys):
    script = tmp_path / "rank.py"
    script.write_text(SHOW_ENV + "\n")
    logs = tmp_path / "logs"
    assert nccl_launch.main(["--nproc", "2", "--timeout", "60", "--log-dir", str(logs), "--", str(script)]) == 0
    assert (logs / "rank1.log").read_text().split()[:3] == ["1", "2", "cuda:1"]
    assert "nccl_launch: rank 1 exit 0" in capsys.readouterr().err
