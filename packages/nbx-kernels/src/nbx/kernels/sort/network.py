"""The family's sorting network: a bitonic sort of a power-of-two tensor of integer words.

Triton's tl.sort exchanges partners by an xor-sum reduction and picks each side by a compare and a
select (compiled for sm_90: ~1.4 compares, ~1.4 selects and ~0.7 shuffles an element a layer). This
network takes each layer's pairs apart with reshape/split (free for pairs inside a thread's
registers), keeps min and max (one instruction an element a layer), and sorts a block meant to
descend as its complement ascending (one xor an element a stage, not a select a layer): 3,320
instructions a thread for 4,096 32-bit words over 8 warps where tl.sort takes 5,976 (sm_90, Triton
3.6); 64-bit words (a min or max is a compare and two selects) cost about what tl.sort's do (1,888
against 1,984 for 1,024 words). On the interpreter a 256-word sort takes ~20 ms where tl.sort takes
~350. Every sort of the family (the radix tiles, rows of one program, top-k's winners, the sampling
band) goes through it.
"""
import triton
import triton.language as tl


@triton.jit
def _compare_exchange(x, J: tl.constexpr, N: tl.constexpr):
    """The pairs (i, i + J) of x [N] (i with bit J clear) in ascending order."""
    y = tl.permute(tl.reshape(x, [N // (2 * J), 2, J]), [0, 2, 1])
    low, high = tl.split(y)
    y = tl.join(tl.minimum(low, high), tl.maximum(low, high))
    return tl.reshape(tl.permute(y, [0, 2, 1]), [N])


@triton.jit
def sort_network(x, LOG: tl.constexpr):
    """x [2**LOG] (integer words, signed or not: a complement reverses either order) sorted ascending. Stage s merges blocks of 2**s, ascending where
    bit s of the index is clear and descending where it is set: those are complemented for the
    stage (the complement of a bitonic run is bitonic) so every layer keeps min below max."""
    N: tl.constexpr = 1 << LOG
    at = tl.arange(0, N)
    ones = ~tl.zeros_like(x)
    flip = tl.zeros_like(x)
    for s in tl.static_range(1, LOG + 1):
        if s < LOG:
            descending = tl.where(((at >> s) & 1) == 1, ones, tl.zeros_like(x))
        else:
            descending = tl.zeros_like(x)
        x = x ^ (flip ^ descending)
        flip = descending
        for t in tl.static_range(s):
            x = _compare_exchange(x, 1 << (s - 1 - t), N)
    return x
