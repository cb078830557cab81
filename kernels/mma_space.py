"""The tensor-core families' search space (kernels.dmma, kernels.tf32x3): parameters, defaults,
the resources a config takes (shared memory, warps, registers), the instructions it needs, the
tiles a cold tune tries first, and which configs fit a device. Their kernel code is kernels.dmma.
"""

from __future__ import annotations

from functools import cache

from .base import (
    DeviceLimits,
    Footprint,
    itemsize,
)
from .rules import LAYOUTS, VECTOR_BYTES, Arch
from .tiles import OVERHEAD_REGISTERS
from .warp_mma import FAST_TENSOR_CORES, KINDS, SHAPES, WARP, counts, needs

SPACE = {
    "mma": list(KINDS["f64"]),
    "bm": [16, 32, 64, 128, 256],
    "bn": [16, 32, 64, 128, 256],
    "bk": [8, 16, 32],
    "warps_m": [1, 2, 4],
    "warps_n": [1, 2, 4],
    "stages": [2, 3, 4, 5],
    "splits": [1, 2, 4, 8, 16, 32, 64],
    "min_blocks": [1, 2, 3],
    "stored": ["mn", "k", "memory"],
    "stores": ["elements", "pairs"],  # how a lane writes C (kernels.mma_epilogue)
}

DEFAULT = {"mma": "m8n8k4", "bm": 64, "bn": 64, "bk": 8, "warps_m": 2, "warps_n": 2, "stages": 3, "splits": 1, "min_blocks": 1,
           "stored": "mn", "stores": "elements"}

DTYPE = "float64"

PAD_BYTES = 32

#: a `paired` K-major tile's loads: two elements (8 bytes of float32); shared memory serves a warp's
#: loads BANK_BYTES at a time
K_MAJOR_LOAD = 2
BANK_BYTES = 128

#: registers a lane may give its accumulators (a warp's part of C over 32 lanes)
MAX_ACCUMULATOR_REGISTERS = 128

#: the instruction kind that multiplies each dtype, and the parts of an element a lane holds
#: for it (float32 as TF32's big and small parts, kernels.warp_mma.split_tf32)
KIND = {"float64": "f64", "float32": "tf32"}

PARTS = {"float64": 1, "float32": 2}

#: the tile a cold tune tries first (autotune.space.guesses), and what each compute capability
#: changes of it: sm_90 adds 16-row instructions to sm_80's m8n8k4; its tile ran fastest at large
#: shapes (docs/performance.md, steps 49, 59 and 60)
FIRST_TILE = {"bm": 64, "bn": 128, "bk": 16, "warps_m": 1, "warps_n": 4, "stages": 3, "min_blocks": 1, "stored": "mn",
              "stores": "elements"}

FIRST_BY_ARCH = {(8, 0): {"mma": "m8n8k4"},
                 (9, 0): {"mma": "m16n8k8", "bm": 128, "warps_m": 2, "stages": 4, "stored": "memory",
                          "stores": "pairs"}}

#: the tile a cold tune also tries where the first tile's blocks would leave SMs short, on sm_90's
#: 16 x 8 x 8 instruction; it ran fastest at mid shapes (docs/performance.md, steps 50, 59 and 60)
FEW_TILE = {"bm": 64, "bn": 64, "bk": 16, "warps_m": 2, "warps_n": 2, "stages": 3, "min_blocks": 1, "stored": "memory",
            "stores": "elements"}

FEW_BY_ARCH = {(9, 0): {"mma": "m16n8k8", "stores": "pairs"}}

#: the tile a cold tune also tries where C is skinny (autotune.space.guesses.SKINNY): the first
#: tile's pipeline, its long side SKINNY_LONG over SKINNY_WARPS warps, its short side the power of 2
#: (at least SKINNY_SHORT) that covers C's, over as few warps as keep a warp's part of C within
#: SKINNY_WARP_TILE, so that one block spans C's short side (docs/performance.md, step 61)
SKINNY_LONG, SKINNY_WARPS, SKINNY_SHORT = 128, 4, 16
SKINNY_WARP_TILE = {"bm": 64, "bn": 32}

#: the tiles lookup serves a float64 product of a small C that no row serves exactly, by the rule of
#: autotune.space.guesses.small_c_guess: in tiers of one area each, the larger the more of the first tier's
#: tile C makes an SM, each tier's squarest tile first. Two warps of 16 x 16 keep
#: the most blocks in flight where C makes few (docs/performance.md, step 62); where C makes many, larger
#: tiles and C's pairs written as 16-byte stores drain it sooner (step 63). 64 x 64 asks ptxas for three
#: blocks an SM: in NT, both operands lying K-major, and built for unaligned rows it otherwise took the
#: registers of two (step 65). sm_90's 16 x 8 x 8 instruction alone was measured
SMALL_PIPELINE = {"bk": 16, "stages": 3, "min_blocks": 1, "stored": "memory", "stores": "pairs"}
SMALL_TIERS = (({"bm": 32, "bn": 16, "warps_m": 2, "warps_n": 1},),
               ({"bm": 32, "bn": 32, "warps_m": 2, "warps_n": 1}, {"bm": 16, "bn": 64, "warps_m": 1, "warps_n": 2},
                {"bm": 64, "bn": 16, "warps_m": 2, "warps_n": 1}),
               ({"bm": 64, "bn": 64, "warps_m": 2, "warps_n": 2, "min_blocks": 3},))

