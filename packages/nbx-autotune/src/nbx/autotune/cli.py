"""`nbx autotune`: record the keys a run launches, certify them, check certificate files, coverage.

    nbx autotune record --out keys.json -- python3 my_run.py     # the run's keys, merged into keys.json
    nbx autotune certify --device-class nvidia-h200-140gb --keys keys.json --out certificates
    nbx autotune check [TREE ...]          # every certificate file validates (exit 1 if one is refused)
    nbx autotune coverage --keys keys.json # which keys are certified (exit 1 if one is not)
    nbx autotune coverage --model ckpt/ --arch sm_90 --device-class C --compiler X   # a model's census
    nbx autotune coverage --space --arch sm_90 --device-class C --compiler X         # whole key spaces
    nbx autotune sweep --model ckpt/       # time a model's keys here, kept in the local cache (asked for)
    nbx autotune space --kernel softmax --arch sm_90 --out space.json   # a key space as a keys file
    nbx warmup --model ckpt/ --jobs 8      # compile a model's kernels ahead into Triton's cache

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
    device = as_device(args.device)
    identity = device_class.identify(device)
    if identity.device_class != device_class.check_class(args.device_class):
        print(f"nbx autotune certify: {device} is of class {identity.device_class}, not {args.device_class}; "
              f"a class is certified on a device of that class", file=sys.stderr)
        return 2
    facts = device_files.in_force(device)
    wanted = [r for r in _wanted(args, facts, tunables) if not args.kernel or r.kernel in args.kernel]
    if args.kernel:   # after the census: it forms every kernel's keys before --kernel picks some
        tunables = {k: v for k, v in tunables.items() if k in args.kernel}
    if args.compile_shard is not None:
        launched = certify.compile_ahead(wanted, tunables=tunables, facts=facts, identity=identity, device=device,
                                         out=args.out, shard=args.compile_shard, shards=args.compile_jobs,
                                         missing_only=args.missing)
        print(f"nbx autotune certify: shard {args.compile_shard} of {args.compile_jobs}: {launched} candidate(s) "
              f"launched (compiled), none timed", file=sys.stderr)
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


def _wanted(args, facts, tunables, config=None) -> list:
    """The key records a command names: a keys file (--keys), or a model's census (--model and its plan;
    config: its census.Model where the caller read it already)."""
    from . import census, records
    if getattr(args, "keys", None):
        return records.load(args.keys)
    if getattr(args, "model", None):
        plan = census.plan_from_args(args.batch, args.prompt, args.new_tokens, args.dtype)
        config = census.read_config(args.model) if config is None else config
        return census.records_of(census.launches(config, plan, facts), facts, tunables)
    from nbx.core.errors import ArgumentError
    raise ArgumentError("name the keys: --keys FILE (a recorded run, a census) or --model PATH (a checkpoint folder)")


def _source_args(args) -> list[str]:
    """The --keys or --model (and plan) arguments again, for a command's shard processes."""
    if getattr(args, "keys", None):
        return ["--keys", args.keys]
    out = ["--model", args.model, "--batch", args.batch, "--prompt", args.prompt, "--new-tokens", str(args.new_tokens)]
    return out + (["--dtype", args.dtype] if args.dtype else [])


