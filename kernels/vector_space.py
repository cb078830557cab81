"""The vector family's search space, shared by its split-K and stream-K twins (kernels.splitk,
kernels.streamk): parameters and defaults, the shared memory and registers a config takes, the
instructions it needs, and which configs fit a device. Its kernel code is kernels.vector.
Parameters:
  bm, bn, bk   block tile;  tm, tn   register tile (multiples of 4)
  pad          extra columns per shared row (0 or 4, keeping rows 16-byte aligned)
  stages       shared tiles: 1, two barriers per k-step; 2 or more, the next tile written while
               the current one is read, one barrier per k-step
  unroll       the BK steps of a tile as straight-line code (kernels.base.unrolled)
  fragments    1: one set of fragment registers, so a step's shared loads wait for the previous
               step's multiplies to free them; 2 (with unroll): two sets, step k+1's loads issued
               before step k multiplies, hiding their latency for TM + TN more registers
  wide_fetch   global reads of VEC adjacent elements as one 16-byte load (and B's shared writes as
               one 16-byte store) wherever a tile lies inside 16-byte-aligned rows; scalar loads
               at the edges and for unaligned operands (kernels.tiles). A build told which
               operands have unaligned rows (`unaligned`) fetches their groups inside the
               matrices as VEC scalar loads from one address, untested, and copies them
               asynchronously one element per thread, adjacent threads taking adjacent ones;
               told that C's are, a kernel adding into C adds each float32 group as the widest
               adds its address allows (intrinsics.reduce_add_unaligned)
  async_copy   tiles copied from global to shared memory by `cp.async` (kernels.tiles.tile_copier)
               STAGES - 1 tiles ahead of the one being multiplied, instead of through registers
               one tile ahead: no registers held for the next tile, and with 3 or 4 stages more
               loads in flight
  min_blocks   blocks per SM ptxas must leave room for (launch_bounds): 2 caps a 256-thread block
               at 128 registers, spilling if it must, for twice the resident warps
Shared tiles past the 48 KB of static shared memory (small tiles with deep pipelines, big tiles
with several stages) live in dynamic shared memory, which the launch sizes and opts in to.
"""

from __future__ import annotations

from .base import (
    DeviceLimits,
    Footprint,
    Schedules,
    itemsize,
)
from .intrinsics import (
    ASYNC_COPY_NEEDS,
    VECTOR_ADD_NEEDS,
)
from .tiles import estimated_registers, restrict_tiling, threads_per_block

SPACE = {
    "bm": [16, 32, 64, 128, 256],
    "bn": [16, 32, 64, 128, 256],
    "bk": [8, 16, 32],
    "tm": [4, 8, 16],
    "tn": [4, 8, 16],
    "pad": [0, 4],
    "stages": [1, 2, 3, 4, 5, 6],
    "unroll": [False, True],
    "fragments": [1, 2],
    "wide_fetch": [False, True],
    "async_copy": [False, True],
    "min_blocks": [1, 2],
}

DEFAULT = {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "pad": 4, "stages": 1, "unroll": True, "fragments": 1,
           "wide_fetch": True, "async_copy": False, "min_blocks": 1}

def shared_bytes(config: dict, dtype: str) -> int:
    words = config["stages"] * config["bk"] * (config["bm"] + config["bn"] + 2 * config["pad"])
    return words * itemsize(dtype)

def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    if config["fragments"] == 2 and not config["unroll"]:
        return "two fragment sets need unrolled steps (a rolled loop would index them at run time)"
    if config["async_copy"] and config["stages"] == 1:
        return "asynchronous copies need a second shared tile to copy into"
    if config["stages"] > 2 and not config["async_copy"]:
        return "copies through registers run one tile ahead, so more than 2 shared tiles would sit idle"
    return restrict_tiling(config, dtype, limits, shared_bytes(config, dtype), dynamic_shared=True)

#: a tile of this family computed whole, with K split (kernels.splitk) or stream-K (kernels.streamk)
SCHEDULES = Schedules(whole="vector", split="splitk", stream="streamk")

def instructions(config: dict, dtype: str) -> dict:
    """cp.async where the config copies tiles asynchronously."""
    return dict(ASYNC_COPY_NEEDS) if config.get("async_copy") else {}

def adding_instructions(config: dict, dtype: str) -> dict:
    """`instructions`, and for float32 the 16-byte adds into C of the kernels that split K or
    stream it (kernels.splitk, kernels.streamk)."""
    return {**instructions(config, dtype), **(VECTOR_ADD_NEEDS if dtype == "float32" else {})}

def footprint(config: dict, dtype: str) -> Footprint:
    """A block's tile, threads, registers (at least 32: ptxas's floor in practice) and shared tiles."""
    return Footprint(tile=(config["bm"], config["bn"]), bk=config["bk"], threads=threads_per_block(config),
                     registers=max(estimated_registers(config, dtype), 32), shared=shared_bytes(config, dtype))
