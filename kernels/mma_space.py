"""The tensor-core families' search space (kernels.dmma, kernels.tf32x3): parameters, defaults,
the resources a config takes (shared memory, warps, registers), the instructions it needs, the
tiles a cold tune tries first, and which configs fit a device. Their kernel code is kernels.dmma.
"""

from __future__ import annotations

from .base import (
    DeviceLimits,
    Footprint,
    itemsize,
)
from .rules import Arch
from .tiles import OVERHEAD_REGISTERS
from .warp_mma import FAST_TENSOR_CORES, KINDS, SHAPES, WARP, counts, needs

SPACE = {
    "mma": list(KINDS["f64"]),
    "bm": [32, 64, 128, 256],
    "bn": [32, 64, 128, 256],
    "bk": [8, 16, 32],
    "warps_m": [1, 2, 4],
    "warps_n": [1, 2, 4],
    "stages": [2, 3, 4, 5],
    "splits": [1, 2, 4, 8, 16, 32, 64],
    "min_blocks": [1, 2],
}

DEFAULT = {"mma": "m8n8k4", "bm": 64, "bn": 64, "bk": 8, "warps_m": 2, "warps_n": 2, "stages": 3, "splits": 1, "min_blocks": 1}

DTYPE = "float64"

PAD_BYTES = 32

#: registers a lane may give its accumulators (a warp's part of C over 32 lanes)
MAX_ACCUMULATOR_REGISTERS = 128

#: the instruction kind that multiplies each dtype, and the parts of an element a lane holds
#: for it (float32 as TF32's big and small parts, kernels.warp_mma.split_tf32)
KIND = {"float64": "f64", "float32": "tf32"}

PARTS = {"float64": 1, "float32": 2}

#: the tile a cold tune tries first (autotune.space.guesses), with the instruction shape each
#: compute capability has: sm_90 adds 16-row ones to sm_80's m8n8k4
FIRST_TILE = {"bm": 64, "bn": 128, "bk": 16, "warps_m": 1, "warps_n": 4, "stages": 3, "min_blocks": 1}

FIRST_SHAPES = {(8, 0): "m8n8k4", (9, 0): "m16n8k4"}

def pad(dtype: str) -> int:
    return PAD_BYTES // itemsize(dtype)

def shared_bytes(config: dict, dtype: str = DTYPE) -> int:
    return config["stages"] * config["bk"] * (config["bm"] + config["bn"] + 2 * pad(dtype)) * itemsize(dtype)

def warp_tiles(config: dict) -> tuple[int, int]:
    """The instruction's tiles of C along a warp's rows and columns."""
    m, n, _ = SHAPES[config["mma"]]
    return config["bm"] // config["warps_m"] // m, config["bn"] // config["warps_n"] // n

def threads_per_block(config: dict) -> int:
    return config["warps_m"] * config["warps_n"] * WARP

def estimated_registers(config: dict, dtype: str = DTYPE) -> int:
    """Accumulators and a chunk's instructions' elements of A and B (each in PARTS) per tile row
    and column, 2 registers a double."""
    fm, fn = warp_tiles(config)
    a, b, c = counts(config["mma"])
    words = itemsize(dtype) // 4
    fragments = PARTS[dtype] * config.get("chunk", 1) * (a * fm + b * fn)
    return words * (c * fm * fn + fragments) + OVERHEAD_REGISTERS

def footprint(config: dict, dtype: str) -> Footprint:
    """A block's tile, warps, registers and shared tiles (kernels.tf32x3's too)."""
    return Footprint(tile=(config["bm"], config["bn"]), bk=config["bk"], threads=threads_per_block(config),
                     registers=estimated_registers(config, dtype), shared=shared_bytes(config, dtype))

def instructions(config: dict, dtype: str) -> dict:
    """The config's float64 mma.sync."""
    return needs("f64", config.get("mma"))

def tensor_tile(tile: dict, shapes: dict, cc: str | None) -> dict | None:
    """`tile` with the newest of `shapes` ({oldest (major, minor) compute capability: shape}) that
    a GPU of compute capability `cc` has; None for GPUs without FAST_TENSOR_CORES or that shape."""
    if cc not in FAST_TENSOR_CORES:
        return None
    had = [shape for arch, shape in sorted(shapes.items()) if Arch.of(cc) >= Arch.of(arch)]
    return {**tile, "mma": had[-1]} if had else None

def first_tile(dtype: str, cc: str | None) -> dict | None:
    """FIRST_TILE for float64 on a GPU with fast FP64 tensor cores (tensor_tile)."""
    return tensor_tile(FIRST_TILE, FIRST_SHAPES, cc) if dtype == DTYPE else None

def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    if dtype != DTYPE:
        return f"the FP64 tensor cores multiply {DTYPE} only"
    return fits(config, dtype, limits)

def fits(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    """Why `config` cannot run on a GPU of `limits`, or None."""
    if config["mma"] not in KINDS[KIND[dtype]]:
        return f"no {KIND[dtype]} mma of shape {config['mma']}"
    m, n, k = SHAPES[config["mma"]]
    if config["bm"] % (config["warps_m"] * m) or config["bn"] % (config["warps_n"] * n):
        return (f"{config['warps_m']}x{config['warps_n']} warps do not split a {config['bm']}x{config['bn']} tile "
                f"into {m}x{n} tiles")
    if config["bk"] % (k * config.get("chunk", 1)):
        return f"bk={config['bk']} is not a multiple of {config.get('chunk', 1)} steps of the instruction's K={k}"
    fm, fn = warp_tiles(config)
    accumulators = fm * fn * counts(config["mma"])[2]
    if accumulators * itemsize(dtype) // 4 > MAX_ACCUMULATOR_REGISTERS:
        return f"{accumulators} accumulators a lane > {MAX_ACCUMULATOR_REGISTERS} registers"
    threads, blocks = threads_per_block(config), config["min_blocks"]
    if threads * blocks > limits.max_threads_per_sm:
        return f"{blocks} blocks of {threads} threads > {limits.max_threads_per_sm} threads per SM"
    shared = shared_bytes(config, dtype)
    if shared > max(limits.max_shared_per_block, limits.max_dynamic_shared_per_block):
        return f"{shared} bytes of shared memory > {max(limits.max_shared_per_block, limits.max_dynamic_shared_per_block)}"
    regs = estimated_registers(config, dtype)
    budget = min(limits.max_registers_per_thread, limits.max_registers_per_block // (threads * blocks))
    if regs > budget:
        return f"needs ~{regs} registers per thread; {blocks} block(s) of {threads} threads leave {budget}"
    return None
