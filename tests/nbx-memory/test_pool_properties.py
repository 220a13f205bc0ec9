"""Random sequences of allocations, frees, stream switches and event completions keep the pool sound."""
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nbx.core.errors import DeviceOOMError
from nbx.memory.expandable import ExpandableRange
from nbx.memory.fakes import FakeDevice, FakeStreams
from nbx.memory.pool import NBX, Pool
from nbx.memory.rules import ONE_CLASS, TORCH_LIKE

KiB, MiB = 1 << 10, 1 << 20

sizes = st.one_of(st.integers(1, 4 * KiB), st.integers(4 * KiB, 1 * MiB), st.integers(1 * MiB + 1, 24 * MiB))
streams = st.sampled_from(["s0", "s1", "s2"])


class PoolMachine(RuleBasedStateMachine):
    @initialize(capacity=st.sampled_from([None, 48 * MiB, 96 * MiB]), chunk=st.sampled_from([None, 2 * MiB, 4 * MiB]),
                rules=st.sampled_from([NBX, ONE_CLASS, TORCH_LIKE]), parked=st.sampled_from([1.0, 0.25]))
    def build(self, capacity, chunk, rules, parked):
        self.device = FakeDevice(capacity)
        self.streams = FakeStreams()
        self.range = ExpandableRange(self.device.physical, chunk, capacity or 256 * MiB) if chunk else None
        if capacity is None:
            parked = 1.0  # a fraction needs the device's total
        self.pool = Pool(self.device.segments, rules, parked_fraction=parked, events=self.streams,
                         synchronize=self.synchronize, expandable=self.range)
        self.blocks = []
        self.used_on = {}   # id(block) -> extra streams named by record_stream
        self.fences = []    # (start, end, streams that have not passed the free yet)

    def synchronize(self):
        self.fences.clear()
        self.streams.synchronize()

    @rule(nbytes=sizes, stream=streams)
    def allocate(self, nbytes, stream):
        try:
            blk = self.pool.allocate(nbytes, stream)
        except DeviceOOMError as err:
            assert self.device.capacity is not None
            assert err.requested == nbytes and err.total == self.device.capacity and err.free is not None
            assert err.live == self.pool.stats().allocated and err.cached is not None
            return
        end = blk.ptr + self.pool.rules.round(nbytes)
        for start, stop, needs in self.fences:  # stream order: no stream but the waiting ones may reuse early
            if start < end and blk.ptr < stop:
                assert needs <= {stream}, f"{blk} reused on {stream} before {needs - {stream}} passed its free"
        self.blocks.append(blk)

    @precondition(lambda self: self.blocks)
    @rule(data=st.data())
    def free(self, data):
        i = data.draw(st.integers(0, len(self.blocks) - 1))
        blk = self.blocks.pop(i)
        needs = {blk.stream} | self.used_on.pop(id(blk), set())
        self.fences.append((blk.ptr, blk.ptr + self.pool.rules.round(blk.nbytes), needs))
        blk.release()

    @precondition(lambda self: self.blocks)
    @rule(data=st.data(), stream=streams)
    def use_on_another_stream(self, data, stream):
        i = data.draw(st.integers(0, len(self.blocks) - 1))
        self.pool.record_stream(self.blocks[i], stream)
        self.used_on.setdefault(id(self.blocks[i]), set()).add(stream)

    @rule(stream=streams)
    def stream_passes_its_events(self, stream):
        self.streams.complete(stream)
        for _, _, needs in self.fences:
            needs.discard(stream)

    @rule()
    def empty_cache(self):
        self.pool.empty_cache()

    @invariant()
    def no_two_live_blocks_overlap(self):
        spans = sorted((b.ptr, b.ptr + b.nbytes) for b in self.blocks)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start

    @invariant()
    def the_pool_accounts_for_every_byte(self):
        rules, stats = self.pool.rules, self.pool.stats()
        views = self.pool.snapshot()
        by_ptr = {b.ptr: b for b in self.blocks}
        live = pending = 0
        for view in views:
            cursor = view.address
            for ptr, size, state in view.blocks:
                assert ptr == cursor and size > 0
                cursor += size
                if state == "live":
                    blk = by_ptr.pop(ptr)
                    assert size == rules.round(blk.nbytes)
                    assert (view.kind == "small") == rules.is_small(size)
                    live += size
                    if view.kind == "range":
                        self._assert_mapped(ptr, size)
                elif state == "pending":
                    pending += size
            assert cursor == view.address + view.size
        assert not by_ptr  # every handed-out block is a live block of the pool
        assert stats.allocated == live == sum(rules.round(b.nbytes) for b in self.blocks)
        assert stats.requested == sum(b.nbytes for b in self.blocks) and stats.pending == pending
        segment_bytes = sum(v.size for v in views if v.kind != "range")
        chunk_bytes = sum(self.device.physical.handles.values())
        assert stats.reserved == segment_bytes + chunk_bytes == self.device.used
        assert stats.reserved_peak >= stats.reserved and stats.allocated_peak >= stats.allocated

    def _assert_mapped(self, ptr, size):
        chunk = self.range.chunk
        first = self.range.base + (ptr - self.range.base) // chunk * chunk
        for address in range(first, ptr + size, chunk):
            assert address in self.device.physical.mapped

    def teardown(self):
        if not hasattr(self, "pool"):
            return
        for b in self.blocks:
            b.release()
        self.blocks = []
        self.pool.empty_cache()
        stats = self.pool.stats()
        assert stats.reserved == stats.allocated == stats.pending == 0
        assert self.device.used == 0 and not self.device.segments.live and not self.device.physical.handles
        assert self.streams.outstanding == 0  # every event the pool recorded was released


PoolMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPoolSequences = PoolMachine.TestCase
