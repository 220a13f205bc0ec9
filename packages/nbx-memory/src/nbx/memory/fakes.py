"""A device made of counters: the pool's rules run, are tested and are replayed without a GPU.

FakeDevice holds a capacity (None: unlimited) shared by its segment source (driver allocations),
its physical memory (VMM chunks) and, through them, every pool over it. Addresses come from a
counter with a gap after every segment, so two segments never touch and a pool that merged
across them would be caught. FakeStreams decides when an event is complete: never by itself, only
when told (complete / complete_all / synchronize), so a test can hold a stream back.
"""
from __future__ import annotations

from nbx.core.errors import DeviceError

_GAP = 1 << 16  # bytes of unused address space after every segment and range


class FakeDevice:
    def __init__(self, capacity: int | None = None, *, granularity: int = 2 << 20):
        self.capacity = capacity
        self.used = 0
        self._next = 1 << 32
        self.segments = FakeSegmentSource(self)
        self.physical = FakePhysicalMemory(self, granularity)

    def take(self, nbytes: int) -> bool:
        if self.capacity is not None and self.used + nbytes > self.capacity:
            return False
        self.used += nbytes
        return True

    def give(self, nbytes: int) -> None:
        self.used -= nbytes

    def address_space(self, nbytes: int, alignment: int) -> int:
        address = -(-self._next // alignment) * alignment
        self._next = address + nbytes + _GAP
        return address

    def memory_info(self) -> tuple[int | None, int | None]:
        if self.capacity is None:
            return None, None
        return self.capacity - self.used, self.capacity


class FakeSegmentSource:
    """cudaMalloc / cudaFree / cudaMemGetInfo over a FakeDevice; `requests` lists every size asked."""

    def __init__(self, device: FakeDevice):
        self.device = device
        self.live: dict[int, int] = {}
        self.requests: list[int] = []
        self.refusals: list[int] = []
        self.frees = 0

    def allocate(self, nbytes: int) -> int | None:
        self.requests.append(nbytes)
        if not self.device.take(nbytes):
            self.refusals.append(nbytes)
            return None
        address = self.device.address_space(nbytes, 512)
        self.live[address] = nbytes
        return address

    def free(self, address: int) -> None:
        nbytes = self.live.pop(address, None)
        if nbytes is None:
            raise DeviceError(f"fake driver: free of 0x{address:x}, which it never allocated or already freed")
        self.frees += 1
        self.device.give(nbytes)

    def memory_info(self) -> tuple[int | None, int | None]:
        return self.device.memory_info()


class FakePhysicalMemory:
    """cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease, checked like the driver."""

    def __init__(self, device: FakeDevice, granularity: int):
        self.device = device
        self.granularity = granularity
        self.ranges: dict[int, int] = {}
        self.handles: dict[int, int] = {}     # handle -> bytes
        self.mapped: dict[int, tuple[int, int]] = {}  # address -> (bytes, handle)
        self._handle_mapped: set[int] = set()
        self._next_handle = 1
        self.creates = self.releases = self.maps = self.unmaps = 0

    def reserve(self, nbytes: int) -> int:
        self._check_granular("reserve", nbytes)
        address = self.device.address_space(nbytes, self.granularity)
        self.ranges[address] = nbytes
        return address

    def free_range(self, address: int, nbytes: int) -> None:
        if self.ranges.get(address) != nbytes:
            raise DeviceError(f"fake driver: no reserved range of {nbytes} bytes at 0x{address:x}")
        if any(address <= a < address + nbytes for a in self.mapped):
            raise DeviceError(f"fake driver: range at 0x{address:x} freed while chunks are still mapped in it")
        del self.ranges[address]

    def create(self, nbytes: int) -> int | None:
        self._check_granular("create", nbytes)
        if not self.device.take(nbytes):
            return None
        handle, self._next_handle = self._next_handle, self._next_handle + 1
        self.handles[handle] = nbytes
        self.creates += 1
        return handle

    def map(self, address: int, nbytes: int, handle: int) -> None:
        if self.handles.get(handle) != nbytes or handle in self._handle_mapped:
            raise DeviceError(f"fake driver: handle {handle} is not an unmapped chunk of {nbytes} bytes")
        if not any(a <= address and address + nbytes <= a + n for a, n in self.ranges.items()):
            raise DeviceError(f"fake driver: map at 0x{address:x} outside every reserved range")
        if address in self.mapped or address % self.granularity:
            raise DeviceError(f"fake driver: 0x{address:x} is already mapped or not granular")
        self.mapped[address] = (nbytes, handle)
        self._handle_mapped.add(handle)
        self.maps += 1

    def unmap(self, address: int, nbytes: int) -> None:
        entry = self.mapped.pop(address, None)
        if entry is None or entry[0] != nbytes:
            raise DeviceError(f"fake driver: nothing of {nbytes} bytes is mapped at 0x{address:x}")
        self._handle_mapped.discard(entry[1])
        self.unmaps += 1

    def release(self, handle: int) -> None:
        if handle in self._handle_mapped or handle not in self.handles:
            raise DeviceError(f"fake driver: handle {handle} released while mapped, or unknown")
        self.device.give(self.handles.pop(handle))
        self.releases += 1

    def memory_info(self) -> tuple[int | None, int | None]:
        return self.device.memory_info()

    def _check_granular(self, what: str, nbytes: int) -> None:
        if nbytes <= 0 or nbytes % self.granularity:
            raise DeviceError(f"fake driver: {what} of {nbytes} bytes, not a multiple of {self.granularity}")


class FakeStreams:
    """Events that complete only when told: `complete(stream)` passes every event recorded on it so far."""

    def __init__(self):
        self._next = 0
        self._events: dict[int, tuple[object, bool]] = {}  # event -> (stream, done)
        self.recorded = 0

    def record(self, stream) -> int:
        self._next += 1
        self._events[self._next] = (stream, False)
        self.recorded += 1
        return self._next

    def query(self, event: int) -> bool:
        try:
            return self._events[event][1]
        except KeyError:
            raise DeviceError(f"fake stream: event {event} queried after its release") from None

    def release(self, event: int) -> None:
        if self._events.pop(event, None) is None:
            raise DeviceError(f"fake stream: event {event} released twice or never recorded")

    def complete(self, stream) -> None:
        for event, (s, _) in self._events.items():
            if s == stream:
                self._events[event] = (s, True)

    def complete_all(self) -> None:
        for event, (s, _) in self._events.items():
            self._events[event] = (s, True)

    synchronize = complete_all  # a device synchronize completes every stream's work

    @property
    def outstanding(self) -> int:
        """Events recorded and not yet released (a pool that leaks events leaves some)."""
        return len(self._events)
