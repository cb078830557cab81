"""The warpgroup family's space (kernels.wgmma): its parameters, what a config needs (threads,
registers, shared memory) and may not do, and how its tile fits a product nobody tuned."""

from __future__ import annotations

from . import warpgroup
from . import wgmma_layout as wl
from .base import DeviceLimits, Footprint
from .intrinsics import ASYNC_COPY_NEEDS
from .rules import Arch
from .tiles import OVERHEAD_REGISTERS
from .wgmma_copies import BK, raw_words

DTYPE = "float32"
#: the instruction's N steps by 8; two sets of sums of more than 128 columns leave the multiplying
#: warpgroups too few registers (CONSUMER_REGISTERS)
COLUMN_STEP, WIDEST = 8, 128
#: the widths every producer count builds (the others take STRAIGHT_PRODUCERS)
ROLLED_WIDTHS = (64, 128)
SPACE = {"bm": [64, 128], "bn": list(range(COLUMN_STEP, WIDEST + 1, COLUMN_STEP)), "stages": [2, 3, 4],
         "splits": [1, 2, 4, 8, 16, 32, 64], "min_blocks": [1, 2], "producer": [0, 1, 2], "swap": [0, 1]}
DEFAULT = {"bm": 64, "bn": 64, "stages": 2, "splits": 1, "min_blocks": 1, "producer": 0, "swap": 0}
#: the tile a cold tune tries first (autotune.space.guesses)
FIRST_TILE = {"bm": 128, "bn": 128, "stages": 4, "min_blocks": 1, "producer": 2, "swap": 0}
#: registers a thread holds besides its two sets of sums: A's big and small parts, for this
#: tile and the next (with a producer, this tile's only)
FRAGMENT_REGISTERS = 64
#: registers per thread of the multiplying warpgroups, and of the producers by their count, which a
#: launch of three warpgroups (168 each) or four (128 each) can move between them
CONSUMER_REGISTERS = 192
PRODUCER_REGISTERS = {1: 120, 2: 64}
#: producer counts whose copies and splits are straight-line code (wgmma_copies.unrolled_copier)
STRAIGHT_PRODUCERS = (2,)
#: a multiplying thread's registers besides sums and A's parts, where it copies nothing
CONSUMER_OVERHEAD = 32
#: named barriers: "full" and "empty" of split stage s are FULL + s and EMPTY + s
FULL, EMPTY, PRODUCERS_ONLY = 1, 3, 5


#: a layout's operands as a swapped block sees them: (A B)^T = B^T A^T, and an operand stored
#: transposed ("T") is its transpose stored as it lies ("N")
_FLIP = {"N": "T", "T": "N"}


def as_built(config: dict, layout: str, unaligned: str = "") -> tuple[str, str]:
    """The layout and the operands with unaligned rows that the block multiplies: those asked, or
    with `swap` those of B^T @ A^T, whose first operand is B (NN becomes TT, NT and TN stay)."""
    if not config.get("swap"):
        return layout, unaligned
    return _FLIP[layout[1]] + _FLIP[layout[0]], "".join({"A": "B", "B": "A"}.get(name, name) for name in unaligned)


def c_tile(config: dict) -> tuple[int, int]:
    """The rows and columns of C a block computes."""
    return (config["bn"], config["bm"]) if config.get("swap") else (config["bm"], config["bn"])


