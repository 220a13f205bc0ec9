"""nbx.graph: capture a step of nbx ops once, replay it for the cost of one launch.

    import nbx.core as nbx
    step = nbx.graph.capture(fn, x, w)     # fn(x, w) -> tensor(s); runs it, then captures it
    y = step(x_new, w)                     # copies x_new into step.inputs[0], replays, returns step.outputs
    step.inputs[0][...] = x_next           # or write into the static inputs yourself
    y = step.replay()
    step.close()                           # or let it be collected: its private memory goes back

Static inputs. The step owns one set of input tensors per captured key (the tensors passed to
capture() for the first key); a call copies its arguments into them (an argument that *is* the
static input is not copied). Only the device work is replayed: the Python of fn runs at capture and
never again, so anything fn reads must be a static input, a tensor made before the capture (weights,
a KV cache), or a constant.

Outputs are the tensors fn returned at capture; every replay overwrites them (copy one to keep it).

Keys. A call whose tensors differ in shape or dtype from every captured key captures again (new
static inputs of those shapes); at most `max_captures` keys are kept, the least recently used one
closed first.

Lengths. capture(fn, *inputs, length=n, max_length=cap) captures per bucket of lengths: fn(*inputs,
length) gets a Length whose `bucket` (a Python int: the rung of the device file's
`graphs.length_buckets` ladder that holds n, at most max_length) may size views
(`cache[:length.bucket]`) and whose `tensor` (int32, shape (1,), on the device) holds the true
length, written before each replay: kernels read it to mask the positions past it (`length.mask()`
is `positions < length`). A generation of growing lengths replays one graph per bucket. On cpu,
which has no device file and captures nothing, every length is its own bucket.

Devices. Where nbx.memory.graphs has a stream capture for the device type (cuda), the step is a
graph (nbx.memory.graphs.capture: a warm-up run, then a capture with a private pool). Elsewhere
(cpu, interp) a call runs fn eagerly on the static inputs and copies its results into the outputs
of the first run, so the same code runs everywhere with the same results and the same overwriting.

Refusals. A host read (`numpy()`, `item()`, `bool()`, `print`) or an upload in fn's own code is a
GraphCaptureError on every device, raised in the first run: where steps are graphs it is a host
synchronization. What an op does inside its implementation is the device's to refuse (the capture
names the driver call: a host synchronization, a driver allocation). An op whose output shape
depends on the data must read it back, so it is refused on a GPU; the eager fallback refuses an
output whose shape or dtype changes for the same key (DataDependentShapeError). Bounds checks of
indexing ops (take, embedding, scatter, index_put) are deferred inside a step on every device: the
kernels mask a bad index and raise a device flag, read at the next host read or eager check
(nbx.core.deferred_checks).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from . import deferred_checks, device_files, dtypes, services
from .device import Device, as_device
from .dispatch import implementation, observed
from .errors import ArgumentError, DataDependentShapeError, NoDeviceFileError, NotSupportedError
from .graph_memory import StepMemory, recorder, summarize
from .tensor import Tensor, empty

LENGTH_LADDER = "graphs.length_buckets"


class Length:
    """The length a bucketed step's function receives: a static bucket, a device tensor of the true length."""

    def __init__(self, bucket: int, device: Device):
        from .ops.creation import arange
        self.bucket = bucket
        # shape (1,), not (): a 0-d copy on cuda's own copy_ reads its value back to the host (a broadcast)
        self.tensor = empty((1,), dtypes.int32, device)
        self.positions = arange(bucket, dtype=dtypes.int32, device=device)

    def set(self, n: int) -> None:
        implementation("fill_", self.tensor.device)(self.tensor, n)  # a device fill: no host sync

    def mask(self) -> Tensor:
        """bool (bucket,): True at the positions before the true length."""
        from .ops import less
        return less(self.positions, self.tensor)

    def __repr__(self) -> str:
        return f"Length(bucket={self.bucket}, {self.tensor.device})"


def length_bucket(n: int, device: Device, max_length: int | None = None) -> int:
    """The bucket of length n on device: the rung of its file's graphs.length_buckets that holds n,
    at most max_length (the capacity of what the step slices, a KV cache)."""
    return _bucket_on(_ladder(device), n, max_length)


def _ladder(device: Device):
    """The device's length ladder; None on a device with no file (cpu: nothing is captured there,
    so a bucket would only compute more, and every length is its own bucket)."""
    try:
        return device_files.in_force(device).value(LENGTH_LADDER)
    except NoDeviceFileError:
        return None


def _bucket_on(ladder, n: int, max_length: int | None) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ArgumentError(f"a step's length is a positive int, not {n!r}")
    if max_length is not None and n > max_length:
        raise ArgumentError(f"length {n} is beyond the step's max_length {max_length}")
    bucket = n if ladder is None else device_files.bucket(ladder, n)
    return bucket if max_length is None else min(bucket, max_length)


def _key(inputs, bucket) -> tuple:
    try:
        return tuple((t.shape, t.dtype.name) for t in inputs), bucket
    except AttributeError:
        raise ArgumentError(f"a step's inputs are tensors (pass other values in fn's closure), got "
                            f"{[type(t).__name__ for t in inputs]}") from None


