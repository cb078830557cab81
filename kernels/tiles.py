"""Moving a block's tiles of A and B from global to shared memory, for the register-tiled families.

Each of THREADS threads fetches its share of a BM x BK tile of A and a BK x BN tile of B into
registers (zeros off the matrix edges), then stashes them in shared memory, A transposed so that
a thread's values of one k are adjacent. Splitting the two steps lets a kernel fetch the next
tile while it computes on the current one. `tile_copier` moves the same shares with asynchronous
copies instead, which need no registers and may run several tiles ahead.

Shared memory always holds sA[k, m] and sB[k, n]; what differs by layout (kernels.base.LAYOUTS) is
the tile as it lies in memory. A is read as a BM x BK tile of the M x K array and stored
transposed, or, passed transposed, as a BK x BM tile of its K x M transpose stored as it is; B as
a BK x BN tile stored as it is, or as a BN x BK tile of its N x K transpose stored transposed. A
tile stored as it is may be copied 16 bytes at a time; one stored transposed is scattered one
element at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from numba import cuda

from .base import DeviceLimits, itemsize, registers_per_value
from .intrinsics import (
    anywhere,
    async_copy,
    async_copy_flat,
    rows_aligned,
    scalar_access,
    store,
    vector_load,
    vector_store,
    vector_width,
)

MAX_ELEMENTS_PER_THREAD = 128
#: registers a thread needs besides its tiles (indices, pointers, loop counters), from ptxas reports
#: of sm_90 compiles. The estimate only screens out configs that would spill heavily: kernels are
#: compiled with launch_bounds, so ptxas itself keeps every accepted config launchable.
OVERHEAD_REGISTERS = 40


def threads_per_block(config: dict) -> int:
    return (config["bm"] // config["tm"]) * (config["bn"] // config["tn"])


def estimated_registers(config: dict, dtype: str) -> int:
    """Accumulators, fragments and (when prefetching through registers) the next tile's values,
    plus overhead."""
    values = config["tm"] * config["tn"] + config.get("fragments", 1) * (config["tm"] + config["tn"])
    if config.get("prefetch", True) and not config.get("async_copy"):
        width = vector_width(itemsize(dtype)) if config.get("wide_fetch") else 1
        values += sum(loads_per_thread(config["bm"], config["bn"], config["bk"], threads_per_block(config), width))
    return values * registers_per_value(dtype) + OVERHEAD_REGISTERS


def restrict_tiling(config: dict, dtype: str, limits: DeviceLimits, shared_bytes: int,
                    dynamic_shared: bool = False) -> str | None:
    """Why a BM x BN block of TM x TN register tiles cannot run (well), or None. With
    `dynamic_shared`, the kernel takes shared memory past the static limit as dynamic memory."""
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
    shared_limit = max(limits.max_shared_per_block, limits.max_dynamic_shared_per_block if dynamic_shared else 0)
    if shared_bytes > shared_limit:
        return f"{shared_bytes} bytes of shared memory > {shared_limit}"
    blocks = config.get("min_blocks", 1)
    if threads * blocks > limits.max_threads_per_sm:
        return f"{blocks} blocks of {threads} threads > {limits.max_threads_per_sm} threads per SM"
    regs = estimated_registers(config, dtype)
    budget = min(limits.max_registers_per_thread, limits.max_registers_per_block // (threads * blocks))
    if regs > budget:
        resident = f"{blocks} blocks" if blocks > 1 else "a block"
        return f"needs ~{regs} registers per thread; {resident} of {threads} threads leaves {budget}"
    return None


def loads_per_thread(bm: int, bn: int, bk: int, threads: int, width: int = 1) -> tuple[int, int]:
    """Elements of the A and B tiles a thread fetches, `width` adjacent ones at a time."""
    return tuple(-(-tile // (width * threads)) * width for tile in (bm * bk, bk * bn))


def _share(rows: int, cols: int, threads: int, width: int) -> tuple[int, int, int, bool]:
    """How `threads` threads split a rows x cols tile in groups of `width` adjacent elements of a
    row, group tid + i * threads going to thread tid: (groups, groups per row, groups per thread,
    whether every thread has as many)."""
    groups = rows * cols // width
    return groups, cols // width, -(-groups // threads), groups % threads == 0


@dataclass(frozen=True)
class Part:
    """How one operand's tile lies in memory: rows x cols at (origin row, origin col), where the
    origins are among the block's (row0, col0) and the tile's k0; `transposed`: stored in shared
    memory transposed."""

    rows: int
    cols: int
    transposed: bool
    k_first: bool  # the memory tile starts at (k0, ...) rather than at (..., k0)


def parts(bm: int, bn: int, bk: int, layout: str, k_major: str = "") -> tuple[Part, Part]:
    """The A and B parts of a block's tiles for `layout`, stored as sA[k, m] and sB[k, n], or as
    sA[m, k] and sB[n, k] where `k_major` names them."""
    a_k, b_k = "A" in k_major, "B" in k_major
    a = Part(bk, bm, a_k, True) if layout[0] == "T" else Part(bm, bk, not a_k, False)
    b = Part(bn, bk, not b_k, False) if layout[1] == "T" else Part(bk, bn, b_k, True)
    return a, b


@dataclass(frozen=True)
class Movement:
    """How a block's `threads` move its tiles: `width` adjacent elements of a memory row a group,
    with or without bounds and alignment tests (`checked`), offsets in `offset_bits` bits, for
    operands in `layout`, stored K-major where `k_major` names them (`parts`)."""

    threads: int
    width: int = 1
    checked: bool = True
    layout: str = "NN"
    offset_bits: int = 32
    k_major: str = ""
    #: a thread's copies (tile_copier) as one offset plus constants, where its groups lie whole
    #: rows apart: fewer registers for addresses, which dmma's second fragment set needs
    strided: bool = False


def tile_movers(bm: int, bn: int, bk: int, elem_t, movement: Movement, split: str = ""):
    """Device functions fetch(A, B, k0, row0, col0, tid, a_next, b_next) and
    stash(sA, sB, tid, a_next, b_next) for one tile geometry moved as `movement` says. With `width` > 1 a thread
    moves `width` adjacent elements of a memory row at a time, one 16-byte global load each where
    the whole tile lies inside a matrix whose rows are 16-byte aligned (scalar loads elsewhere),
    and one 16-byte shared store where the part is stored as it is. With checked=False the caller
    guarantees that both tiles lie inside their matrices and, for width > 1, that both matrices'
    rows are aligned: the fetch tests nothing (its tests and both paths cost ~10% of a k-loop's
    instructions). The operands named in `split` ("A", "B"), whose rows need not be aligned, read
    each group of `width` as that many scalar loads from one address (`vector_load`'s
    aligned=False) and are stored as the others are."""
    part_a, part_b = parts(bm, bn, bk, movement.layout, movement.k_major)
    threads, width = movement.threads, movement.width
    fetch_a = _part_fetcher(part_a, elem_t, movement, "A" in split)
    fetch_b = _part_fetcher(part_b, elem_t, movement, "B" in split)
    stash_a = _part_stasher(part_a.rows, part_a.cols, threads, width, part_a.transposed)
    stash_b = _part_stasher(part_b.rows, part_b.cols, threads, width, part_b.transposed)
    A_K_FIRST, B_K_FIRST = part_a.k_first, part_b.k_first

    @cuda.jit(device=True)
    def fetch(A, B, k0, row0, col0, tid, a_next, b_next):
        """Read this thread's share of the A and B tiles at k0 from global memory (0 off the edge)."""
        if A_K_FIRST:
            fetch_a(A, k0, row0, tid, a_next)
        else:
            fetch_a(A, row0, k0, tid, a_next)
        if B_K_FIRST:
            fetch_b(B, k0, col0, tid, b_next)
        else:
            fetch_b(B, col0, k0, tid, b_next)

    @cuda.jit(device=True)
    def stash(sA, sB, tid, a_next, b_next):
        """Write the fetched values to shared memory as sA[k, m] and sB[k, n]."""
        stash_a(sA, tid, a_next)
        stash_b(sB, tid, b_next)

    return fetch, stash


