"""The NCCL unique id and how it reaches every rank: a file or an environment variable, as hex.

One process per GPU. One of them (rank 0, or a launcher that outlives the ranks' start) calls
ncclGetUniqueId, which also starts NCCL's bootstrap listener in that process; the 128 bytes then
travel to the other ranks, which pass them to ncclCommInitRank. A file is written atomically (a
reader never sees half an id) and read by waiting for it to appear; an environment variable holds
the same 256 hex digits. The variables a launcher sets for each rank:

    NBX_NCCL_RANK, NBX_NCCL_WORLD_SIZE      this process's rank and the number of ranks
    NBX_NCCL_DEVICE                         the rank's device (cuda:<r>)
    NBX_NCCL_UNIQUE_ID                      the id as hex, or
    NBX_NCCL_ID_FILE                        a fresh path: rank 0 writes the id there, the others wait for it
"""
from __future__ import annotations

import os
import time
from ctypes import byref
from pathlib import Path

from .nccl_errors import NcclBootstrapError
from .nccl_library import UNIQUE_ID_BYTES, NcclUniqueIdStruct, nccl

ENV_RANK = "NBX_NCCL_RANK"
ENV_WORLD_SIZE = "NBX_NCCL_WORLD_SIZE"
ENV_UNIQUE_ID = "NBX_NCCL_UNIQUE_ID"
ENV_ID_FILE = "NBX_NCCL_ID_FILE"
ENV_DEVICE = "NBX_NCCL_DEVICE"
DEFAULT_WAIT_S = 120.0


class UniqueId:
    """The 128 opaque bytes every rank of one communicator must share."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes):
        raw = bytes(raw)
        if len(raw) != UNIQUE_ID_BYTES:
            raise NcclBootstrapError(f"an NCCL unique id is {UNIQUE_ID_BYTES} bytes, got {len(raw)}")
        self.raw = raw

    # ---- hex ---------------------------------------------------------------------------------
    def hex(self) -> str:
        return self.raw.hex()

    @classmethod
    def from_hex(cls, text: str, where: str = "the text") -> UniqueId:
        text = text.strip()
        if len(text) != 2 * UNIQUE_ID_BYTES:
            raise NcclBootstrapError(f"{where} holds {len(text)} characters; an NCCL unique id is "
                                     f"{2 * UNIQUE_ID_BYTES} hex digits")
        try:
            return cls(bytes.fromhex(text))
        except ValueError as exc:
            raise NcclBootstrapError(f"{where} is not hex: {exc}") from None

    # ---- files -------------------------------------------------------------------------------
    def to_file(self, path, *, exist_ok: bool = False) -> Path:
        """Write the id (hex) to path atomically: written beside it, then renamed into place.

        An id already there is refused unless exist_ok: a stale id from an earlier run would send
        the other ranks to a bootstrap listener that no longer exists, where they wait forever.
        """
        path = Path(path)
        if path.exists() and not exist_ok:
            raise NcclBootstrapError(f"{path} exists already: a stale NCCL id there would make the other "
                                     f"ranks wait forever; use a fresh path (or remove it)")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.hex() + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def from_file(cls, path, timeout: float = 0.0, poll: float = 0.05) -> UniqueId:
        """Read an id written by to_file, waiting up to timeout seconds for the file to appear."""
        path = Path(path)
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() >= deadline:
                waited = f"after waiting {timeout:g} s" if timeout else "(not waited for)"
                raise NcclBootstrapError(f"no NCCL unique id at {path} {waited}: rank 0 writes it there; "
                                         f"did rank 0 start, and with the same {ENV_ID_FILE}?")
            time.sleep(poll)
        return cls.from_hex(path.read_text(), where=str(path))

    # ---- environment -------------------------------------------------------------------------
    def to_env(self, name: str = ENV_UNIQUE_ID, environ=None) -> str:
        environ = os.environ if environ is None else environ
        environ[name] = self.hex()
        return environ[name]

    @classmethod
    def from_env(cls, name: str = ENV_UNIQUE_ID, environ=None) -> UniqueId:
        environ = os.environ if environ is None else environ
        text = environ.get(name)
        if text is None:
            raise NcclBootstrapError(f"${name} is not set: the launcher passes the NCCL unique id there (hex)")
        return cls.from_hex(text, where=f"${name}")

    def __eq__(self, other) -> bool:
        return isinstance(other, UniqueId) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"UniqueId({self.raw[:8].hex()}...)"


def unique_id() -> UniqueId:
    """A fresh id from ncclGetUniqueId; this process then hosts the bootstrap until the ranks connect."""
    raw = NcclUniqueIdStruct()
    nccl().call("ncclGetUniqueId", byref(raw))
    return UniqueId(bytes(raw.internal))


def _env_int(name: str, environ) -> int:
    text = environ.get(name)
    if text is None:
        raise NcclBootstrapError(f"${name} is not set (the launcher sets {ENV_RANK} and {ENV_WORLD_SIZE})")
    try:
        return int(text)
    except ValueError:
        raise NcclBootstrapError(f"${name} is {text!r}, not an integer") from None


def rank_from_env(environ=None) -> tuple[int, int]:
    """(rank, world size) from NBX_NCCL_RANK and NBX_NCCL_WORLD_SIZE."""
    environ = os.environ if environ is None else environ
    rank, world = _env_int(ENV_RANK, environ), _env_int(ENV_WORLD_SIZE, environ)
    if world < 1 or not 0 <= rank < world:
        raise NcclBootstrapError(f"rank {rank} of world size {world}: a rank is 0 <= rank < world size")
    return rank, world


def shared_id(rank: int, environ=None, timeout: float = DEFAULT_WAIT_S) -> UniqueId:
    """This rank's copy of the id: from NBX_NCCL_UNIQUE_ID, else through the file NBX_NCCL_ID_FILE
    (rank 0 makes the id and writes it, the others wait up to timeout seconds for it)."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_UNIQUE_ID):
        return UniqueId.from_env(ENV_UNIQUE_ID, environ)
    path = environ.get(ENV_ID_FILE)
    if not path:
        raise NcclBootstrapError(f"neither ${ENV_UNIQUE_ID} nor ${ENV_ID_FILE} is set: the launcher passes "
                                 f"the NCCL unique id in one of them")
    if rank == 0:
        uid = unique_id()
        uid.to_file(path)
        return uid
    return UniqueId.from_file(path, timeout=timeout)