def _same(inputs, statics) -> bool:
    if len(inputs) != len(statics):
        return False
    for a, b in zip(inputs, statics):
        if a is not b:
            return False
    return True


def _flat(result) -> list[Tensor]:
    items = list(result.values()) if isinstance(result, dict) else (
        list(result) if isinstance(result, (tuple, list)) else [result])
    for t in items:
        if not isinstance(t, Tensor):
            raise ArgumentError(f"a captured function returns a tensor, or a tuple, list or dict of tensors; "
                                f"it returned {type(t).__name__}")
    return items


def _capture_support(device: Device):
    """nbx.memory.graphs' stream capture for the device type, or None (no capture: run eagerly)."""
    graphs = services.provided("graph_capture")
    if graphs is None:
        return None
    try:
        graphs.capture_support(device.type)
    except NotSupportedError:
        return None
    return graphs


@dataclass
class _Capture:
    inputs: tuple[Tensor, ...]
    length: Length | None
    outputs: object
    graph: object = None      # nbx.memory.graphs.Graph; None where the step runs eagerly
    recorder: object = None   # graph_memory.Recorder of the capture's first run
    replays: int = 0
    flat: list = field(default_factory=list)


class Step:
    """A function of nbx ops captured per key (input shapes and dtypes, length bucket); see the module doc."""

    def __init__(self, fn, inputs, length, *, max_length=None, device=None, max_captures: int = 8, warmup: int = 1):
        if not callable(fn):
            raise ArgumentError(f"capture takes a function of nbx ops, not {fn!r}")
        if not isinstance(max_captures, int) or max_captures < 1:
            raise ArgumentError(f"max_captures is a count >= 1, not {max_captures!r}")
        if not isinstance(warmup, int) or warmup < 1:
            raise ArgumentError(f"warmup is a count >= 1 of eager runs before a capture (they compile and load "
                                f"the kernels, which a capture cannot do), not {warmup!r}")
        self.fn, self.max_captures, self.warmup = fn, max_captures, warmup
        self.device = self._device(inputs, device)
        self.bucketed = length is not None
        if max_length is not None and (not self.bucketed or not isinstance(max_length, int) or max_length < 1):
            raise ArgumentError(f"max_length (a positive int) bounds the buckets of a step captured with length=; "
                                f"got max_length={max_length!r}, length={length!r}")
        self.max_length = max_length
        self._lengths = _ladder(self.device) if self.bucketed else None  # read once: the file in force at capture
        self.captures_made = 0
        self._captures: OrderedDict = OrderedDict()
        self._current: _Capture | None = None
        self._closed = False
        self._capture(tuple(inputs), length, reuse_inputs=True)

    # ---- public ----------------------------------------------------------------------------------
    def __call__(self, *inputs, length=None):
        """Copy inputs into the static inputs of their key (capturing it first if new), replay, return outputs."""
        entry = self._current
        if length is None and not self.bucketed and not self._closed and _same(inputs, entry.inputs):
            return self._run(entry, None)  # the static inputs themselves, written in place: nothing to copy
        self._check_open()
        entry = self._entry(inputs, length)
        for static, new in zip(entry.inputs, inputs):
            if new is not static:
                static._copy_from(new)
        return self._run(entry, length)

    def replay(self, length=None):
        """Replay the current key after the caller wrote into step.inputs; returns step.outputs."""
        self._check_open()
        entry = self._current
        if length is not None:
            if not self.bucketed:
                raise ArgumentError("replay(length=) of a step captured without length=")
            if self._bucket(length) != entry.length.bucket:
                raise ArgumentError(f"length {length} is outside the current capture's bucket "
                                    f"({entry.length.bucket}); call the step with its inputs to change buckets")
        return self._run(entry, length)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self._current.inputs

    @property
    def outputs(self):
        return self._current.outputs

    @property
    def length(self) -> Length | None:
        return self._current.length

    @property
    def captured(self) -> bool:
        """True where the step replays a device graph; False where it runs eagerly (cpu, interp)."""
        return self._current.graph is not None

    @property
    def nodes(self) -> int | None:
        """Launches and copies in the current key's graph (None: eager, or the driver cannot say)."""
        return self._current.graph.nodes if self._current.graph is not None else None

    @property
    def keys(self) -> list:
        return list(self._captures)

    @property
    def memory(self) -> StepMemory:
        """The current key's declared costs, slab plan and private pool (nbx.core.graph_memory)."""
        self._check_open()
        entry = self._current
        reserved = entry.graph.pool.stats().reserved if entry.graph is not None else 0
        return summarize(entry.recorder, reserved)

    @property
    def reserved(self) -> int:
        """Bytes the private pools of every kept capture hold from the driver (0 where steps run eagerly):
        memory outside the device allocator's own figures."""
        return sum(e.graph.pool.stats().reserved for e in self._captures.values() if e.graph is not None)

    def close(self) -> None:
        """Close every capture: graphs destroyed, private memory back (outputs still held keep theirs)."""
        for entry in self._captures.values():
            self._release(entry)
        self._captures.clear()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Step:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        how = "closed" if self._closed else ("captured" if self.captured else "eager")
        return f"Step({getattr(self.fn, '__name__', 'fn')}, {self.device}, {len(self._captures)} keys, {how})"

    # ---- inside ----------------------------------------------------------------------------------
    def _device(self, inputs, device) -> Device:
        for t in inputs:
            if not isinstance(t, Tensor):
                raise ArgumentError(f"a step's inputs are tensors (pass other values in fn's closure), "
                                    f"got {type(t).__name__}")
        devices = {t.device for t in inputs} | ({as_device(device)} if device is not None else set())
        if len(devices) != 1:
            raise ArgumentError(f"a step's inputs live on one device (and device= names it when there are "
                                f"none); got {sorted(map(str, devices)) or 'no input and no device'}")
        return devices.pop()

    def _bucket(self, n: int) -> int:
        return _bucket_on(self._lengths, n, self.max_length)

    def _check_open(self) -> None:
        if self._closed:
            raise ArgumentError("call of a closed step")

    def _entry(self, inputs, length) -> _Capture:
        if self.bucketed != (length is not None):
            raise ArgumentError("a step captured with length= is called with length=, and one without, without")
        key = _key(inputs, self._bucket(length) if self.bucketed else None)
        entry = self._captures.get(key)
        if entry is None:  # a new key: checked in full before it is captured (a known key is one already)
            if len(inputs) != len(self._current.inputs):
                raise ArgumentError(f"the step was captured with {len(self._current.inputs)} inputs, called with "
                                    f"{len(inputs)}")
            self._device(inputs, self.device)
            entry = self._capture(tuple(inputs), length, reuse_inputs=False)
        self._captures.move_to_end(key)
        self._current = entry
        return entry

    def _capture(self, inputs, length, reuse_inputs: bool) -> _Capture:
        bucket = self._bucket(length) if self.bucketed else None
        if not reuse_inputs:
            statics = tuple(empty(t.shape, t.dtype, t.device) for t in inputs)
            for static, t in zip(statics, inputs):
                static._copy_from(t)
            inputs = statics
        entry = _Capture(inputs, Length(bucket, self.device) if self.bucketed else None, None)
        if entry.length is not None:
            entry.length.set(length)
        args = inputs + ((entry.length,) if entry.length is not None else ())
        rec = recorder()
        runs = [0]

        def run():
            runs[0] += 1
            if runs[0] > 1:
                with deferred_checks.step_running():
                    return self.fn(*args)
            with observed(rec), deferred_checks.step_running():
                try:
                    result = self.fn(*args)
                finally:
                    rec.close()
            _flat(result)  # refused before a graph is made of it
            return result

        deferred_checks.prepare(self.device)  # the bounds record the step's kernels raise, made before a capture
        graphs = _capture_support(self.device)
        if graphs is None:
            entry.outputs = run()
        else:
            entry.graph = graphs.capture(run, self.device, warmup=self.warmup)
            entry.outputs = entry.graph.outputs
        entry.flat, entry.recorder = _flat(entry.outputs), rec
        self.captures_made += 1
        key = _key(inputs, bucket)
        self._captures[key] = self._current = entry
        while len(self._captures) > self.max_captures:
            self._release(self._captures.popitem(last=False)[1])
        return entry

    def _run(self, entry: _Capture, length):
        if length is not None:
            entry.length.set(length)
        if entry.graph is not None:
            entry.graph.replay()
            deferred_checks.replayed(self.device)
        else:
            self._eager(entry)
        entry.replays += 1
        return entry.outputs

    def _eager(self, entry: _Capture) -> None:
        args = entry.inputs + ((entry.length,) if entry.length is not None else ())
        with deferred_checks.step_running():
            fresh = _flat(self.fn(*args))
        if len(fresh) != len(entry.flat):
            raise DataDependentShapeError(f"the step returned {len(fresh)} tensors, {len(entry.flat)} at capture")
        for out, new in zip(entry.flat, fresh):
            if new.shape != out.shape or new.dtype != out.dtype:
                raise DataDependentShapeError(
                    f"the step's output changed from {out.dtype.name}{list(out.shape)} at capture to "
                    f"{new.dtype.name}{list(new.shape)} for the same input shapes: an output shape that depends "
                    f"on the data cannot be replayed")
            if new is not out:
                out._copy_from(new)

    @staticmethod
    def _release(entry: _Capture) -> None:
        if entry.graph is not None:
            entry.graph.close()


def capture(fn, *inputs, length: int | None = None, max_length: int | None = None, device=None,
            max_captures: int = 8, warmup: int = 1) -> Step:
    """Capture fn(*inputs) (fn(*inputs, Length) with length=, buckets at most max_length) once; returns
    the Step that replays it (see the module's doc)."""
    return Step(fn, inputs, length, max_length=max_length, device=device, max_captures=max_captures, warmup=warmup)


__all__ = ["Length", "Step", "StepMemory", "capture", "length_bucket"]