def fit(params: dict, shape: tuple[int, int, int]) -> dict:
    """The tile for a product of `shape` that nobody tuned: bm shrinks to the smallest size of the
    space that covers its side of C. Where two producers build it, bn narrows to its side of C
    (M where swapped) in steps of COLUMN_STEP, a swapped tile's spread evenly over as few tiles
    as its width needs; else, and for an unswapped tile that C's side spans more than once (whose
    B the producers transpose into the split tiles: narrower ones ran slower, docs/performance.md,
    step 55), to the smallest of ROLLED_WIDTHS that covers it."""
    rows, cols = (shape[1], shape[0]) if params.get("swap") else shape[:2]
    fitted = {**params, "bm": min([size for size in SPACE["bm"] if size >= rows] + [params["bm"]])}
    if params["producer"] in STRAIGHT_PRODUCERS and (params.get("swap") or cols <= params["bn"]):
        tiles = -(-cols // params["bn"])
        fitted["bn"] = min(params["bn"], -(-cols // (tiles * COLUMN_STEP)) * COLUMN_STEP)
    else:
        fitted["bn"] = min([size for size in ROLLED_WIDTHS if size >= cols] + [params["bn"]])
    return fitted


def raw_stage_words(config: dict, layout: str | None = None, unaligned: str = "") -> tuple[int, int]:
    """float32 of the raw tiles of the block's two operands (wgmma_copies.raw_words; A and B, or
    with `swap` B and A) as a build for `layout` and `unaligned` lays them out; with no layout, the
    most any build of the config takes."""
    shifts = config["producer"] in STRAIGHT_PRODUCERS
    if layout is not None:
        layout, unaligned = as_built(config, layout, unaligned)
    if layout is None:
        return tuple(max(raw_words(config[side], along_k, shifts and shifted) for along_k in (False, True)
                         for shifted in (False, True)) for side in ("bm", "bn"))
    return (raw_words(config["bm"], layout[0] == "N", shifts and "A" in unaligned),
            raw_words(config["bn"], layout[1] == "T", shifts and "B" in unaligned))


def shared_bytes(config: dict, dtype: str = DTYPE, layout: str | None = None, unaligned: str = "") -> int:
    """Two stages of B's split tiles, `stages` raw tiles of A and B (raw_stage_words), and room to
    align the first split tile to wgmma_layout.TILE_ALIGN."""
    split_stage = 2 * config["bn"] * wl.ROW_BYTES
    return 2 * split_stage + config["stages"] * 4 * sum(raw_stage_words(config, layout, unaligned)) + wl.TILE_ALIGN


def threads_per_block(config: dict) -> int:
    return (config["bm"] // wl.ROWS + config["producer"]) * wl.THREADS


def estimated_registers(config: dict) -> int:
    """A multiplying thread's: this tile's sums and the running ones (bn / 2 each), A's parts,
    and the rest."""
    if config["producer"]:
        return config["bn"] + FRAGMENT_REGISTERS // 2 + CONSUMER_OVERHEAD
    return config["bn"] + FRAGMENT_REGISTERS + OVERHEAD_REGISTERS


def footprint(config: dict, dtype: str) -> Footprint:
    return Footprint(tile=c_tile(config), bk=BK, threads=threads_per_block(config),
                     registers=estimated_registers(config), shared=shared_bytes(config, dtype))


def instructions(config: dict, dtype: str) -> dict:
    """wgmma, which sm_90a alone has, and cp.async."""
    return {warpgroup.INSTRUCTION: warpgroup.TARGET, **ASYNC_COPY_NEEDS}


def first_tile(dtype: str, cc: str | None) -> dict | None:
    """FIRST_TILE for float32 on a GPU with the warpgroup MMA."""
    return dict(FIRST_TILE) if dtype == DTYPE and cc and Arch.of(cc).has(warpgroup.TARGET) else None


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    if dtype != DTYPE:
        return f"three TF32 products make {DTYPE} only"
    threads, blocks = threads_per_block(config), config["min_blocks"]
    if (config["bn"] not in ROLLED_WIDTHS or config.get("swap")) and config["producer"] not in STRAIGHT_PRODUCERS:
        return "tiles of other widths than 64 and 128 and swapped operands take two producer warpgroups"
    if config["bn"] % COLUMN_STEP or not 0 < config["bn"] <= WIDEST:
        return f"bn is a multiple of {COLUMN_STEP} up to {WIDEST}"
    if config["producer"] and ((config["bm"], blocks) != (128, 1) or config["stages"] < 3):
        return "producer warpgroups serve two multiplying ones, one block per SM, through 3 or more stages"
    if threads * blocks > limits.max_threads_per_sm:
        return f"{blocks} blocks of {threads} threads > {limits.max_threads_per_sm} threads per SM"
    shared, allowed = shared_bytes(config), max(limits.max_shared_per_block, limits.max_dynamic_shared_per_block)
    if shared > allowed:
        return f"{shared} bytes of shared memory > {allowed}"
    regs = estimated_registers(config)
    budget = min(limits.max_registers_per_thread, limits.max_registers_per_block // (threads * blocks))
    if config["producer"]:
        budget = CONSUMER_REGISTERS
    if regs > budget:
        return f"needs ~{regs} registers per thread; {blocks} block(s) of {threads} threads leave {budget}"
    return None
