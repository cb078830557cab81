"""Moving a block's tiles of A and B from global to shared memory, for the register-tiled families.

Each of THREADS threads fetches its share of a BM x BK tile of A and a BK x BN tile of B into
registers (zeros off the matrix edges), then stashes them in shared memory, A transposed so that
a thread's values of one k are adjacent. Splitting the two steps lets a kernel fetch the next
tile while it computes on the current one.
"""

from __future__ import annotations

from numba import cuda

from .base import DeviceLimits, registers_per_value
from .intrinsics import load, store

MAX_ELEMENTS_PER_THREAD = 128
#: registers a thread needs besides its tiles (indices, pointers, loop counters), from ptxas reports
#: of sm_90 compiles. The estimate only screens out configs that would spill heavily: kernels are
#: compiled with launch_bounds, so ptxas itself keeps every accepted config launchable.
OVERHEAD_REGISTERS = 40


def threads_per_block(config: dict) -> int:
    return (config["bm"] // config["tm"]) * (config["bn"] // config["tn"])


def estimated_registers(config: dict, dtype: str) -> int:
    """Accumulators, fragments and (when prefetching) the next tile's values, plus overhead."""
    values = config["tm"] * config["tn"] + config["tm"] + config["tn"]
    if config.get("prefetch", True):
        values += sum(loads_per_thread(config["bm"], config["bn"], config["bk"], threads_per_block(config)))
    return values * registers_per_value(dtype) + OVERHEAD_REGISTERS


def restrict_tiling(config: dict, dtype: str, limits: DeviceLimits, shared_bytes: int) -> str | None:
    """Why a BM x BN block of TM x TN register tiles cannot run (well), or None."""
    bm, bn, tm, tn = config["bm"], config["bn"], config["tm"], config["tn"]
    if bm % tm or bn % tn:
        return f"register tile {tm}x{tn} does not divide block tile {bm}x{bn}"
    if tm * tn > MAX_ELEMENTS_PER_THREAD:
        return f"{tm * tn} elements per thread > {MAX_ELEMENTS_PER_THREAD}"
    threads = threads_per_block(config)
    if threads < 32:
        return f"{threads} threads per block is less than one warp"
    if threads > limits.max_threads_per_block:
        return f"{threads} threads per block > {limits.max_threads_per_block}"
    if shared_bytes > limits.max_shared_per_block:
        return f"{shared_bytes} bytes of shared memory > {limits.max_shared_per_block}"
    blocks = config.get("min_blocks", 1)
    if threads * blocks > limits.max_threads_per_sm:
        return f"{blocks} blocks of {threads} threads > {limits.max_threads_per_sm} threads per SM"
    regs = estimated_registers(config, dtype)
    budget = min(limits.max_registers_per_thread, limits.max_registers_per_block // (threads * blocks))
    if regs > budget:
        resident = f"{blocks} blocks" if blocks > 1 else "a block"
        return f"needs ~{regs} registers per thread; {resident} of {threads} threads leaves {budget}"
    return None


def loads_per_thread(bm: int, bn: int, bk: int, threads: int) -> tuple[int, int]:
    return -(-bm * bk // threads), -(-bk * bn // threads)


def tile_movers(bm: int, bn: int, bk: int, threads: int, elem_t):
    """Device functions fetch(A, B, k0, row0, col0, tid, a_next, b_next) and
    stash(sA, sB, tid, a_next, b_next) for one tile geometry."""
    A_TILE, B_TILE = bm * bk, bk * bn
    A_LOADS, B_LOADS = loads_per_thread(bm, bn, bk, threads)
    A_EVEN, B_EVEN = A_TILE % threads == 0, B_TILE % threads == 0
    BK, BN, THREADS = bk, bn, threads
    fetch_a = _part_fetcher(bm, bk, threads, elem_t)
    fetch_b = _part_fetcher(bk, bn, threads, elem_t)

    @cuda.jit(device=True)
    def fetch(A, B, k0, row0, col0, tid, a_next, b_next):
        """Read this thread's share of the A and B tiles at k0 from global memory (0 off the edge)."""
        fetch_a(A, row0, k0, tid, a_next)
        fetch_b(B, k0, col0, tid, b_next)

    @cuda.jit(device=True)
    def stash(sA, sB, tid, a_next, b_next):
        """Write the fetched values to shared memory, A transposed."""
        for i in range(A_LOADS):
            idx = tid + i * THREADS
            if A_EVEN or idx < A_TILE:
                store(sA, (idx % BK, idx // BK), a_next[i])
        for i in range(B_LOADS):
            idx = tid + i * THREADS
            if B_EVEN or idx < B_TILE:
                store(sB, (idx // BN, idx % BN), b_next[i])

    return fetch, stash


def _part_fetcher(rows: int, cols: int, threads: int, elem_t):
    """A device function reading this thread's share of the rows x cols tile of a matrix at
    (row0, col0) into `out`, element tid + i * threads of the tile (row-major) into out[i].
    A tile wholly inside the matrix (every tile but the last row, column or k-step of the grid)
    is read without bounds checks; all addressing is 32-bit (kernels.intrinsics)."""
    TILE, COLS, ROWS, THREADS = rows * cols, cols, rows, threads
    LOADS = -(-TILE // threads)
    EVEN = TILE % threads == 0

    @cuda.jit(device=True)
    def fetch_part(X, row0, col0, tid, out):
        height, width = X.shape
        inside = row0 + ROWS <= height and col0 + COLS <= width
        for i in range(LOADS):
            idx = tid + i * THREADS
            r = row0 + idx // COLS
            c = col0 + idx % COLS
            v = elem_t(0)
            if EVEN or idx < TILE:
                if inside or (r < height and c < width):
                    v = load(X, (r, c))
            out[i] = v

    return fetch_part
