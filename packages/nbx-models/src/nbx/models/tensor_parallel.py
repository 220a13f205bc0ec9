"""Tensor-parallel decoding: one process (or thread) per rank, each holding its shard of the model.

    comm = ...   # nbx.devices.nvidia.nccl.Communicator.from_env() in a rank nccl_launch started
    model = nbx.models.load(path, tensor_parallel=2, communicator=comm)   # or found by the device plugin
    tokens = model.generate(prompt, 32)                                   # the same on every rank

A rank reads only its shard from the safetensors files (sharding.py). Per layer it computes its
q heads (and their KV heads, paged in its own KV cache), its block of the MLP's intermediate
features, and one all_reduce (sum) after the attention output and one after the MLP; the
embedding lookup is one more all_reduce (each row lives on one rank), the lm_head's vocabulary
blocks one all_gather. So every rank holds the same residual stream and the same logits, bit for
bit: with the same seed their sampling draws the same Philox stream and picks the same tokens,
and no broadcast is needed.

The communicator is anything with rank, world_size, device, all_reduce_(x, "sum"),
all_gather(x) and abort() (nbx.devices.nvidia.nccl.Communicator; the tests' fake): nbx-models
imports no vendor code. Without one, the device's plugin is asked for it
(`backend.tensor_parallel_communicator(timeout)`), and `nbx generate --tensor-parallel N` starts the
ranks through `backend.tensor_parallel_launch(argv, nproc)`.

Faults: a rank whose own work raises aborts its communicator (its peers' collectives then fail:
CollectiveFailedError); a rank that makes no progress for the caller's timeout (a peer died or hangs,
its collective never completes) is ended by the watchdog, which aborts the communicator:
RankTimeoutError. Neither hangs.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import nbx.core as nbx

from .decoder import Decoder
from .errors import CollectiveFailedError, CommunicatorNotFoundError, RankTimeoutError
from .sharding import ShardedWeights, ShardPlan

DEFAULT_TIMEOUT_S = 600.0   # first steps may compile and tune kernels for minutes; callers serving set less


def find_communicator(device=None, timeout: float = DEFAULT_TIMEOUT_S):
    """The communicator the device's plugin makes for this process's rank (device None: the first
    plugin that offers one)."""
    from nbx.core.device import backends, get_backend
    candidates = [get_backend(nbx.as_device(device).type)] if device is not None else list(backends().values())
    for backend in candidates:
        make = getattr(backend, "tensor_parallel_communicator", None)
        if make is not None:
            return make(timeout=timeout)
    where = f"the {nbx.as_device(device).type} plugin" if device is not None else "no installed device plugin"
    raise CommunicatorNotFoundError(f"tensor-parallel loading needs a communicator: pass communicator=, or run on "
                                    f"a device whose plugin makes one ({where} does); on NVIDIA GPUs start the "
                                    "ranks with `python -m nbx.devices.nvidia.nccl_launch`")


class Watchdog:
    """Aborts the communicator when a rank makes no progress (no collective returns, no step ends)
    for timeout seconds while it is watching; the rank then raises RankTimeoutError."""

    def __init__(self, comm, timeout: float):
        if not timeout > 0:
            raise nbx.ArgumentError(f"the watchdog's timeout is seconds > 0, got {timeout}")
        self.comm, self.timeout = comm, float(timeout)
        self.fired: str | None = None      # what the rank was waiting for when it fired
        self._last, self._what = time.monotonic(), "start"
        self._depth = 0
        self._stop = threading.Event()

    def kick(self, what: str) -> None:
        self._last, self._what = time.monotonic(), what

    def error(self) -> RankTimeoutError:
        return RankTimeoutError(f"rank {self.comm.rank} of {self.comm.world_size} made no progress for "
                                f"{self.timeout:g} s (waiting after: {self.fired}); a peer rank died or hangs. "
                                "The communicator was aborted")

    def _watch(self) -> None:
        poll = min(0.05, self.timeout / 10)
        while not self._stop.wait(poll):
            if time.monotonic() - self._last > self.timeout:
                self.fired = self._what
                self.comm.abort()   # unblocks this rank's pending collective (NCCL's abort; the fake's barrier)
                return

    @contextmanager
    def watching(self):
        """Watch the block (re-entrant); a block that fails aborts the communicator, so the peers
        waiting for this rank fail at once instead of at their timeout (refused arguments excepted)."""
        if self.fired:
            raise self.error()
        outer = self._depth == 0
        if outer:
            self.kick("start")
            self._stop.clear()
            thread = threading.Thread(target=self._watch, name="nbx-tp-watchdog", daemon=True)
            thread.start()
        self._depth += 1
        try:
            yield
        except (nbx.ArgumentError, nbx.IndexingError):
            raise   # the caller's arguments, refused before any work (alike on every rank): nothing to end
        except BaseException as exc:
            if self.fired:
                raise self.error() from exc
            if outer:
                self.comm.abort()
            raise
        finally:
            self._depth -= 1
            if outer:
                self._stop.set()
                thread.join()
        if self.fired:
            raise self.error()


class TensorParallelDecoder(Decoder):
    """A Decoder holding one rank's shards; every rank runs the same calls in the same order."""

    def __init__(self, family, config, weights: ShardedWeights, comm, timeout: float):
        plan = weights.plan
        super().__init__(family, config, weights, local_shapes=plan.local_shapes())
        self.comm, self.plan = comm, plan
        self.watchdog = Watchdog(comm, timeout)

    @property
    def rank(self) -> int:
        return self.comm.rank

    # ---- the collectives ----------------------------------------------------------------------
    def _collective(self, what: str, call, *args):
        self.watchdog.kick(what)
        try:
            out = call(*args)
        except Exception as exc:
            if self.watchdog.fired:
                raise self.watchdog.error() from exc
            raise CollectiveFailedError(f"rank {self.comm.rank} of {self.comm.world_size}: {what} failed "
                                        f"({type(exc).__name__}: {exc}); a peer rank ended or aborted") from exc
        self.watchdog.kick(what)
        return out

    def _sum(self, x, what: str):
        return self._collective(what, self.comm.all_reduce_, x.contiguous(), "sum")

    # ---- the three places a rank differs from one device ---------------------------------------
    def embed_rows(self, ids):
        """Each rank looks up the ids of its vocabulary block (zeros elsewhere); the sum is exact."""
        lo, hi = self.plan.vocab.start, self.plan.vocab.stop
        mine = (ids >= lo) & (ids < hi)
        rows = nbx.embedding(nbx.where(mine, ids - lo, 0), self.embed)
        return self._sum(rows * mine.reshape(-1, 1).to(dtype=rows.dtype), "the embedding's all_reduce")

    def output_linear(self, x, weight, bias, residual):
        """This rank's heads' (or intermediate block's) share of the product, summed over the ranks.
        Rank 0 adds the bias and the residual into its share (the fused linear of one device), so the
        sum is the layer's output with no kernel after the collective."""
        if self.comm.rank == 0:
            part = nbx.linear(x, weight, bias, residual=residual)
        else:
            part = nbx.linear(x, weight)
        return self._sum(part, "an all_reduce of a layer's output")

    def head(self, x):
        """The logits of the whole vocabulary: each rank's block, gathered in rank order."""
        local = super().head(x)                                           # [rows, vocab / n]
        blocks = self._collective("the logits' all_gather", self.comm.all_gather, local.contiguous())
        rows = local.shape[0]
        return blocks.permute(1, 0, 2).contiguous().reshape(rows, self.vocab)

    # ---- the public calls, watched --------------------------------------------------------------
    def logits_batch(self, sequences):
        with self.watchdog.watching():
            return super().logits_batch(sequences)

    def generate_batch(self, sequences, max_new_tokens: int, temperature: float = 0.0, top_k=None, top_p=None,
                       seed=None, on_token=None):
        with self.watchdog.watching():
            return super().generate_batch(sequences, max_new_tokens, temperature, top_k, top_p, seed, on_token)


def load_tensor_parallel(folder, config: dict, family, device, dtype, tensor_parallel: int, rank, communicator,
                         timeout):
    """This process's rank of a decoder split tensor_parallel ways (nbx.models.load's tensor_parallel=)."""
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    comm = communicator if communicator is not None else find_communicator(device, timeout)
    if comm.world_size != tensor_parallel:
        raise nbx.ArgumentError(f"tensor_parallel={tensor_parallel}, but the communicator has {comm.world_size} ranks")
    if rank is not None and rank != comm.rank:
        raise nbx.ArgumentError(f"rank={rank}, but the communicator is rank {comm.rank}")
    if device is not None and nbx.as_device(device) != nbx.as_device(comm.device):
        raise nbx.ArgumentError(f"rank {comm.rank}'s communicator is on {comm.device}; device={device} was asked")
    plan = ShardPlan.of(config, comm.rank, comm.world_size)
    weights = ShardedWeights.open(folder, plan, device=comm.device, dtype=dtype)
    try:
        model = TensorParallelDecoder(family, config, weights, comm, timeout)
    finally:
        weights.close()
    model.bytes_read = weights.bytes_read   # what this rank read of the checkpoint's files
    return model
