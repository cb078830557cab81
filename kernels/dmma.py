"""float64 products on the FP64 tensor cores: warps of `mma.sync` instructions (kernels.warp_mma).

FFMA caps float64 at half the FP64 rate of a Hopper SM's tensor cores, where cuBLAS's DGEMM runs. `make` also
builds kernels.tf32x3's float32 kernels: these with three TF32 instructions for each float64 one. A block of
WARPS_M x WARPS_N warps computes a BM x BN tile of C, each warp a (BM / WARPS_M) x (BN / WARPS_N) part of it as
tiles of the instruction's M x 8: per K of the instruction, a lane reads its elements of A and B
(kernels.warp_mma.fragment) from shared memory and the warp issues one mma per tile. float64 keeps two sets of
fragments: a chunk reads the next one's (past the barrier, the next tile's first) into one while its mma's issue
from the other; tf32x3's split parts, twice the registers, keep one. Tiles of A and B come into shared memory by
asynchronous copies STAGES - 1 tiles ahead, moved as `vector`'s are (kernels.tiles.tile_copier, any layout), and
lie there as sA[k, m] and sB[k, n] ("mn"), sA[m, k] and sB[n, k] ("k"), or each as it lies in memory ("memory":
A in N and B in T K-major, so that every copy moves 16 bytes). float64 reads every element alone, into the
register its instruction reads it from; tf32x3's split parts are `paired` (kernels.mma_space): a lane's k's lie
adjacent in the tile (the instruction's k = lane % 4 + 4 v is the tile's lane % 4 * (K / 4) + v, for A and B
alike, which leaves the sum unchanged), two a load along a K-major row. Rows are padded
(kernels.mma_space.tile_rows) so that a warp's loads fall on distinct banks.
Parameters:
  mma                 the instruction's shape, M x N x K (kernels.warp_mma.SHAPES): m8n8k4 on
                      sm_80 and later, the 16-row ones on sm_90
  bm, bn, bk          block tile (bk a multiple of the instruction's K)
  warps_m, warps_n    warps along the block's rows and columns
  stages              shared tiles, 2 to 5 (dynamic shared memory past 48 KB)
  splits              blocks along K per tile of C, adding into C atomically (as `splitk`)
  min_blocks          blocks per SM ptxas must leave registers for (launch_bounds)
  stored              how the tiles lie in shared memory: "mn", "k" or "memory" (tf32x3's "k" and
                      "memory" need an instruction K of 8)
  stores              how a lane writes C: "elements" or "pairs" (kernels.mma_epilogue)
"""

from __future__ import annotations

from dataclasses import replace

from numba import cuda

from .base import (
    DEFAULT_DYNAMIC_SHARED,
    Family,
    Kernel,
    Schedules,
    itemsize,
    numba_type,
    product_shape,
    tile_origin,
    unrolled,
)
from .intrinsics import (
    SHARED_ALIGNMENT,
    async_commit,
    async_wait,
    dynamic_shared_array,
    rows_aligned,
    scalar_access,
    vector_load,
    vector_width,
)
from .mma_epilogue import writer
from .mma_space import (  # noqa: F401  the space dmma and tf32x3 declare
    DEFAULT,
    DTYPE,
    FIRST_BY_ARCH,
    FIRST_TILE,
    KIND,
    K_MAJOR_LOAD,
    MAX_ACCUMULATOR_REGISTERS,
    PAD_BYTES,
    PARTS,
    SPACE,
    estimated_registers,
    few_tile,
    first_tile,
    fits,
    footprint,
    instructions,
    k_major_operands,
    lane_k,
    long_k_tile,
    paired,
    pad,
    restrict,
    shared_bytes,
    skinny_tile,
    small_tiles,
    tensor_tile,
    tile_rows,
    threads_per_block,
    warp_tiles,
)
from .tiles import Movement, parts, tile_copier
from .warp_mma import SHAPES, SMALL_SCALE, WARP, counts, split_tf32
from .warp_mma import mma as warp_mma


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    if dtype != DTYPE:
        raise ValueError(f"dmma multiplies {DTYPE} only, not {dtype}")
    return make(config, dtype, "dmma", layout, offset_bits, unaligned)


