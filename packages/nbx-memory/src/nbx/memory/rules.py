"""The caching pool's rules, as data, so that a trace can be replayed under several and compared.

The rules nbx runs with (`NBX`) were chosen by replaying the shipped trace through every set here
with `nbx.memory.pool.simulate`; docs/memory.md gives the figures. The others stay for comparison
(tools/bench/memory_rules.py) and for the tests that pin why they lost.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from nbx.core.errors import ArgumentError

KiB, MiB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class PoolRules:
    name: str
    granularity: int         # every block is a multiple of this many bytes, and at least this many
    small_limit: int         # a request of at most this many (rounded) bytes is of the small class...
    small_segment: int       # ...carved from segments of this size
    large_round: int         # a large segment is the request rounded up to a multiple of this
    large_buffer: int        # a large request below large_buffer_below gets a segment of this size (0: off)
    large_buffer_below: int
    half_rule: bool          # a free large block serves a request only if what is left is at most the request...
    size_classes: bool       # False: one class, every request may carve every free block
    half_rule_slack: int = 0  # ...or at most this many bytes (0: the strict rule)

    def __post_init__(self):
        if not isinstance(self.half_rule_slack, int) or self.half_rule_slack < 0 or self.half_rule_slack % 512:
            raise ArgumentError(f"pool rules {self.name!r}: half_rule_slack must be a non-negative multiple of 512, "
                                f"not {self.half_rule_slack!r}")
        for field in ("granularity", "small_segment", "large_round"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0 or value % 512:
                raise ArgumentError(f"pool rules {self.name!r}: {field} must be a positive multiple of 512, "
                                    f"not {value!r}")
        if self.size_classes and not 0 < self.small_limit <= self.small_segment:
            raise ArgumentError(f"pool rules {self.name!r}: the small class limit ({self.small_limit}) must lie "
                                f"within its segment ({self.small_segment})")
        if self.large_buffer and (self.large_buffer % self.large_round or self.large_buffer_below > self.large_buffer):
            raise ArgumentError(f"pool rules {self.name!r}: large_buffer ({self.large_buffer}) must be a multiple of "
                                f"large_round and at least large_buffer_below")

    def round(self, nbytes: int) -> int:
        g = self.granularity
        return max(g, -(-nbytes // g) * g)

    def is_small(self, size: int) -> bool:
        return self.size_classes and size <= self.small_limit

    def half_limit(self, size: int) -> int:
        """The largest free block the half rule lets a (rounded, large) request of size split."""
        return max(2 * size, size + self.half_rule_slack)

    def segment_size(self, size: int, small: bool, buffered: bool = True) -> int:
        """Bytes asked of the driver when a request of (rounded) size finds no free block
        (buffered=False: without the large buffer, as the pool asks once the buffer is refused)."""
        if small:
            return self.small_segment
        if buffered and self.large_buffer and size < self.large_buffer_below:
            return self.large_buffer
        return -(-size // self.large_round) * self.large_round


# nbx's rules (measured on both shipped traces, docs/memory.md "Choosing the rules"): two classes
# (torch's kSmallSize / kSmallBuffer), 512-byte blocks, large segments of the request rounded to
# 2 MiB, except that a request under 10 MiB gets a 20 MiB segment (torch's kLargeBuffer), and the
# half rule with a 56 MiB slack: a free large block serves a request when what is left is at most
# the request or at most 56 MiB. The slack lets requests under 10 MiB share a 20 MiB segment (under
# the strict rule nothing reuses its remainder); the rule still keeps a small request from carving a
# freed block of hundreds of MiB and pinning it.
NBX = PoolRules("nbx", granularity=512, small_limit=1 * MiB, small_segment=2 * MiB, large_round=2 * MiB,
                large_buffer=20 * MiB, large_buffer_below=10 * MiB, half_rule=True, size_classes=True,
                half_rule_slack=56 * MiB)

# nbx's rules until 2026-11-29: no 20 MiB segments, the strict half rule (block <= 2 x request).
STRICT_HALF = replace(NBX, name="strict-half-rule", large_buffer=0, large_buffer_below=0, half_rule_slack=0)

# The same without the half rule: a large request takes the smallest free large block that holds it.
NO_HALF_RULE = replace(STRICT_HALF, name="no-half-rule", half_rule=False)

# torch's caching allocator's large-class growth: requests under 10 MiB get a 20 MiB segment.
TORCH_LIKE = replace(STRICT_HALF, name="torch-like", half_rule=False, large_buffer=20 * MiB,
                     large_buffer_below=10 * MiB)

# The same 20 MiB growth under the strict half rule.
BUFFERED_HALF = replace(TORCH_LIKE, name="buffered-half-rule", half_rule=True)

# Large segments of exactly the rounded request (no 2 MiB rounding), the strict half rule.
EXACT_LARGE = replace(STRICT_HALF, name="exact-large", large_round=512)

# One class, smallest block that holds it: the rules that let a scalar pin a multi-gigabyte block.
ONE_CLASS = replace(STRICT_HALF, name="one-class", size_classes=False, half_rule=False)

RULE_SETS = (NBX, STRICT_HALF, NO_HALF_RULE, TORCH_LIKE, BUFFERED_HALF, EXACT_LARGE, ONE_CLASS)
