"""Split-K: the `vector` kernel with K shared among `splits` blocks per tile of C.

A shape whose M x N makes few tiles (1024^2 gives 64 tiles of 128x128 for 132 SMs; 16384x64 fewer
still) leaves most of the GPU idle however fast each block is. Here block z of a tile multiplies
the z-th range of K (whole BK-steps) and adds its partial product into C with atomic adds (four
float32 columns as one 16-byte add, or where C's rows are unaligned as the widest adds their
address allows), after a zero-fill launch:
`splits` times the blocks for the price of M*N*splits atomic additions. The order of
the additions varies from run to run, so float results vary in the last bits (within the
verification bound).
"""

from __future__ import annotations

from . import vector
from .base import DeviceLimits, Family, Kernel

SPACE = {**vector.SPACE, "splits": [2, 4, 8, 16, 32, 64, 128]}
DEFAULT = {**vector.DEFAULT, "splits": 4}
shared_bytes = vector.shared_bytes


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    return vector.restrict(config, dtype, limits)


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    return vector.make(config, dtype, family="splitk", layout=layout, offset_bits=offset_bits, unaligned=unaligned)


FAMILY = Family(name="splitk", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=1,
                shared_bytes=shared_bytes,
                instructions=vector.adding_instructions, footprint=vector.footprint, schedules=vector.SCHEDULES)