def make(config: dict, dtype: str, family: str, layout: str = "NN", offset_bits: int = 32,
         unaligned: str = "") -> Kernel:
    """The kernel for `config` multiplying `dtype` by the instruction KIND names. `unaligned` names the operands
    built for rows that are not 16-byte aligned, whose tiles then move one element at a time (as `vector`'s)."""
    BM, BN, BK, STAGES, SPLITS = config["bm"], config["bn"], config["bk"], config["stages"], config["splits"]
    WARPS_M = config["warps_m"]
    FM, FN = warp_tiles(config)
    IM, IN, IK = SHAPES[config["mma"]]
    WM, WN = FM * IM, FN * IN
    A_PER, B_PER, C_PER = counts(config["mma"])  # elements of one instruction a lane holds
    HALVES = IM // 8  # rows 8 apart that a lane holds of A and C
    ACCUMULATORS, A_HELD, B_HELD = FM * FN * C_PER, FM * A_PER, FN * B_PER
    PARTS_HELD = PARTS[dtype]
    CHUNK = config.get("chunk", 1)  # steps of the instruction's K summed before adding to acc
    A_STEP, B_STEP = A_HELD * PARTS_HELD, B_HELD * PARTS_HELD  # one step's fragments
    A_FRAGMENT, B_FRAGMENT = CHUNK * A_STEP, CHUNK * B_STEP  # one set of a chunk's fragments
    # two sets, a chunk's being read while the other's multiply; TF32's split parts, twice the
    # registers, get one, read after the sums
    SETS = 2 if PARTS_HELD == 1 else 1
    A_SETS, B_SETS = SETS * A_FRAGMENT, SETS * B_FRAGMENT
    CHUNKS = BK // IK // CHUNK  # a tile's
    PASS = 2 if SETS == 2 and CHUNKS % 2 else 1  # tiles a pass, so that a set's role is the same each pass
    PAIRED = paired(config, dtype)  # a lane's k's adjacent in the tile, two a load along K-major rows
    K_MAJOR = k_major_operands(config, layout)
    A_K, B_K = "A" in K_MAJOR, "B" in K_MAJOR
    PER_LANE = lane_k(config)
    THREADS = threads_per_block(config)
    VEC = vector_width(itemsize(dtype))
    elem_t = numba_type(dtype)

    a_rows, b_rows = tile_rows(config, dtype, layout)
    SA_SHAPE, SB_SHAPE = (STAGES, *a_rows), (STAGES, *b_rows)
    SHARED_BYTES = shared_bytes(config, dtype, layout)
    DYNAMIC = SHARED_BYTES > DEFAULT_DYNAMIC_SHARED
    if DYNAMIC:
        shared_a = dynamic_shared_array(SA_SHAPE, elem_t, 0)
        shared_b = dynamic_shared_array(SB_SHAPE, elem_t, STAGES * a_rows[0] * a_rows[1])
    ALIGN = SHARED_ALIGNMENT
    # the parts copied 16 bytes at a time are those stored as they lie in memory
    wide = {name: not part.transposed for name, part in zip("AB", parts(BM, BN, BK, layout, K_MAJOR))}
    NARROW = "".join(name for name in "AB" if wide[name] and name in unaligned)
    A_ALIGNMENT_TESTED = wide["A"] and "A" not in NARROW
    B_ALIGNMENT_TESTED = wide["B"] and "B" not in NARROW
    movement = Movement(THREADS, VEC, layout=layout, offset_bits=offset_bits, k_major=K_MAJOR, strided=True)
    copy_checked = tile_copier(BM, BN, BK, movement)
    copy_unchecked = tile_copier(BM, BN, BK, replace(movement, checked=False), narrow=NARROW)
    commit, wait_for_oldest = async_commit(), async_wait(STAGES - 2)
    origin, dims = tile_origin(BM, BN), product_shape(layout)
    load_shared, load_pair = scalar_access(64)[0], vector_load(K_MAJOR_LOAD)
    mma = warp_mma(config["mma"], KIND[dtype])
    gather_a, gather_b, gather_c = (_gather(count) for count in (A_PER, B_PER, C_PER))
    aligned = rows_aligned(VEC)

    if PARTS_HELD == 1:
        @cuda.jit(device=True)
        def keep(frag, i, held, value):
            frag[i] = value

        @cuda.jit(device=True)
        def sums(a_frag, b_frag, a_first, b_first, c):
            return mma(gather_a(a_frag, a_first), gather_b(b_frag, b_first), c)
    else:
        split = split_tf32()
        ZERO = (elem_t(0),) * C_PER
        UNSCALE = elem_t(1 / SMALL_SCALE)
        assert C_PER == 4, "TF32's instructions are 16 x 8"

        @cuda.jit(device=True)
        def keep(frag, i, held, value):
            """The element's big part at i, its small part `held` further on."""
            big, small = split(value)
            frag[i] = big
            frag[i + held] = small

        @cuda.jit(device=True)
        def sums(a_frag, b_frag, a_first, b_first, c):
            """C plus the chunk's CHUNK steps of A @ B as the three TF32 products that matter: the small ones from
            zero, scaled back (kernels.warp_mma.split_tf32), then the big ones. The tensor cores' sums truncate,
            which in one accumulator over a long K adds up to many times float32's error: C is added after."""
            d = ZERO
            for s in range(CHUNK):
                a, b = a_first + s * A_STEP, b_first + s * B_STEP
                d = mma(gather_a(a_frag, a + A_HELD), gather_b(b_frag, b), d)
                d = mma(gather_a(a_frag, a), gather_b(b_frag, b + B_HELD), d)
            d = (d[0] * UNSCALE, d[1] * UNSCALE, d[2] * UNSCALE, d[3] * UNSCALE)
            for s in range(CHUNK):
                a, b = a_first + s * A_STEP, b_first + s * B_STEP
                d = mma(gather_a(a_frag, a), gather_b(b_frag, b), d)
            return c[0] + d[0], c[1] + d[1], c[2] + d[2], c[3] + d[3]

    def lane_reader(k_major: bool, stride: int, held: int):
        """read(tile, stage, line, k, frag, first): this lane's PER_LANE adjacent k's from k on of row (A) or
        column (B) `line` into frag[first + stride * v]: two a load along a K-major row, else one a load."""

        @cuda.jit(device=True)
        def read(tile, stage, line, k, frag, first):
            if k_major:
                for v in range(0, PER_LANE, K_MAJOR_LOAD):
                    pair = load_pair(tile, (stage, line, k + v))
                    keep(frag, first + stride * v, held, pair[0])
                    keep(frag, first + stride * (v + 1), held, pair[1])
            else:
                for v in range(PER_LANE):
                    keep(frag, first + stride * v, held, load_shared(tile, (stage, k + v, line)))

        return read

    read_a, read_b = lane_reader(A_K, HALVES, A_HELD), lane_reader(B_K, 1, B_HELD)

    @cuda.jit(device=True)
    def read_adjacent(q, sA, sB, stage, a_row, b_col, k_lane, a_frag, b_frag, at):
        """read_spread where a lane's k's lie adjacent in the tiles (PAIRED)."""
        for s in range(CHUNK):
            k = (q * CHUNK + s) * IK + k_lane * PER_LANE
            for i in range(FM):
                for v0 in range(HALVES):
                    read_a(sA, stage, a_row + i * IM + 8 * v0, k, a_frag, at * A_FRAGMENT + s * A_STEP + i * A_PER + v0)
            for j in range(FN):
                read_b(sB, stage, b_col + j * IN, k, b_frag, at * B_FRAGMENT + s * B_STEP + j * B_PER)

    def element_reader(k_major: bool):
        """read(tile, stage, k, line): element (k, line) of a tile lying along K (k_major), or along M or N."""
        if k_major:
            return cuda.jit(device=True)(lambda tile, stage, k, line: load_shared(tile, (stage, line, k)))
        return cuda.jit(device=True)(lambda tile, stage, k, line: load_shared(tile, (stage, k, line)))

    a_element, b_element = element_reader(A_K), element_reader(B_K)

    @cuda.jit(device=True)
    def read_spread(q, sA, sB, stage, a_row, b_col, k_lane, a_frag, b_frag, at):
        """This lane's elements of A and B for chunk q of CHUNK instruction K-steps, into set `at`, one a load."""
        for s in range(CHUNK):
            k = (q * CHUNK + s) * IK + k_lane
            for i in range(FM):
                for v1 in range(IK // 4):
                    for v0 in range(HALVES):
                        keep(a_frag, at * A_FRAGMENT + s * A_STEP + i * A_PER + v0 + HALVES * v1, A_HELD,
                             a_element(sA, stage, k + 4 * v1, a_row + i * IM + 8 * v0))
            for j in range(FN):
                for v in range(IK // 4):
                    keep(b_frag, at * B_FRAGMENT + s * B_STEP + j * B_PER + v, B_HELD,
                         b_element(sB, stage, k + 4 * v, b_col + j * IN))

    read_chunk = read_adjacent if PAIRED else read_spread

    @cuda.jit(device=True)
    def sum_tile(j, i, at, a_frag, b_frag, acc):
        """The sums into tile (i, j) of the warp's FM x FN tiles of the instruction's M x N, from set `at`."""
        first = (i * FN + j) * C_PER
        d = sums(a_frag, b_frag, at * A_FRAGMENT + i * A_PER, at * B_FRAGMENT + j * B_PER, gather_c(acc, first))
        for c in range(C_PER):
            acc[first + c] = d[c]

    sum_row = unrolled(sum_tile, FN)  # rolled loops would put acc on the stack

    @cuda.jit(device=True)
    def sum_row_i(i, at, a_frag, b_frag, acc):
        sum_row(i, at, a_frag, b_frag, acc)

    sum_tiles = unrolled(sum_row_i, FM)

    @cuda.jit(device=True)
    def chunk_step(q, u, sA, sB, stage, a_row, b_col, k_lane, a_frag, b_frag, acc):
        """Chunk q of the u-th tile of a pass, whose fragments set (u * CHUNKS + q) % SETS holds: the next chunk's
        into the other set (the next tile's first once the barrier has made it resident and every warp is done
        with the tile before), then this chunk's sums; with one set, the sums first."""
        at = (u * CHUNKS + q) % SETS
        if SETS == 1:
            sum_tiles(at, a_frag, b_frag, acc)
        if q + 1 < CHUNKS:
            read_chunk(q + 1, sA, sB, stage, a_row, b_col, k_lane, a_frag, b_frag, (at + 1) % SETS)
        else:
            wait_for_oldest()
            cuda.syncthreads()
            read_chunk(0, sA, sB, stage + 1 if stage + 1 < STAGES else 0, a_row, b_col, k_lane, a_frag, b_frag,
                       (at + 1) % SETS)
        if SETS == 2:
            sum_tiles(at, a_frag, b_frag, acc)

    multiply_tile = unrolled(chunk_step, CHUNKS)

    def copied_steps(copy, tested: bool):
        """Multiply tiles t_from to t_to of the n from k_begin on, each copied STAGES - 1 tiles ahead by `copy`,
        from shared tile `stage`, its first chunk's fragments in set 0; returns the next stage. A pass is PASS tiles
        (even chunks). Untested (only where each tile has one to copy), it has no branch: ptxas mixes in the copies."""

        @cuda.jit(device=True)
        def tile(u, A, B, sA, sB, t, t_to, n, k_begin, stage, row0, col0, tid, a_row, b_col, k_lane, a_frag, b_frag,
                 acc):
            """Tile t + u of the pass from tile t in `stage`, if before t_to (always, untested)."""
            here, t = stage + u if stage + u < STAGES else stage + u - STAGES, t + u
            if not tested or t < t_to:
                if not tested or t + STAGES - 1 < n:  # into a stage every warp read before the last barrier
                    ahead = here - 1 if here > 0 else STAGES - 1
                    copy(A, B, k_begin + (t + STAGES - 1) * BK, row0, col0, tid, sA[ahead], sB[ahead])
                commit()
                multiply_tile(u, sA, sB, here, a_row, b_col, k_lane, a_frag, b_frag, acc)

        one_pass = unrolled(tile, PASS)

        @cuda.jit(device=True)
        def steps(A, B, sA, sB, t_from, t_to, n, k_begin, stage, row0, col0, tid, a_row, b_col, k_lane, a_frag,
                  b_frag, acc):
            for t in range(t_from, t_to, PASS):
                one_pass(A, B, sA, sB, t, t_to, n, k_begin, stage, row0, col0, tid, a_row, b_col, k_lane, a_frag,
                         b_frag, acc)
                stage = stage + PASS if stage + PASS < STAGES else stage + PASS - STAGES
            return stage

        return steps

    checked_steps, unchecked_steps = copied_steps(copy_checked, True), copied_steps(copy_unchecked, False)

    @cuda.jit(device=True)
    def multiply_all(A, B, sA, sB, k_begin, k_end, row0, col0, tid, a_row, b_col, k_lane, a_frag, b_frag, acc):
        """The tiles from k_begin to k_end, the first chunk's fragments read ahead; without bounds tests while a
        block inside C copies whole tiles inside A and B of aligned rows."""
        n, whole = max(0, -(-(k_end - k_begin) // BK)), max(0, (k_end - k_begin) // BK)
        M, N, _ = dims(A, B)
        unchecked, inside = 0, row0 + BM <= M and col0 + BN <= N and whole >= STAGES - 1
        if inside and (not A_ALIGNMENT_TESTED or aligned(A)) and (not B_ALIGNMENT_TESTED or aligned(B)):
            for s in range(STAGES - 1):
                copy_unchecked(A, B, k_begin + s * BK, row0, col0, tid, sA[s], sB[s])
                commit()
            unchecked = (whole - (STAGES - 1)) // PASS * PASS
        else:
            for s in range(STAGES - 1):
                if s < n:
                    copy_checked(A, B, k_begin + s * BK, row0, col0, tid, sA[s], sB[s])
                commit()  # empty groups too: the wait counts groups
        wait_for_oldest()
        cuda.syncthreads()
        read_chunk(0, sA, sB, 0, a_row, b_col, k_lane, a_frag, b_frag, 0)
        stage = unchecked_steps(A, B, sA, sB, 0, unchecked, n, k_begin, 0, row0, col0, tid, a_row, b_col, k_lane,
                                a_frag, b_frag, acc)
        checked_steps(A, B, sA, sB, unchecked, n, n, k_begin, stage, row0, col0, tid, a_row, b_col, k_lane, a_frag,
                      b_frag, acc)

    write_back = writer(config, dtype, offset_bits)

    def mma_matmul(A, B, C, bias=None):
        if DYNAMIC:
            sA = shared_a()
            sB = shared_b()
        else:
            sA = cuda.shared.array(SA_SHAPE, elem_t, alignment=ALIGN)
            sB = cuda.shared.array(SB_SHAPE, elem_t, alignment=ALIGN)
        acc = cuda.local.array(ACCUMULATORS, elem_t)
        a_frag = cuda.local.array(A_SETS, elem_t)
        b_frag = cuda.local.array(B_SETS, elem_t)
        tid = cuda.threadIdx.x
        warp, lane = tid // WARP, tid % WARP
        warp_row, warp_col = (warp % WARPS_M) * WM, (warp // WARPS_M) * WN
        a_row, b_col, k_lane = warp_row + lane // 4, warp_col + lane // 4, lane % 4
        M, N, K = dims(A, B)
        top, left = origin(M, N)
        # a tile on the bottom (right) edge moves back to end at C's last row (column), so that
        # it copies without bounds tests like a block inside
        row0 = M - BM if top + BM > M and M >= BM else top
        col0 = N - BN if left + BN > N and N >= BN else left
        k_begin, k_end = 0, K
        if SPLITS > 1:
            k_span = -(-K // (SPLITS * BK)) * BK
            k_begin = cuda.blockIdx.y * k_span
            k_end = min(K, k_begin + k_span)
        for i in range(ACCUMULATORS):
            acc[i] = elem_t(0)
        multiply_all(A, B, sA, sB, k_begin, k_end, row0, col0, tid, a_row, b_col, k_lane, a_frag, b_frag, acc)
        write_back(C, bias, M, N, row0, col0, a_row, warp_col + 2 * (lane % 4), acc)

    return Kernel(family, dict(config), dtype, mma_matmul, block=(THREADS,), tile=(BM, BN), splits=SPLITS,
                  min_blocks=config["min_blocks"], layout=layout, offset_bits=offset_bits, unaligned=NARROW,
                  dynamic_shared=SHARED_BYTES if DYNAMIC else 0)


def _gather(count: int):
    """gather(values, first) -> values[first:first + count] as the tuple operand kernels.warp_mma takes."""
    if count not in _GATHERS:
        raise ValueError(f"no {count}-element operands")
    return cuda.jit(device=True)(_GATHERS[count])


_GATHERS = {
    1: lambda x, i: (x[i],),
    2: lambda x, i: (x[i], x[i + 1]),
    4: lambda x, i: (x[i], x[i + 1], x[i + 2], x[i + 3]),
    8: lambda x, i: (x[i], x[i + 1], x[i + 2], x[i + 3], x[i + 4], x[i + 5], x[i + 6], x[i + 7]),
}


#: a tile computed whole or with K split by the config's own `splits`
FAMILY = Family(name="dmma", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=0,
                shared_bytes=shared_bytes,
                instructions=instructions, footprint=footprint, schedules=Schedules(whole="dmma", split="dmma"),
                first_tile=first_tile, few_tile=few_tile, skinny_tile=skinny_tile, small_tiles=small_tiles,
                long_k_tile=long_k_tile)