def _part_stasher(rows: int, cols: int, threads: int, width: int, transposed: bool):
    """A device function writing the values `_part_fetcher` read for this thread into a shared
    tile, element (r, c) of the memory tile to (c, r) when `transposed`, else to (r, c) in
    `width`-element stores."""
    GROUPS, ROW_GROUPS, SHARE, EVEN = _share(rows, cols, threads, width)
    THREADS, WIDTH, TRANSPOSED = threads, width, transposed
    store_group = _group_storer(width)

    @cuda.jit(device=True)
    def stash_part(tile, tid, values):
        for i in range(SHARE):
            group = tid + i * THREADS
            if EVEN or group < GROUPS:
                row, col = group // ROW_GROUPS, group % ROW_GROUPS * WIDTH
                if TRANSPOSED:
                    for j in range(WIDTH):
                        store(tile, (col + j, row), values[i * WIDTH + j])
                else:
                    store_group(tile, (row, col), values, i * WIDTH)

    return stash_part


def tile_copier(bm: int, bn: int, bk: int, movement: Movement, narrow: str = ""):
    """A device function copy(A, B, k0, row0, col0, tid, sA, sB) starting asynchronous copies
    (kernels.intrinsics.async_copy) of this thread's share of the A and B tiles at k0 into sA and
    sB: a part stored transposed one element at a time, a part stored as it is `width` elements at
    a time where the tile lies inside 16-byte-aligned rows; zeros off the matrix edges. With
    checked=False the caller guarantees that both tiles lie inside their matrices and, for width >
    1, that the rows of the parts copied wide are aligned: no tests at all, which matters because
    ptxas predicates rather than branches around the few instructions of a copy, so the edge path
    would cost its instructions on every tile. The caller commits and waits. The parts named in
    `narrow` ("A", "B") are copied one element at a time whatever `width`, adjacent threads taking
    adjacent elements: what unchecked tiles of unaligned rows need (4-byte copies grouped as
    `tile_movers` groups its loads ran slower, docs/performance.md step 31)."""
    part_a, part_b = parts(bm, bn, bk, movement.layout, movement.k_major)
    width_a, width_b = (1 if transposed or name in narrow else movement.width
                        for name, transposed in (("A", part_a.transposed), ("B", part_b.transposed)))
    copy_a = _part_copier(part_a, replace(movement, width=width_a))
    copy_b = _part_copier(part_b, replace(movement, width=width_b))
    A_K_FIRST, B_K_FIRST = part_a.k_first, part_b.k_first

    @cuda.jit(device=True)
    def copy(A, B, k0, row0, col0, tid, sA, sB):
        if A_K_FIRST:
            copy_a(A, k0, row0, tid, sA)
        else:
            copy_a(A, row0, k0, tid, sA)
        if B_K_FIRST:
            copy_b(B, k0, col0, tid, sB)
        else:
            copy_b(B, col0, k0, tid, sB)

    return copy