SMALL_BY_ARCH = {(9, 0): {"mma": "m16n8k8"}}

#: the tile lookup serves a skinny float64 C of few tiles over a long K (autotune.space.guesses.small_c_guess),
#: K split for two waves, on SMALL_PIPELINE: two warps of 32 x 32, the tile's long side along C's
#: (docs/performance.md, step 64)
LONG_K_TILE = {"bm": 64, "bn": 32, "warps_m": 2, "warps_n": 1}

def pad(dtype: str) -> int:
    return PAD_BYTES // itemsize(dtype)

def lane_k(config: dict) -> int:
    """The k's of one row of A (column of B) a lane holds for one instruction: 4 apart in the
    PTX ISA's fragments; `paired`, adjacent in the tile, where the same order for A and B leaves
    the sum unchanged."""
    return SHAPES[config["mma"]][2] // 4

def paired(config: dict, dtype: str) -> bool:
    """Whether a lane's k's lie adjacent in its tiles (rows `mn_pad` and `k_major_pad` pad), read
    K_MAJOR_LOAD a load along a K-major row: TF32's split parts (with `stored` other than "mn"). A
    float64 pair would land in A's fragment two registers apart (the PTX ISA's order), and ptxas then
    moves every element it loads; one a load, in that order, puts each where the instruction reads it."""
    return PARTS[dtype] == 2 and config.get("stored", "mn") != "mn"

def k_major_operands(config: dict, layout: str) -> str:
    """The operands whose tiles lie K-major (sA[m, k], sB[n, k]), the others lying as sA[k, m]
    and sB[k, n]: `stored` "mn" none, "k" both, "memory" each as it lies in memory (A in N, B in
    T), so that every copy moves 16 bytes."""
    stored = config.get("stored", "mn")
    if stored == "k":
        return "AB"
    if stored == "memory":
        return "A" * (layout[0] == "N") + "B" * (layout[1] == "T")
    return ""