def _add_source(parser, required: bool = True) -> None:
    """--keys FILE | --model PATH, with the census plan's --batch, --prompt, --new-tokens, --dtype."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--keys", help="a keys file (record, or a census)")
    group.add_argument("--model", help="a checkpoint folder (or its config.json): its census lists the keys")
    parser.add_argument("--batch", default="1", help="census: batch sizes, comma-separated (default 1)")
    parser.add_argument("--prompt", default="128", help="census: prompt lengths, comma-separated (default 128)")
    parser.add_argument("--new-tokens", type=int, default=1, help="census: decode steps after the prompt (a "
                                                                  "decoder's generate of N + 1 tokens; 0 for "
                                                                  "none; default 1)")
    parser.add_argument("--dtype", help="census: the dtype the model runs in (default: its torch_dtype)")


def _compile_in_shards(args) -> None:
    """Run `certify --compile-shard i` for each of args.compile_jobs shards at once and wait for them."""
    from .warmup import run_shards
    command = [sys.executable, "-m", "nbx.core.cli", "autotune", "certify", "--device-class", args.device_class,
               *_source_args(args), "--out", args.out, "--device", args.device,
               "--compile-jobs", str(args.compile_jobs)]
    command += [f"--kernel={k}" for k in args.kernel or ()] + (["--missing"] if args.missing else [])
    began = time.monotonic()
    codes = run_shards(command, args.compile_jobs, "--compile-shard")
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


def _identity_from_args(args, rec=None):
    from . import device_class
    cls = args.device_class or (rec.device_class if rec is not None else None)
    compiler = args.compiler or (rec.compiler if rec is not None else None)
    if cls is None or compiler is None:
        from nbx.core.errors import DeviceClassError
        what = f"{args.keys} records no device class or compiler for {rec.kernel} {rec.key} (a census made without " \
               f"a device)" if rec is not None and args.keys else "a census or a key space names no device"
        raise DeviceClassError(f"{what}; give --device-class and --compiler")
    return device_class.Identity(device_class.vendor_of_class(cls), cls, device_class.check_compiler(compiler))


def _arch_facts(args):
    from nbx.core import device_files
    from nbx.core.errors import ArgumentError
    if not args.arch:
        raise ArgumentError("give --arch (the device file's target, e.g. sm_90): its ladders class the keys")
    return device_files.for_arch(args.arch)


def _coverage(args) -> int:
    from . import certify, records, store
    tunables = _load_kernels()
    trees = args.certificates or None
    certificates = store.CertificateStore(trees=trees, packaged=trees is None)
    if args.space:
        return _space_coverage(args, tunables, certificates)
    facts = config = None
    if args.model:
        from . import census
        facts, config = _arch_facts(args), census.read_config(args.model)
        wanted = _wanted(args, facts, tunables, config)
    elif args.keys:
        wanted = records.load(args.keys)
    else:
        from nbx.core.errors import ArgumentError
        raise ArgumentError("give --keys FILE, --model PATH or --space")
    result = certify.coverage(wanted, tunables=tunables, identity_of=lambda rec: _identity_from_args(args, rec),
                              certificates=certificates)
    for kernel, key, cls, compiler, why in result.missing:
        near = _nearest(tunables.get(kernel), key, certificates, _identity_from_args(args), facts) if facts else ""
        print(f"missing  {kernel} {key} ({cls}, {compiler}): {why}{near}")
    if args.model:
        note = census.unlisted(config)
        if note:
            print(note)
    total = len(result.certified) + len(result.missing)
    print(f"nbx autotune coverage: {len(result.certified)} of {total} key(s) certified")
    return 1 if result.missing else 0


def _nearest(tunable, text: str, certificates, identity, facts) -> str:
    """'; nearest certified neighbour K, D octaves away' (a run serves its setting after a screen), or ''."""
    from . import keys, neighbours, space
    if tunable is None:
        return ""
    key = keys.parse(tunable.name, tunable.key, text, facts)
    found = neighbours.ranked(tunable, key, certificates.entries(identity, tunable, facts), facts)
    if not found:
        return "; no certified neighbour (same dtype and layout)"
    apart = space.distance(tunable.key, key, keys.parse(tunable.name, tunable.key, found[0][0], facts),
                           tunable.weights)[0]
    return f"; nearest certified neighbour {found[0][0]} ({apart:.2f} weighted octave(s) away)"


def _space_coverage(args, tunables, certificates) -> int:
    from . import space
    facts, identity = _arch_facts(args), _identity_from_args(args)
    chosen = {k: t for k, t in sorted(tunables.items()) if not args.kernel or k in args.kernel}
    from nbx.core.errors import MissingFactError
    short = near = bare = 0
    refused = []
    for name, tunable in chosen.items():
        try:   # one kernel whose space the device file cannot state does not hide the others' coverage
            found = space.space_coverage(tunable, facts, certificates.entries(identity, tunable, facts))
        except MissingFactError as exc:
            refused.append(name)
            print(f"{name:18s} no key space: {exc}")
            continue
        short += found.size - found.certified
        near, bare = near + found.by_neighbour, bare + found.uncovered
        share = 100.0 * found.certified / found.size if found.size else 100.0
        print(f"{name:18s} {found.certified} of {found.size} key(s) of its key space certified ({share:.2f} %), "
              f"{found.by_neighbour} from a certified neighbour, {found.uncovered} with none; "
              f"{len(found.outside)} certified key(s) outside it")
    print(f"nbx autotune coverage: key spaces of {len(chosen)} kernel(s) over {facts.name}'s autotune.key_space "
          f"({identity.device_class}, {identity.compiler}): {short} key(s) uncertified, of which {near} served "
          f"from a certified neighbour (after a screen) and {bare} by no certificate"
          + (f"; {len(refused)} kernel(s) with no key space ({', '.join(refused)})" if refused else ""))
    return 1 if short or refused else 0


def _space(args) -> int:
    """Write a kernel's whole key space as a keys file (what `certify --keys` proves); with --uncovered, one
    key for each dtype, flag and label combination no certified key shares (space.uncovered_keys)."""
    from . import records, space
    tunables, facts = _load_kernels(), _arch_facts(args)
    for name in args.kernel:
        if name not in tunables:
            from nbx.core.errors import ArgumentError
            raise ArgumentError(f"no installed kernel declares {name!r} (declared: {sorted(tunables)})")
    if args.uncovered:
        return _uncovered(args, tunables, facts)
    out = []
    for name in args.kernel:
        found = space.key_space(tunables[name], facts)
        if found.size() > args.max_keys:
            print(f"nbx autotune space: {name} has {found.size()} keys, above --max-keys {args.max_keys}: too many to "
                  f"certify one by one; its ladders must coarsen (tools/bench/bucket_loss.py --propose)",
                  file=sys.stderr)
            return 2
        out += [records.KeyRecord(name, text, facts.name, None, None, observed) for text, observed in found.keys()]
    records.save(Path(args.out), out)
    print(f"nbx autotune space: {len(out)} key(s) of {', '.join(args.kernel)} in {args.out}")
    return 0


def _uncovered(args, tunables, facts) -> int:
    """space --uncovered: the keys of every named kernel; a kernel with no certified key to take sizes
    from is named and left out (exit 1), the others' keys written."""
    from nbx.core.errors import MissingFactError

    from . import records, space, store
    certified = store.CertificateStore(trees=args.certificates or None, packaged=not args.certificates)
    identity, out, left = _identity_from_args(args), [], []
    for name in args.kernel:
        try:
            picked = space.uncovered_keys(tunables[name], facts, certified.entries(identity, tunables[name], facts))
        except MissingFactError as exc:
            print(f"nbx autotune space: {exc}", file=sys.stderr)
            left.append(name)
            continue
        out += [records.KeyRecord(name, text, facts.name, args.device_class, args.compiler, observed)
                for text, observed in picked]
    records.save(Path(args.out), out)
    print(f"nbx autotune space: {len(out)} key(s) of {len(args.kernel) - len(left)} kernel(s) in {args.out}, one for "
          f"each dtype, flag and label combination no certified key shares"
          + (f"; left out (no certified key): {', '.join(left)}" if left else ""))
    return 1 if left else 0


