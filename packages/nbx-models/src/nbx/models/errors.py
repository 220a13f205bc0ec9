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
