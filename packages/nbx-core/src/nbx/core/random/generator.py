"""Generator: a Philox key (the seed) and the next unused counter (the offset).

A draw takes the counters offset .. offset+k-1 (k = ceil(n / 4) for n elements, each Philox
call giving four 32-bit words; ceil(n / 2) for randint) and moves the offset past them, so
consecutive draws never share a counter. The state is two integers and means the same on
every device: the numbers come from (seed, counter) alone.
"""
from __future__ import annotations

import threading

from ..errors import ArgumentError

UINT64_LIMIT = 1 << 64
DEFAULT_SEED = 0  # the default generator starts here, so a program without manual_seed repeats


def _as_seed(seed) -> int:
    """Seeds are taken as uint64: a negative int64 wraps as Triton's seed.to(tl.uint64) does."""
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise ArgumentError(f"a seed is an integer, got {seed!r}")
    seed = int(seed.__index__())
    if not -(1 << 63) <= seed < UINT64_LIMIT:
        raise ArgumentError(f"seed {seed} is outside [-2**63, 2**64)")
    return seed % UINT64_LIMIT


def _as_offset(offset) -> int:
    if isinstance(offset, bool) or not hasattr(offset, "__index__"):
        raise ArgumentError(f"an offset is an integer, got {offset!r}")
    offset = int(offset.__index__())
    if not 0 <= offset < UINT64_LIMIT:
        raise ArgumentError(f"offset {offset} is outside [0, 2**64)")
    return offset


class Generator:
    """A counter-based random stream: Philox4x32-10 keyed by seed, positioned at offset.

    A seed is any integer in [-2**63, 2**64). A negative seed wraps to uint64 as torch's
    manual_seed does (and as the kernels' seed.to(tl.uint64) would): Generator(seed=-1).seed is
    2**64 - 1, and both name the same stream. Anything outside that range is an ArgumentError.
    """

    def __init__(self, seed: int = DEFAULT_SEED, offset: int = 0):
        self._lock = threading.Lock()
        self._seed = _as_seed(seed)
        self._offset = _as_offset(offset)

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def offset(self) -> int:
        return self._offset

    def manual_seed(self, seed: int) -> "Generator":
        """Restart the stream: a new key and counter 0."""
        seed = _as_seed(seed)
        with self._lock:
            self._seed, self._offset = seed, 0
        return self

    def get_state(self) -> tuple[int, int]:
        return self._seed, self._offset

    def set_state(self, state) -> None:
        try:
            seed, offset = state
        except (TypeError, ValueError):
            raise ArgumentError(f"a generator state is (seed, offset), got {state!r}") from None
        seed, offset = _as_seed(seed), _as_offset(offset)
        with self._lock:
            self._seed, self._offset = seed, offset

    def reserve(self, count: int) -> tuple[int, int]:
        """Take `count` counters: returns (seed, first counter) and advances the offset past them."""
        with self._lock:
            start = self._offset
            if start + count > UINT64_LIMIT:
                raise ArgumentError(
                    f"the stream of seed {self._seed} has {UINT64_LIMIT - start} counters left, "
                    f"the draw needs {count}")
            self._offset = start + count
            return self._seed, start

    def __repr__(self) -> str:
        return f"Generator(seed={self._seed}, offset={self._offset})"


_default = Generator()


def default_generator() -> Generator:
    return _default


def manual_seed(seed: int) -> Generator:
    """Reseed the default generator (offset back to 0) and return it."""
    return _default.manual_seed(seed)


def resolve(generator) -> Generator:
    if generator is None:
        return _default
    if not isinstance(generator, Generator):
        raise ArgumentError(f"generator must be an nbx.core.random.Generator, got {type(generator).__name__}")
    return generator