def tile_rows(config: dict, dtype: str, layout: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(rows, row length) of one stage of A's and of B's shared tile in `layout`, rows padded so
    that a warp's reads of its fragments fall on distinct banks."""
    bk, per_lane, k_major = config["bk"], lane_k(config), k_major_operands(config, layout)
    pairs, tiles = paired(config, dtype), []
    for name, side in (("A", config["bm"]), ("B", config["bn"])):
        if name in k_major:
            tiles.append((side, bk + (k_major_pad(bk, dtype, per_lane) if pairs else spread_pad(bk, dtype))))
        elif not pairs:
            tiles.append((bk, side + pad(dtype)))
        else:
            tiles.append((bk, side + mn_pad(side, dtype, per_lane)))
    return tiles[0], tiles[1]

@cache
def k_major_pad(bk: int, dtype: str, per_lane: int) -> int:
    """Elements after each BK-long row of a K-major tile, whose lane reads `per_lane` adjacent k's
    of row lane // 4, K_MAJOR_LOAD a load (`fewest_pad`)."""
    size = itemsize(dtype)
    return fewest_pad(bk, size, K_MAJOR_LOAD, lambda row: [
        [(lane // 4) * row + ((lane % 4) * per_lane + first) * size for lane in range(WARP)]
        for first in range(0, per_lane, K_MAJOR_LOAD)])

@cache
def mn_pad(side: int, dtype: str, per_lane: int) -> int:
    """Elements after each row of a tile lying as sA[k, m] (sB[k, n]) whose lane reads column
    lane // 4 of its `per_lane` adjacent rows, one element a load (`fewest_pad`)."""
    size = itemsize(dtype)
    return fewest_pad(side, size, 1, lambda row: [
        [((lane % 4) * per_lane + v) * row + (lane // 4) * size for lane in range(WARP)] for v in range(per_lane)])

@cache
def spread_pad(bk: int, dtype: str) -> int:
    """Elements after each BK-long row of a K-major tile whose lane reads k's lane % 4 + 4 v of row
    lane // 4, one a load (`fewest_pad`)."""
    size = itemsize(dtype)
    return fewest_pad(bk, size, 1, lambda row: [
        [(lane // 4) * row + (lane % 4 + 4 * v) * size for lane in range(WARP)] for v in range(bk // 4)])

def fewest_pad(length: int, size: int, load: int, addresses) -> int:
    """The fewest elements of `size` bytes after each row of `length` that keep rows 16-byte
    aligned and put every load of a warp on distinct banks in each phase that shared memory
    serves it in (BANK_BYTES a phase): addresses(row bytes) -> per load, each lane's byte address,
    each lane reading `load` elements."""
    per_phase = BANK_BYTES // (load * size)
    for extra in range(BANK_BYTES // size + 1):
        row = (length + extra) * size
        if row % VECTOR_BYTES == 0 and all(distinct_banks(lanes[first:first + per_phase], load * size)
                                           for lanes in addresses(row) for first in range(0, WARP, per_phase)):
            return extra
    raise ValueError(f"no padding of {length}-element rows puts a warp's loads on distinct banks")

def distinct_banks(starts: list[int], length: int) -> bool:
    """Whether loads of `length` bytes from these byte addresses touch each bank at one word."""
    words = {start // 4 + w for start in starts for w in range(length // 4)}
    return len({word % 32 for word in words}) == len(words)

def shared_bytes(config: dict, dtype: str = DTYPE, layout: str | None = None) -> int:
    """A block's shared tiles in `layout`; without one, in the layout that needs the most."""
    per_stage = max(sum(rows * length for rows, length in tile_rows(config, dtype, one))
                    for one in ([layout] if layout else LAYOUTS))
    return config["stages"] * per_stage * itemsize(dtype)

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

def tensor_tile(tile: dict, by_arch: dict, cc: str | None) -> dict | None:
    """`tile` as the newest entry of `by_arch` ({oldest (major, minor) compute capability: what it
    changes of the tile}) that a GPU of compute capability `cc` has changes it; None for GPUs
    without FAST_TENSOR_CORES or any entry."""
    if cc not in FAST_TENSOR_CORES:
        return None
    had = [changes for arch, changes in sorted(by_arch.items()) if Arch.of(cc) >= Arch.of(arch)]
    return {**tile, **had[-1]} if had else None

def first_tile(dtype: str, cc: str | None) -> dict | None:
    """FIRST_TILE for float64 on a GPU with fast FP64 tensor cores (tensor_tile)."""
    return tensor_tile(FIRST_TILE, FIRST_BY_ARCH, cc) if dtype == DTYPE else None

def few_tile(dtype: str, cc: str | None) -> dict | None:
    """FEW_TILE for float64 on a GPU with fast FP64 tensor cores and its instruction (tensor_tile)."""
    return tensor_tile(FEW_TILE, FEW_BY_ARCH, cc) if dtype == DTYPE else None

def skinny_tile(dtype: str, cc: str | None, m: int, n: int) -> dict | None:
    """The first tile (first_tile) reshaped for a skinny M x N C (SKINNY_LONG)."""
    first = first_tile(dtype, cc)
    if first is None:
        return None
    short_side, long_side = ("bm", "bn") if m <= n else ("bn", "bm")
    short = max(SKINNY_SHORT, 1 << (max(min(m, n), 1) - 1).bit_length())
    warps = {"bm": "warps_m", "bn": "warps_n"}
    return {**first, short_side: short, warps[short_side]: max(1, short // SKINNY_WARP_TILE[short_side]),
            long_side: SKINNY_LONG, warps[long_side]: SKINNY_WARPS}

def small_tiles(dtype: str, cc: str | None) -> tuple[tuple[dict, ...], ...]:
    """SMALL_TIERS for float64 on GPUs from sm_90 on (tensor_tile); none for others."""
    if dtype != DTYPE or tensor_tile(SMALL_PIPELINE, SMALL_BY_ARCH, cc) is None:
        return ()
    return tuple(tuple(tensor_tile({**SMALL_PIPELINE, **tile}, SMALL_BY_ARCH, cc) for tile in tier)
                 for tier in SMALL_TIERS)

def long_k_tile(dtype: str, cc: str | None, m: int, n: int) -> dict | None:
    """LONG_K_TILE, its long side along an M x N C's, for float64 from sm_90 on (tensor_tile)."""
    along = LONG_K_TILE if m >= n else {"bm": LONG_K_TILE["bn"], "bn": LONG_K_TILE["bm"],
                                        "warps_m": LONG_K_TILE["warps_n"], "warps_n": LONG_K_TILE["warps_m"]}
    return tensor_tile({**SMALL_PIPELINE, **along}, SMALL_BY_ARCH, cc) if dtype == DTYPE else None

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
    if paired(config, dtype) and lane_k(config) < K_MAJOR_LOAD:
        return f"stored={config['stored']!r} needs an instruction whose K is 8 or more, not {k}"
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
