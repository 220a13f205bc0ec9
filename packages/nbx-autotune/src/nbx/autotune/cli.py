"""`nbx autotune`: record the keys a run launches, certify them, check certificate files, coverage.

    nbx autotune record --out keys.json -- python3 my_run.py     # the run's keys, merged into keys.json
    nbx autotune certify --device-class nvidia-h200-140gb --keys keys.json --out certificates
    nbx autotune check [TREE ...]          # every certificate file validates (exit 1 if one is refused)
    nbx autotune coverage --keys keys.json # which keys are certified (exit 1 if one is not)

A TREE is laid out <vendor>/<device class>/<compiler>/<kernel>.json, as `certify --out` writes;
without one, check reads the certificates nbx serves (the vendor packages', the repository's).
nbx.core's `nbx` command finds this module's add_cli_commands (a distribution with a cli.py).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from . import timing


def _load_kernels() -> dict:
    """The tunable kernels of the installed nbx.kernels (imported through nbx.core's plugin discovery)."""
    from nbx.core.device import discover_plugins, plugin_errors

    from .candidates import declared
    discover_plugins()
    errors = {n: e for n, e in plugin_errors().items() if n == "kernels"}
    if errors:
        print(f"nbx autotune: nbx.kernels failed to load: {errors['kernels']}", file=sys.stderr)
    return declared()


def _record(args) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        print("nbx autotune record: give the command to run after --, e.g. -- python3 bench.py", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    env = dict(os.environ, NBX_AUTOTUNE_RECORD=str(out))
    if args.sweep:
        env["NBX_AUTOTUNE_SWEEP"] = "1"
    else:
        env["NBX_AUTOTUNE_NO_SWEEP"] = "1"
    status = subprocess.call(command, env=env)
    from . import records
    count = len(records.load(out)) if out.exists() else 0
    print(f"nbx autotune record: {count} key(s) in {out} (the command exited with {status})")
    return status


def _certify(args) -> int:
    from nbx.core import device_files
    from nbx.core.device import as_device

    from . import certify, device_class, records
    tunables = _load_kernels()
    if args.kernel:
        tunables = {k: v for k, v in tunables.items() if k in args.kernel}
    device = as_device(args.device)
    identity = device_class.identify(device)
    if identity.device_class != device_class.check_class(args.device_class):
        print(f"nbx autotune certify: {device} is of class {identity.device_class}, not {args.device_class}; "
              f"a class is certified on a device of that class", file=sys.stderr)
        return 2
    facts = device_files.in_force(device)
    wanted = [r for r in records.load(args.keys) if not args.kernel or r.kernel in args.kernel]
    if args.compile_shard is not None:
        screened = certify.compile_ahead(wanted, tunables=tunables, facts=facts, identity=identity, device=device,
                                         out=args.out, shard=args.compile_shard, shards=args.compile_jobs,
                                         missing_only=args.missing)
        print(f"nbx autotune certify: shard {args.compile_shard} of {args.compile_jobs}: {screened} key(s) "
              f"screened (compiled), none timed", file=sys.stderr)
        return 0
    if args.compile_jobs > 1:
        _compile_in_shards(args)
    timer = timing.timer_for(device)
    print(f"nbx autotune certify: {len(wanted)} recorded key(s) for {identity.device_class} under "
          f"{identity.compiler} ({facts.name}; {timer.description})", file=sys.stderr)
    done = certify.certify(wanted, tunables=tunables, facts=facts, identity=identity, device=device, timer=timer,
                           out=args.out, warmup=args.warmup, repeats=args.repeats, retries=args.retries,
                           missing_only=args.missing)
    for kernel, key, reason in done.skipped:
        print(f"skipped {kernel} {key}: {reason}")
    for kernel, key, reason in done.refused:
        print(f"REFUSED {kernel} {key}: {reason}")
    print(f"nbx autotune certify: {len(done.certified)} key(s) certified into {args.out}, {len(done.refused)} "
          f"refused, {len(done.skipped)} skipped (another device class, or certified already)")
    return 1 if done.refused else 0


def _compile_in_shards(args) -> None:
    """Run `certify --compile-shard i` for each of args.compile_jobs shards at once and wait for them."""
    command = [sys.executable, "-m", "nbx.core.cli", "autotune", "certify", "--device-class", args.device_class,
               "--keys", args.keys, "--out", args.out, "--device", args.device,
               "--compile-jobs", str(args.compile_jobs)]
    command += [f"--kernel={k}" for k in args.kernel or ()] + (["--missing"] if args.missing else [])
    began = time.monotonic()
    jobs = [subprocess.Popen(command + ["--compile-shard", str(i)]) for i in range(args.compile_jobs)]
    codes = [job.wait() for job in jobs]
    print(f"nbx autotune certify: {args.compile_jobs} compile shards in {time.monotonic() - began:.0f} s "
          f"(exit codes {codes}); timing now", file=sys.stderr)


def _default_trees() -> list[tuple[str, Path]]:
    from . import device_class, store
    vendors = set(device_class.VENDOR_OF_DEVICE_TYPE.values())
    repo = store.repo_certificates_dir()
    if repo is not None:
        vendors |= {p.name for p in repo.iterdir() if p.is_dir()}
    found = []
    for vendor in sorted(vendors):
        folder = store.packaged_folder(vendor)
        if folder is not None:
            found.append((vendor, folder))
    return found


def _check(args) -> int:
    from . import store
    _load_kernels()
    folders = [(p.name, p) for tree in args.trees for p in sorted(Path(tree).iterdir()) if p.is_dir()] \
        if args.trees else _default_trees()
    refused = total = 0
    for vendor, folder in folders:
        for path, reason, entries in store.check_folder(folder, vendor):
            total += 1
            if reason is None:
                print(f"ok       {path} ({entries} key(s))")
            else:
                refused += 1
                print(f"REFUSED  {path}: {reason}")
    print(f"nbx autotune check: {total} certificate file(s), {refused} refused")
    return 1 if refused else 0


def _coverage(args) -> int:
    from . import certify, device_class, records, store
    tunables = _load_kernels()
    wanted = records.load(args.keys)

    def identity_of(rec):
        cls = args.device_class or rec.device_class
        compiler = args.compiler or rec.compiler
        if cls is None or compiler is None:
            from nbx.core.errors import DeviceClassError
            raise DeviceClassError(f"{args.keys} records no device class or compiler for {rec.kernel} {rec.key} "
                                   f"(a census made without a device); give --device-class and --compiler")
        return device_class.Identity(device_class.vendor_of_class(cls), cls, device_class.check_compiler(compiler))

    trees = args.certificates or None
    result = certify.coverage(wanted, tunables=tunables, identity_of=identity_of,
                              certificates=store.CertificateStore(trees=trees, packaged=trees is None))
    for kernel, key, cls, compiler, why in result.missing:
        print(f"missing  {kernel} {key} ({cls}, {compiler}): {why}")
    total = len(result.certified) + len(result.missing)
    print(f"nbx autotune coverage: {len(result.certified)} of {total} key(s) certified")
    return 1 if result.missing else 0


def _guarded(handler):
    """A handler whose named refusals (NbxError) print one line and exit 2 instead of a traceback."""
    def run(args) -> int:
        from nbx.core.errors import NbxError
        try:
            return handler(args)
        except NbxError as exc:
            print(f"nbx autotune {args.autotune_action}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    return run


def add_cli_commands(subparsers) -> None:
    parser = subparsers.add_parser("autotune", help="certified kernel settings: record, certify, check, coverage")
    actions = parser.add_subparsers(dest="autotune_action", metavar="ACTION")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)

    record = actions.add_parser("record", help="run a command and write the launch keys it formed")
    record.add_argument("--out", required=True, help="the keys file (merged with what it holds)")
    record.add_argument("--sweep", action="store_true", help="sweep uncertified keys at first use (default: the "
                                                             "device file's tile, since certify sweeps them)")
    record.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    record.set_defaults(func=_guarded(_record))

    cert = actions.add_parser("certify", help="screen and time every recorded key; write certificates")
    cert.add_argument("--device-class", required=True, help="e.g. nvidia-h200-140gb (the device's own class)")
    cert.add_argument("--keys", required=True, help="a keys file (record, or a census)")
    cert.add_argument("--out", required=True, help="a tree: <out>/<vendor>/<class>/<compiler>/<kernel>.json")
    cert.add_argument("--device", default="cuda", help="the device to certify on (default: cuda)")
    cert.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    cert.add_argument("--warmup", type=int, default=timing.WARMUP)
    cert.add_argument("--repeats", type=int, default=timing.REPEATS)
    cert.add_argument("--retries", type=int, default=1, help="measurements again after a witness drift")
    cert.add_argument("--missing", action="store_true", help="only keys the --out tree does not certify yet "
                                                             "(resume an interrupted certification)")
    cert.add_argument("--compile-jobs", type=int, default=1, help="screen the keys first in this many processes at "
                                                                   "once, which compile the candidates (timing "
                                                                   "then runs alone, from Triton's cache)")
    cert.add_argument("--compile-shard", type=int, help=argparse.SUPPRESS)  # one of those processes
    cert.set_defaults(func=_guarded(_certify))

    check = actions.add_parser("check", help="validate every certificate file (exit 1 if one is refused)")
    check.add_argument("trees", nargs="*", help="trees to check (default: the certificates nbx serves)")
    check.set_defaults(func=_guarded(_check))

    cover = actions.add_parser("coverage", help="which keys of a keys file are certified (exit 1 if not all)")
    cover.add_argument("--keys", required=True)
    cover.add_argument("--device-class", help="default: the class each key was recorded on")
    cover.add_argument("--compiler", help="default: the compiler each key was recorded under")
    cover.add_argument("--certificates", action="append", help="a tree to read (default: those nbx serves)")
    cover.set_defaults(func=_guarded(_coverage))