def _part_copier(part: Part, movement: Movement):
    """A device function copying this thread's share of the rows x cols tile of a matrix at
    (row0, col0) into a shared tile, grouped as in `_part_fetcher`; with `transposed`, element
    (r, c) of the tile goes to (c, r)."""
    rows, cols, transposed = part.rows, part.cols, part.transposed
    threads, width, checked, offset_bits = movement.threads, movement.width, movement.checked, movement.offset_bits
    GROUPS, ROW_GROUPS, LOADS, EVEN = _share(rows, cols, threads, width)
    COLS, ROWS, THREADS, WIDTH = cols, rows, threads, width
    TRANSPOSED, CHECKED = transposed, checked
    wide_copy, element_copy = async_copy(width, offset_bits), async_copy(1, offset_bits)
    aligned = rows_aligned(width)
    # with `strided`, every thread's groups ROW_STEP rows apart: one offset in X and in the tile, plus
    # constants and multiples of X's row length (what keeps a thread's copies to a few registers)
    STRIDED = movement.strided and EVEN and threads % ROW_GROUPS == 0
    ROW_STEP = threads // ROW_GROUPS
    strided_copy = async_copy_flat(width, offset_bits)

    @cuda.jit(device=True)
    def copy_element(tile, tile_row, tile_col, X, r, c, valid):
        if TRANSPOSED:
            element_copy(tile, (tile_col, tile_row), X, (r, c), valid)
        else:
            element_copy(tile, (tile_row, tile_col), X, (r, c), valid)

    @cuda.jit(device=True)
    def copy_rows(X, row0, col0, tid, tile):
        """copy_part where STRIDED."""
        height, length = X.shape
        inside = not CHECKED or (row0 + ROWS <= height and col0 + COLS <= length)
        whole = inside and (WIDTH == 1 or not CHECKED or aligned(X))  # each group one copy
        tile_row, tile_col = tid // ROW_GROUPS, tid % ROW_GROUPS * WIDTH
        r, c = row0 + tile_row, col0 + tile_col
        for i in range(LOADS):
            below = i * ROW_STEP
            if whole and TRANSPOSED:
                strided_copy(tile, (tile_col, tile_row + below), X, r * length + c, below * length)
            elif whole:
                strided_copy(tile, (tile_row + below, tile_col), X, r * length + c, below * length)
            else:
                for j in range(WIDTH):
                    valid = r + below < height and c + j < length
                    copy_element(tile, tile_row + below, tile_col + j, X, r + below if valid else 0,
                                 c + j if valid else 0, valid)

    @cuda.jit(device=True)
    def copy_part(X, row0, col0, tid, tile):
        if STRIDED:
            copy_rows(X, row0, col0, tid, tile)
            return
        height, length = X.shape
        inside = not CHECKED or (row0 + ROWS <= height and col0 + COLS <= length)
        wide = WIDTH > 1 and inside and (not CHECKED or aligned(X))
        for i in range(LOADS):
            group = tid + i * THREADS
            if EVEN or group < GROUPS:
                tile_row, tile_col = group // ROW_GROUPS, group % ROW_GROUPS * WIDTH
                r, c = row0 + tile_row, col0 + tile_col
                if wide:
                    wide_copy(tile, (tile_row, tile_col), X, (r, c), True)
                elif inside:
                    for j in range(WIDTH):
                        copy_element(tile, tile_row, tile_col + j, X, r, c + j, True)
                else:
                    for j in range(WIDTH):
                        valid = r < height and c + j < length
                        # nothing is read from an invalid source, but its address must be one
                        copy_element(tile, tile_row, tile_col + j, X, r if valid else 0, c + j if valid else 0, valid)

    return copy_part


