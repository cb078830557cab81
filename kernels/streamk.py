"""Stream-K: the `vector` kernel with every tile's k-steps shared out evenly among a fixed grid.

Split-K fills a GPU in whole waves of blocks: 144 tiles on 132 SMs take two waves, the second
nearly empty, and splitting K in two gives 288 blocks and three. Here the grid is
`workers_per_sm` blocks per SM, and the tiles' BK-steps, counted tile after tile, are cut into
as many equal shares as there are blocks: each block multiplies its share, a tile's part at a
time, and adds each part into C with atomic adds (four float32 columns as one 16-byte add, or
where C's rows are unaligned as the widest adds their address allows) after a zero-fill launch,
as split-K does. Every SM then has the same work
whatever the number of tiles, for the price of one or two extra additions of a tile where a share
begins or ends inside it. The order of the additions varies from run to run, so float results
vary in the last bits (within the verification bound).
"""

from __future__ import annotations

from . import vector
from .base import DeviceLimits, Family, Kernel

SPACE = {**vector.SPACE, "workers_per_sm": [1, 2, 3, 4]}
DEFAULT = {**vector.DEFAULT, "workers_per_sm": 1}
shared_bytes = vector.shared_bytes


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    """vector's restriction, with room on an SM for `workers_per_sm` blocks at once (threads,
    registers, and shared memory, of which an SM holds about what one block may opt in to): a
    worker that waits for a free SM leaves its share to the end, a wave of its own."""
    workers = config["workers_per_sm"]
    shared, room = shared_bytes(config, dtype), max(limits.max_shared_per_block, limits.max_dynamic_shared_per_block)
    if workers > 1 and workers * shared > room:
        return f"{workers} blocks of {shared} bytes of shared memory > the {room} an SM holds"
    return vector.restrict({**config, "min_blocks": max(config["min_blocks"], workers)}, dtype, limits)


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    return vector.make(config, dtype, family="streamk", layout=layout, offset_bits=offset_bits, unaligned=unaligned)


FAMILY = Family(name="streamk", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=2,
                shared_bytes=shared_bytes,
                instructions=vector.adding_instructions, footprint=vector.footprint, schedules=vector.SCHEDULES)
