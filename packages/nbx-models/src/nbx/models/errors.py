"""The named refusals of nbx.models (all under nbx.core's NbxError)."""
from __future__ import annotations

from nbx.core.errors import FileFormatError, NbxError


class UnknownArchitectureError(NbxError, ValueError):
    """A checkpoint whose config names an architecture nbx.models does not implement."""

    def __init__(self, found, known):
        self.found, self.known = found, tuple(known)
        super().__init__(f"nbx.models does not know the architecture {found!r}; it knows {', '.join(self.known)}")


class CheckpointError(FileFormatError):
    """A checkpoint folder that lacks a file or a tensor its config implies, or holds one of the wrong shape."""


class TensorParallelError(NbxError):
    """A tensor-parallel rank that cannot go on: its communicator or its peers failed it."""


class CommunicatorNotFoundError(TensorParallelError):
    """Tensor-parallel loading without a communicator, on a device whose plugin makes none."""


class CollectiveFailedError(TensorParallelError):
    """A collective of this rank failed: a peer rank ended or aborted the communicator."""


class RankTimeoutError(TensorParallelError, TimeoutError):
    """A rank made no progress within the caller's timeout (a peer died or hangs); its communicator was aborted."""