def _sweep(args) -> int:
    """Prove the named keys on this machine (screen, time under the witness) into the local cache."""
    from nbx.core import device_files
    from nbx.core.device import as_device

    from . import certify, device_class, serving
    tunables = _load_kernels()
    device = as_device(args.device)
    identity, facts = device_class.identify(device), device_files.in_force(device)
    wanted = [r for r in _wanted(args, facts, tunables) if not args.kernel or r.kernel in args.kernel]
    timer = timing.timer_for(device)
    out = serving.cache_dir()
    done = certify.certify(wanted, tunables=tunables, facts=facts, identity=identity, device=device, timer=timer,
                           out=out, missing_only=True)
    for kernel, key, reason in done.refused:
        print(f"REFUSED {kernel} {key}: {reason}")
    print(f"nbx autotune sweep: {len(done.certified)} key(s) swept into the local cache {out}, {len(done.refused)} "
          f"refused, {len(done.skipped)} skipped (swept already)")
    return 1 if done.refused else 0


def _warmup(args) -> int:
    from nbx.core import device_files
    from nbx.core.device import as_device

    from . import census, records, warmup
    if args.log_compiles:
        warmup.log_compiles()
    device = as_device(args.device)
    if args.model:
        plan = census.plan_from_args(args.batch, args.prompt, args.new_tokens, args.dtype)
        model = census.read_config(args.model)
        items = census.launches(model, plan, device_files.in_force(device) if model.kind == "decoder" else None)
        note = census.unlisted(model)
        if note:
            print(note)
        run = lambda launch: warmup.run_launch(launch, device)  # noqa: E731
    else:
        tunables, facts = _load_kernels(), device_files.in_force(device)
        items = records.load(args.keys)
        run = lambda rec: warmup.run_record(rec, tunables, facts, device)  # noqa: E731
    if args.shard is None and args.jobs > 1:
        command = [sys.executable, "-m", "nbx.core.cli", "warmup", *_source_args(args), "--device", args.device,
                   "--jobs", str(args.jobs)] + (["--log-compiles"] if args.log_compiles else [])
        began = time.monotonic()
        codes = warmup.run_shards(command, args.jobs)
        print(f"nbx warmup: {len(items)} launch(es) in {args.jobs} processes, {time.monotonic() - began:.1f} s "
              f"(exit codes {codes}); Triton's cache: {warmup.cache_dir()}")
        return max(codes)
    began = time.monotonic()
    done = warmup.warm(items, run, args.shard or 0, args.jobs if args.shard is not None else 1)
    print(f"nbx warmup: {done} launch(es) compiled and run in {time.monotonic() - began:.1f} s; Triton's cache: "
          f"{warmup.cache_dir()}")
    return 0


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
    _add_source(cert)
    cert.add_argument("--out", required=True, help="a tree: <out>/<vendor>/<class>/<compiler>/<kernel>.json")
    cert.add_argument("--device", default="cuda", help="the device to certify on (default: cuda)")
    cert.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    cert.add_argument("--warmup", type=int, default=timing.WARMUP)
    cert.add_argument("--repeats", type=int, default=timing.REPEATS)
    cert.add_argument("--retries", type=int, default=1, help="measurements again after a witness drift")
    cert.add_argument("--missing", action="store_true", help="only keys the --out tree does not certify yet "
                                                             "(resume an interrupted certification)")
    cert.add_argument("--compile-jobs", type=int, default=1, help="compile the keys' candidates first in this many "
                                                                   "processes at once, keys balanced by candidates "
                                                                   "(timing then runs alone, from Triton's cache)")
    cert.add_argument("--compile-shard", type=int, help=argparse.SUPPRESS)  # one of those processes
    cert.set_defaults(func=_guarded(_certify))

    check = actions.add_parser("check", help="validate every certificate file (exit 1 if one is refused)")
    check.add_argument("trees", nargs="*", help="trees to check (default: the certificates nbx serves)")
    check.set_defaults(func=_guarded(_check))

    cover = actions.add_parser("coverage", help="which keys of a keys file, a model's census or a kernel's whole "
                                                "key space are certified (exit 1 if not all)")
    _add_source(cover, required=False)
    cover.add_argument("--space", action="store_true", help="count each kernel's whole key space (the device "
                                                            "file's autotune.key_space)")
    cover.add_argument("--kernel", action="append", help="with --space: only this kernel (repeatable)")
    cover.add_argument("--arch", help="the device file's target (sm_90) whose ladders class a census or a space")
    cover.add_argument("--device-class", help="default: the class each key was recorded on")
    cover.add_argument("--compiler", help="default: the compiler each key was recorded under")
    cover.add_argument("--certificates", action="append", help="a tree to read (default: those nbx serves)")
    cover.set_defaults(func=_guarded(_coverage))

    sweep = actions.add_parser("sweep", help="time the candidates of keys on this machine and keep the fastest "
                                             "in the local cache (what a run is served after certificates)")
    _add_source(sweep)
    sweep.add_argument("--device", default="cuda")
    sweep.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    sweep.set_defaults(func=_guarded(_sweep))

    space = actions.add_parser("space", help="write kernels' whole key spaces as a keys file (to certify)")
    space.add_argument("--kernel", action="append", required=True, help="a kernel (repeatable)")
    space.add_argument("--arch", required=True, help="the device file's target, e.g. sm_90")
    space.add_argument("--out", required=True)
    space.add_argument("--max-keys", type=int, default=5000, help="refuse a space larger than this")
    space.add_argument("--uncovered", action="store_true", help="only one key for each dtype, flag and label "
                       "combination that no certified key shares (so every key of the space gets a neighbour)")
    space.add_argument("--device-class", help="with --uncovered: the certificates' device class")
    space.add_argument("--compiler", help="with --uncovered: the certificates' compiler")
    space.add_argument("--certificates", action="append", help="with --uncovered: a tree to read "
                                                               "(default: those nbx serves)")
    space.set_defaults(func=_guarded(_space))

    warm = subparsers.add_parser("warmup", help="compile the kernels of a model's census (or a keys file) ahead, "
                                                "into Triton's on-disk cache")
    _add_source(warm)
    warm.add_argument("--device", default="cuda")
    warm.add_argument("--jobs", type=int, default=1, help="processes compiling at once")
    warm.add_argument("--log-compiles", action="store_true", help="print every kernel compiled")
    warm.add_argument("--shard", type=int, help=argparse.SUPPRESS)
    warm.set_defaults(func=_guarded(_warmup), autotune_action="warmup")