def _part_fetcher(part: Part, elem_t, movement: Movement, split: bool = False):
    """A device function reading this thread's share of the rows x cols tile of a matrix at
    (row0, col0) into `out`: group tid + i * threads of the tile (row-major, `width` adjacent
    elements a group) into out[i * width:(i + 1) * width]. A tile wholly inside the matrix (every
    tile but the last row, column or k-step of the grid) is read without bounds checks, with
    16-byte loads when `width` > 1 and the matrix's rows are aligned; offsets are computed in
    `offset_bits` bits (kernels.intrinsics). With checked=False the caller guarantees both, as in
    `tile_copier`. `split`: groups inside the matrix are read whatever the alignment of its rows,
    one scalar load per element from one address."""
    rows, cols = part.rows, part.cols
    threads, width, checked, offset_bits = movement.threads, movement.width, movement.checked, movement.offset_bits
    GROUPS, ROW_GROUPS, LOADS, EVEN = _share(rows, cols, threads, width)
    COLS, ROWS, THREADS, WIDTH, CHECKED = cols, rows, threads, width, checked
    wide_load = vector_load(width, bits=offset_bits, aligned=not split)
    load = scalar_access(offset_bits)[0]
    aligned = anywhere if split else rows_aligned(width)

    @cuda.jit(device=True)
    def fetch_part(X, row0, col0, tid, out):
        height, length = X.shape
        inside = not CHECKED or (row0 + ROWS <= height and col0 + COLS <= length)
        wide = WIDTH > 1 and inside and (not CHECKED or aligned(X))
        for i in range(LOADS):
            group = tid + i * THREADS
            r = row0 + group // ROW_GROUPS
            c = col0 + group % ROW_GROUPS * WIDTH
            if wide and (EVEN or group < GROUPS):
                lanes = wide_load(X, (r, c))
                for j in range(WIDTH):
                    out[i * WIDTH + j] = lanes[j]
            else:
                for j in range(WIDTH):
                    v = elem_t(0)
                    if EVEN or group < GROUPS:
                        if inside or (r < height and c + j < length):
                            v = load(X, (r, c + j))
                    out[i * WIDTH + j] = v

    return fetch_part


def _group_storer(width: int):
    """store_group(array, index, values, start): array[index ...+ width] = values[start ...+ width],
    one 16-byte shared store when width > 1."""
    if width == 1:
        return cuda.jit(device=True)(lambda array, index, values, start: store(array, index, values[start]))
    wide_store = vector_store(width)
    if width == 2:
        return cuda.jit(device=True)(
            lambda array, index, values, start: wide_store(array, index, (values[start], values[start + 1]))
        )
    if width == 4:
        return cuda.jit(device=True)(
            lambda array, index, values, start: wide_store(
                array, index, (values[start], values[start + 1], values[start + 2], values[start + 3])
            )
        )
    raise ValueError(f"no {width}-lane vectors")
