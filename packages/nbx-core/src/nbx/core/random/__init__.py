"""Counter-based random streams: Philox4x32-10, the generator of Triton's tl.rand.

A (seed, offset) pair names the same numbers on every device. philox.py holds the bit-level
generator and its exact mapping to Triton; ops.py the draws and which counter each element uses;
generator.py the Generator objects and the default one.
"""
from .generator import Generator, default_generator, manual_seed
from .ops import bernoulli, dropout, dropout_mask, normal, rand, randint, randn, uniform

__all__ = ["Generator", "default_generator", "manual_seed", "rand", "randn", "randint", "uniform",
           "normal", "bernoulli", "dropout_mask", "dropout"]
