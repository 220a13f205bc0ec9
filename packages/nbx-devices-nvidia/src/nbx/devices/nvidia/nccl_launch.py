"""Start one process per GPU with what Communicator.from_env() reads, and wait for all of them.

    python -m nbx.devices.nvidia.nccl_launch --nproc 2 [--id-via file|env] [--timeout S] -- script.py args

Rank r runs with NBX_NCCL_RANK=r, NBX_NCCL_WORLD_SIZE=n, NBX_NCCL_DEVICE=cuda:r and the id's route:
`file` (default) names a fresh NBX_NCCL_ID_FILE that rank 0 writes and the others wait for; `env`
makes the id here (this process then hosts NCCL's bootstrap until the ranks have connected) and
passes it as hex in NBX_NCCL_UNIQUE_ID. The environment is otherwise passed on unchanged (NCCL_*
settings included). When a rank fails, the others are stopped: they would wait in a collective
forever. The exit status is the first failing rank's (124 when the timeout ran out).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nbx.core.errors import ArgumentError

from .nccl_bootstrap import ENV_DEVICE, ENV_ID_FILE, ENV_RANK, ENV_UNIQUE_ID, ENV_WORLD_SIZE, unique_id

TIMED_OUT = 124


def rank_environments(nproc: int, id_via: str = "file", base=None, workdir=None) -> list[dict[str, str]]:
    """The environment of each rank (id_via 'env' calls ncclGetUniqueId here)."""
    if nproc < 1:
        raise ArgumentError(f"nproc is the number of ranks (>= 1), got {nproc}")
    base = dict(os.environ if base is None else base)
    for name in (ENV_ID_FILE, ENV_UNIQUE_ID):
        base.pop(name, None)   # an id inherited from an outer launch would be stale
    if id_via == "file":
        folder = Path(workdir or tempfile.mkdtemp(prefix="nbx-nccl-"))
        base[ENV_ID_FILE] = str(folder / "nccl_unique_id.hex")
    elif id_via == "env":
        base[ENV_UNIQUE_ID] = unique_id().hex()
    else:
        raise ArgumentError(f"id_via is 'file' or 'env', got {id_via!r}")
    return [dict(base, **{ENV_RANK: str(r), ENV_WORLD_SIZE: str(nproc), ENV_DEVICE: f"cuda:{r}"})
            for r in range(nproc)]


@dataclass
class LaunchResult:
    codes: list[int]              # each rank's exit status (a stopped rank: minus the signal)
    first_failed: int | None      # the rank that failed first, whose failure stopped the others
    timed_out: bool

    @property
    def exit_code(self) -> int:
        if self.first_failed is not None:
            return self.codes[self.first_failed]
        return TIMED_OUT if self.timed_out else 0


def launch(argv: list[str], nproc: int, *, id_via: str = "file", timeout: float | None = None,
           log_dir=None, base_env=None, poll: float = 0.1) -> LaunchResult:
    """Run argv once per rank and wait: until all end, one fails (the rest are stopped) or time runs out."""
    with tempfile.TemporaryDirectory(prefix="nbx-nccl-") as workdir:
        envs = rank_environments(nproc, id_via, base_env, workdir)
        return _run(argv, envs, timeout, log_dir, poll)


def _run(argv, envs, timeout, log_dir, poll) -> LaunchResult:
    nproc = len(envs)
    logs, procs = [], []
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    codes: list[int | None] = [None] * nproc
    first_failed, timed_out = None, False
    try:
        for rank, env in enumerate(envs):
            out = None
            if log_dir is not None:
                out = open(Path(log_dir) / f"rank{rank}.log", "w")  # noqa: SIM115 (closed below)
                logs.append(out)
            procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT if out else None))
        while first_failed is None and any(c is None for c in codes):
            for i, p in enumerate(procs):
                if codes[i] is None and p.poll() is not None:
                    codes[i] = p.returncode
                    if p.returncode != 0 and first_failed is None:
                        first_failed = i
            if deadline is not None and time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(poll)
    finally:
        for i, p in enumerate(procs):
            if p.poll() is None:
                p.kill()   # a rank left alone after another failed would wait in NCCL forever
            p.wait()
            codes[i] = p.returncode
        for f in logs:
            f.close()
    return LaunchResult([int(c) for c in codes], first_failed, timed_out)


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbx.devices.nvidia.nccl_launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, required=True, help="ranks to start, one per GPU")
    parser.add_argument("--id-via", choices=("file", "env"), default="file")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before every rank is stopped")
    parser.add_argument("--log-dir", default=None, help="write rank<r>.log there instead of sharing stdout")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- program and arguments (python script.py ...)")
    ns = parser.parse_args(args)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("name the program each rank runs, after --")
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    result = launch(command, ns.nproc, id_via=ns.id_via, timeout=ns.timeout, log_dir=ns.log_dir)
    for rank, code in enumerate(result.codes):
        print(f"nccl_launch: rank {rank} exit {code}", file=sys.stderr)
    if result.timed_out:
        print(f"nccl_launch: stopped every rank after {ns.timeout:g} s", file=sys.stderr)
    elif result.first_failed is not None:
        print(f"nccl_launch: rank {result.first_failed} failed first; the others were stopped", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
