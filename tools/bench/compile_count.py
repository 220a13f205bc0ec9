"""The compiles of a cold run, counted without a GPU: each distinct Triton specialization a run launches.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/first_run.py --count-compiles

On a cold cache every distinct (kernel, constexprs, argument types, integer specializations, options)
is one Triton compile (0.2-0.5 s each on the H200 host). This runs nbx's cuda path over the tests'
simulated CUDA (host_sim.simulated_cuda) with Triton's JIT stubbed: each `kernel[grid](...)` is bound by
Triton's own binder for an sm_90 target (create_function_from_signature, the specializer Triton runs
before its cache lookup) and keyed by Triton's own cache key (compute_cache_key), so two launches
share a compile here exactly when they would share one there. Nothing runs on a device: a neighbour's
screen launches its workload (its compiles counted, marked with the key screened) and its verdict is
taken as passed, since a simulated GPU computes nothing; the verdicts themselves are the GPU's.
"""
from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from dataclasses import dataclass, field

AS_TARGET = ("cuda", 90, 32)   # what the H200 compiles for


@dataclass
class Compile:
    """One distinct specialization: the kernel, Triton's specialization of each argument, the options,
    and who launched it (the run, or a screen of a kernel's key)."""
    kernel: str
    arguments: tuple   # (parameter name, Triton type, specialization) in the kernel's order
    options: tuple
    causes: list = field(default_factory=list)

    def describe(self) -> str:
        constexprs = ",".join(f"{n}={s}" for n, t, s in self.arguments if t == "constexpr")
        ints = ",".join(f"{n}:{t}{'/' + s if s else ''}" for n, t, s in self.arguments
                        if t != "constexpr" and not t.startswith("*"))
        pointers = ",".join(f"{t}{'/' + s if s else ''}" for n, t, s in self.arguments if t.startswith("*"))
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.kernel} [{constexprs}] ints({ints}) ptrs({pointers}) {opts}"


class Counter:
    """Triton's JIT replaced by a binder that counts distinct specializations (install(); restore())."""

    def __init__(self):
        self.compiles: dict = {}           # Triton's cache key -> Compile
        self.cause = "run"
        self._binders: dict = {}
        self._lock = threading.Lock()
        self._saved = None

    def bind(self, fn, args, meta) -> Compile:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        from triton.runtime.jit import compute_cache_key, create_function_from_signature
        binder = self._binders.get(id(fn))
        if binder is None:
            binder = self._binders[id(fn)] = (fn, create_function_from_signature(
                fn.signature, fn.params, make_backend(GPUTarget(*AS_TARGET))))
        bound, specialization, options = binder[1](*args, **meta)
        key = (f"{fn.module}.{fn.__name__}", compute_cache_key({}, specialization, options))
        with self._lock:
            found = self.compiles.get(key)
            new = found is None
            if new:
                arguments = tuple((p.name, str(s[0]), str(s[1])) for p, s in zip(fn.params, specialization))
                found = self.compiles[key] = Compile(key[0], arguments, tuple(sorted(options.items())))
            found.causes.append(self.cause)
        if new:
            self._post_compile_hook(fn, key, bound, specialization, meta)
        return found

    @staticmethod
    def _post_compile_hook(fn, key, bound, specialization, meta) -> None:
        """Triton's compilation listener, called as triton.compile calls it after a compile (the autotune
        report's compile log sees the simulated run's compiles)."""
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, make_backend
        listener = triton.knobs.compilation.listener
        if listener is None:
            return
        backend = make_backend(GPUTarget(*AS_TARGET))
        options, signature, constants, attrs = fn._pack_args(backend, dict(meta), bound, specialization,
                                                             backend.parse_options(dict(meta)))
        listener(src=ASTSource(fn, signature, constants, attrs), metadata={"num_warps": options.num_warps},
                 metadata_group={}, times=None, cache_hit=False)

    def install(self) -> Counter:
        """Triton's launch stubbed (host_sim.stub_triton), each launch bound here."""
        from host_sim import stub_triton
        self._saved = stub_triton(self.bind)
        return self

    def restore(self) -> None:
        from host_sim import restore_triton
        if self._saved is not None:
            restore_triton(self._saved)
            self._saved = None

    @contextlib.contextmanager
    def caused_by(self, cause: str):
        saved, self.cause = self.cause, cause
        try:
            yield
        finally:
            self.cause = saved

    def summary(self) -> dict:
        """Compiles by who launched them: the run only, screens only (a compile the key's own launch did not
        reuse), both (a screen's compile the run then loaded)."""
        by = defaultdict(int)
        for c in self.compiles.values():
            run = "run" in c.causes
            screened = any(x != "run" for x in c.causes)
            by["both" if run and screened else "run only" if run else "screen only"] += 1
        return {"compiles": len(self.compiles), **by}

    def lines(self) -> list[str]:
        out = []
        for c in sorted(self.compiles.values(), key=lambda c: (c.kernel, c.describe())):
            screens = sorted({x for x in c.causes if x != "run"})
            who = ("run" if "run" in c.causes else "") + ("+" if "run" in c.causes and screens else "") + \
                (f"screen of {'; '.join(screens)}" if screens else "")
            out.append(f"{c.describe()}  <- {who} ({len(c.causes)} launch(es))")
        return out


def screens_counted(counter: Counter):
    """A neighbour's screen as the Screener runs it, its launches marked with the key screened and its verdict
    passed (a simulated GPU computes nothing to compare)."""
    from nbx.autotune import neighbours, screen

    def run(work, settings, facts, max_bytes_fact="autotune.screen_max_bytes"):
        for setting in settings:
            work.fill_output(float("nan"))
            work.launch(setting)
        dtype = work.out_dtype
        return screen.ScreenResult(dtype.name, screen.tolerance(facts, dtype), ((0, work.out_shape[0]),) if
                                   work.out_shape else (), tuple(screen.Verdict(dict(s), 0.0, True, "simulated")
                                                                for s in settings))
    verdict = neighbours.Screener.verdict

    def counted(self, setting):
        with counter.caused_by(f"{self.tunable.name} {self.key}"):
            return verdict(self, setting)
    saved = (neighbours.screen.run, neighbours.Screener.verdict)
    neighbours.screen.run, neighbours.Screener.verdict = run, counted
    return lambda: setattr(neighbours.screen, "run", saved[0]) or setattr(neighbours.Screener, "verdict", saved[1])
