"""Register tiling with 16-byte shared-memory loads and optionally double-buffered shared tiles.

Like `register` with the strided mapping and prefetching, but a thread's TM rows (and TN columns)
come in groups of VEC adjacent ones (VEC = 16 bytes / element: 4 floats or ints, 2 doubles), each
group read from shared memory with one vector load (kernels.intrinsics): (TM + TN) / VEC loads per
k instead of TM + TN. Groups are TY*VEC rows apart, so a warp's loads are adjacent 16-byte words
(conflict-free) and its stores to C cover whole segments. Its parameters are kernels.vector_space's.
"""

from __future__ import annotations

from dataclasses import replace

from numba import cuda

from .base import DEFAULT_DYNAMIC_SHARED, Family, Kernel, itemsize, numba_type, product_shape, unrolled
from .base import tile_origin, tile_origin_at
from .intrinsics import (
    SHARED_ALIGNMENT,
    anywhere,
    async_commit,
    async_wait,
    dynamic_shared_array,
    reduce_add,
    reduce_add_unaligned,
    rows_aligned,
    scalar_access,
    vector_load,
    vector_width,
)
from .tiles import Movement, loads_per_thread, tile_copier, tile_movers
from .vector_space import (  # noqa: F401  the space vector, splitk and streamk declare
    DEFAULT,
    SCHEDULES,
    SPACE,
    adding_instructions,
    footprint,
    instructions,
    restrict,
    shared_bytes,
)


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    return make(config, dtype, layout=layout, offset_bits=offset_bits, unaligned=unaligned)


def make(config: dict, dtype: str, family: str = "vector", layout: str = "NN", offset_bits: int = 32,
         unaligned: str = "") -> Kernel:
    """The kernel for `config`; with its `splits` > 1 (kernels.splitk), block y of a tile of C
    multiplies the y-th of `splits` ranges of K (whole BK-steps) and adds its product into C
    atomically; with its `workers_per_sm` (kernels.streamk), the grid's blocks share out all the
    tiles' BK-steps evenly (stream-K) and add each tile's part into C atomically.
    `unaligned` names the operands ("A", "B", "C") built for rows that are not 16-byte aligned
    (see `wide_fetch`): any operands run on any build, but an aligned operand on such a build loses
    its 16-byte moves, and an unaligned one on a build without runs every tile through bounds tests
    (A, B) or adds into C one element at a time."""
    BM, BN, BK = config["bm"], config["bn"], config["bk"]
    workers_per_sm = config.get("workers_per_sm", 0)
    SPLITS, STREAMED = config.get("splits", 1), workers_per_sm > 0
    TM, TN = config["tm"], config["tn"]
    STAGES = config["stages"]
    VEC = vector_width(itemsize(dtype))
    GM, GN = TM // VEC, TN // VEC  # vector groups per thread along rows and columns
    TX, TY = BN // TN, BM // TM
    THREADS = TX * TY
    ROW_GROUP_STEP, COL_GROUP_STEP = TY * VEC, TX * VEC
    FETCH_WIDTH = VEC if config["wide_fetch"] else 1
    ASYNC = config["async_copy"]
    A_LOADS, B_LOADS = loads_per_thread(BM, BN, BK, THREADS, FETCH_WIDTH)
    SA_SHAPE = (STAGES, BK, BM + config["pad"])
    SB_SHAPE = (STAGES, BK, BN + config["pad"])
    ALIGN = SHARED_ALIGNMENT
    elem_t = numba_type(dtype)
    load = vector_load(VEC)
    # A part read wide must have aligned rows: every part through registers, only the parts
    # stored as they are (A passed transposed, B not) through asynchronous copies
    A_WIDE = FETCH_WIDTH > 1 and (not ASYNC or layout[0] == "T")
    B_WIDE = FETCH_WIDTH > 1 and (not ASYNC or layout[1] == "N")
    # the parts moved wide that the build is told have unaligned rows, untested
    UNALIGNED = "".join(name for name, wide in (("A", A_WIDE), ("B", B_WIDE)) if wide and name in unaligned)
    A_ALIGNMENT_TESTED, B_ALIGNMENT_TESTED = A_WIDE and "A" not in UNALIGNED, B_WIDE and "B" not in UNALIGNED
    movement = Movement(THREADS, FETCH_WIDTH, layout=layout, offset_bits=offset_bits)
    fetch, stash = tile_movers(BM, BN, BK, elem_t, movement, split=UNALIGNED)
    tile_copier_checked = tile_copier(BM, BN, BK, movement)
    commit, wait_for_oldest = async_commit(), async_wait(STAGES - 2)
    origin, origin_at, dims = tile_origin(BM, BN), tile_origin_at(BM, BN), product_shape(layout)
    SHARED_BYTES = shared_bytes(config, dtype)
    DYNAMIC = SHARED_BYTES > DEFAULT_DYNAMIC_SHARED
    if DYNAMIC:
        shared_a = dynamic_shared_array(SA_SHAPE, elem_t, 0)
        shared_b = dynamic_shared_array(SB_SHAPE, elem_t, STAGES * BK * (BM + config["pad"]))

    FRAGMENTS = config["fragments"]

    @cuda.jit(device=True)
    def load_fragments(kk, sA, sB, stage, row_base, col_base, a_frag, b_frag):
        """Step kk's TM values of A and TN values of B into fragment set kk % FRAGMENTS."""
        f = kk % FRAGMENTS
        for g in range(GM):
            lanes = load(sA, (stage, kk, row_base + g * ROW_GROUP_STEP))
            for i in range(VEC):
                a_frag[f, g * VEC + i] = lanes[i]
        for h in range(GN):
            lanes = load(sB, (stage, kk, col_base + h * COL_GROUP_STEP))
            for j in range(VEC):
                b_frag[f, h * VEC + j] = lanes[j]

    @cuda.jit(device=True)
    def multiply_step(kk, sA, sB, stage, row_base, col_base, a_frag, b_frag, acc):
        if FRAGMENTS == 1 or kk == 0:
            load_fragments(kk, sA, sB, stage, row_base, col_base, a_frag, b_frag)
        if FRAGMENTS == 2 and kk + 1 < BK:
            load_fragments(kk + 1, sA, sB, stage, row_base, col_base, a_frag, b_frag)
        f = kk % FRAGMENTS
        for i in range(TM):
            for j in range(TN):
                acc[i, j] += a_frag[f, i] * b_frag[f, j]

    @cuda.jit(device=True)
    def multiply_loop(sA, sB, stage, row_base, col_base, a_frag, b_frag, acc):
        for kk in range(BK):
            multiply_step(kk, sA, sB, stage, row_base, col_base, a_frag, b_frag, acc)

    multiply_tile = unrolled(multiply_step, BK) if config["unroll"] else multiply_loop

    def fetched_steps(fetch, stash, checked):
        """Multiply the tiles from k_from to k_to, each fetched into registers by `fetch` while the
        one before it is multiplied, then stashed in shared tile `stage`; returns the next stage.
        Unchecked, the caller guarantees that every tile has a next one."""

        @cuda.jit(device=True)
        def steps(A, B, sA, sB, k_from, k_to, k_end, stage, row0, col0, tid, row_base, col_base, a_frag, b_frag,
                  acc, a_next, b_next):
            for k0 in range(k_from, k_to, BK):
                has_next = not checked or k0 + BK < k_end
                if has_next:
                    fetch(A, B, k0 + BK, row0, col0, tid, a_next, b_next)
                multiply_tile(sA, sB, stage, row_base, col_base, a_frag, b_frag, acc)
                if STAGES == 1:
                    cuda.syncthreads()  # everyone is done reading before the tile is overwritten
                else:
                    stage = 1 - stage
                if has_next:
                    stash(sA[stage], sB[stage], tid, a_next, b_next)
                cuda.syncthreads()
            return stage

        return steps

    checked_fetches = fetched_steps(fetch, stash, True)
    unchecked_fetches = fetched_steps(
        *tile_movers(BM, BN, BK, elem_t, replace(movement, checked=False), split=UNALIGNED), False
    )
    aligned = rows_aligned(VEC)

    @cuda.jit(device=True)
    def unchecked_tiles(A, B, k_begin, k_end, row0, col0, ahead):
        """How many tiles from k_begin on may move the tile `ahead` tiles further without bounds
        tests: none unless the block lies inside C and the parts moved wide untested have aligned
        rows."""
        M, N, _ = dims(A, B)
        if (row0 + BM <= M and col0 + BN <= N and (not A_ALIGNMENT_TESTED or aligned(A))
                and (not B_ALIGNMENT_TESTED or aligned(B))):
            return max(0, (k_end - k_begin) // BK - ahead)
        return 0

    @cuda.jit(device=True)
    def through_registers(A, B, sA, sB, k_begin, k_end, row0, col0, tid, row_base, col_base, a_frag, b_frag, acc):
        """Multiply the tiles from k_begin to k_end, each fetched into registers while the one
        before it is multiplied, then stashed in shared memory: without bounds tests while the
        next tile lies inside."""
        a_next = cuda.local.array(A_LOADS, elem_t)
        b_next = cuda.local.array(B_LOADS, elem_t)
        fetch(A, B, k_begin, row0, col0, tid, a_next, b_next)
        stash(sA[0], sB[0], tid, a_next, b_next)
        cuda.syncthreads()
        k_split = k_begin + unchecked_tiles(A, B, k_begin, k_end, row0, col0, 1) * BK
        stage = unchecked_fetches(A, B, sA, sB, k_begin, k_split, k_end, 0, row0, col0, tid, row_base, col_base,
                                  a_frag, b_frag, acc, a_next, b_next)
        checked_fetches(A, B, sA, sB, k_split, k_end, k_end, stage, row0, col0, tid, row_base, col_base, a_frag,
                        b_frag, acc, a_next, b_next)

    def copied_steps(copy):
        """Multiply the tiles from k_from to k_to, each copied asynchronously into shared memory
        STAGES - 1 tiles ahead by `copy`, starting in shared tile `stage`; returns the next stage."""

        @cuda.jit(device=True)
        def steps(A, B, sA, sB, k_from, k_to, k_end, stage, row0, col0, tid, row_base, col_base, a_frag, b_frag, acc):
            for k0 in range(k_from, k_to, BK):
                wait_for_oldest()  # this thread's copies of the tile at k0 have landed
                cuda.syncthreads()  # so have everyone's, and everyone is done with the previous tile
                k_ahead = k0 + (STAGES - 1) * BK
                if k_ahead < k_end:
                    ahead = stage - 1 if stage > 0 else STAGES - 1  # the previous tile's, now free
                    copy(A, B, k_ahead, row0, col0, tid, sA[ahead], sB[ahead])
                commit()
                multiply_tile(sA, sB, stage, row_base, col_base, a_frag, b_frag, acc)
                stage = stage + 1 if stage + 1 < STAGES else 0
            return stage

        return steps

    checked_steps = copied_steps(tile_copier_checked)
    unchecked_steps = copied_steps(tile_copier(BM, BN, BK, replace(movement, checked=False), narrow=UNALIGNED))

    @cuda.jit(device=True)
    def through_copies(A, B, sA, sB, k_begin, k_end, row0, col0, tid, row_base, col_base, a_frag, b_frag, acc):
        """Multiply the tiles from k_begin to k_end, each copied asynchronously into shared
        memory STAGES - 1 tiles ahead: without bounds tests while the copies stay inside."""
        for s in range(STAGES - 1):
            if k_begin + s * BK < k_end:
                tile_copier_checked(A, B, k_begin + s * BK, row0, col0, tid, sA[s], sB[s])
            commit()  # empty groups too: the wait below counts groups
        k_split = k_begin + unchecked_tiles(A, B, k_begin, k_end, row0, col0, STAGES - 1) * BK
        stage = unchecked_steps(A, B, sA, sB, k_begin, k_split, k_end, 0, row0, col0, tid, row_base, col_base,
                                a_frag, b_frag, acc)
        checked_steps(A, B, sA, sB, k_split, k_end, k_end, stage, row0, col0, tid, row_base, col_base, a_frag, b_frag,
                      acc)

    multiply_all = through_copies if ASYNC else through_registers

    @cuda.jit(device=True)
    def edge_origin(row0, col0, M, N):
        """Where a block works: a tile on the bottom (right) edge of C moves back to end at C's
        last row (column) where C has a whole tile's worth, so that it moves its tiles without
        bounds tests like a block inside; it computes rows (columns) of its neighbour again, which
        write_back leaves to that neighbour."""
        return (M - BM if row0 + BM > M and M >= BM else row0), (N - BN if col0 + BN > N and N >= BN else col0)

    store_one = scalar_access(offset_bits)[1]
    ADDS = SPLITS > 1 or STREAMED
    # Adding into C, a group of VEC columns goes in as one 16-byte atomic add (float32 lanes), or,
    # in a build told that C's rows are unaligned, as the widest adds each group's address allows.
    # Not the stores of a whole K: 16-byte stores pin the accumulators to aligned register quads.
    C_GROUPED = ADDS and "C" in unaligned and dtype == "float32"  # vector adds exist for float32 alone
    add_one, group_of = reduce_add(1, offset_bits), _lanes(VEC)
    add_group = reduce_add_unaligned(offset_bits) if C_GROUPED else reduce_add(VEC, offset_bits)
    c_aligned = anywhere if C_GROUPED else rows_aligned(VEC)
    GROUP_START = 1 if C_GROUPED else VEC  # the columns a group of C may start at

    @cuda.jit(device=True)
    def write_row(t, C, M, N, row0, col0, top, left, inside, wide, row_base, col_base, acc):
        r = row0 + row_base + (t // VEC) * ROW_GROUP_STEP + t % VEC
        if inside or top <= r < M:
            for h in range(GN):
                c = col0 + col_base + h * COL_GROUP_STEP
                if wide and (inside or (left <= c and c + VEC <= N)):
                    add_group(C, (r, c), group_of(acc, t, h * VEC))
                else:
                    for j in range(VEC):
                        if inside or left <= c + j < N:
                            if not ADDS:
                                store_one(C, (r, c + j), acc[t, h * VEC + j])
                            else:
                                add_one(C, (r, c + j), (acc[t, h * VEC + j],))

    write_rows = unrolled(write_row, TM)

    @cuda.jit(device=True)
    def write_back(C, M, N, row0, col0, row_base, col_base, acc):
        """C's tile from the accumulators, with the offsets the loads use and, in a block inside
        C, no bounds tests; added into C atomically when K is split. A block moved back from the
        edge (`edge_origin`) writes only from its own tile's first row `top` and column `left`
        on: the multiples of BM and BN at or after its origin, worked out again here rather than
        held in registers all along. The rows are straight-line code, so that the accumulators
        stay in registers."""
        top, left = -(-row0 // BM) * BM, -(-col0 // BN) * BN
        inside = row0 == top and col0 == left and row0 + BM <= M and col0 + BN <= N
        wide = ADDS and c_aligned(C) and col0 % GROUP_START == 0
        write_rows(C, M, N, row0, col0, top, left, inside, wide, row_base, col_base, acc)

    @cuda.jit(device=True)
    def add_bias(bias, N, col0, col_base, acc):
        """The bias of each accumulator's column inside C, added before write_back."""
        for h in range(GN):
            for j in range(VEC):
                c = col0 + col_base + h * COL_GROUP_STEP + j
                if c < N:
                    for t in range(TM):
                        acc[t, h * VEC + j] += bias[c]

    @cuda.jit(device=True)
    def zero(acc):
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = elem_t(0)

    @cuda.jit(device=True)
    def stream(A, B, C, bias, M, N, K, sA, sB, tid, row_base, col_base, a_frag, b_frag, acc):
        """Stream-K: this block's even share of all the tiles' BK-steps, taken in tile order, and
        each tile's part of it added into C."""
        steps = (K + BK - 1) // BK
        total = ((M + BM - 1) // BM) * ((N + BN - 1) // BN) * steps
        step = total * cuda.blockIdx.x // cuda.gridDim.x
        end = total * (cuda.blockIdx.x + 1) // cuda.gridDim.x
        while step < end:
            tile = step // steps
            first = step - tile * steps
            last = min(steps, first + end - step)
            top, left = origin_at(M, N, tile)
            row0, col0 = edge_origin(top, left, M, N)
            zero(acc)
            multiply_all(A, B, sA, sB, first * BK, min(K, last * BK), row0, col0, tid, row_base, col_base, a_frag,
                         b_frag, acc)
            if bias is not None:
                if first == 0:
                    add_bias(bias, N, col0, col_base, acc)
            write_back(C, M, N, row0, col0, row_base, col_base, acc)
            step += last - first
            cuda.syncthreads()  # everyone is done with the shared tiles the next part refills

    def vector_matmul(A, B, C, bias=None):
        if DYNAMIC:
            sA = shared_a()
            sB = shared_b()
        else:
            sA = cuda.shared.array(SA_SHAPE, elem_t, alignment=ALIGN)
            sB = cuda.shared.array(SB_SHAPE, elem_t, alignment=ALIGN)
        acc = cuda.local.array((TM, TN), elem_t)
        a_frag = cuda.local.array((FRAGMENTS, TM), elem_t)
        b_frag = cuda.local.array((FRAGMENTS, TN), elem_t)
        tid = cuda.threadIdx.x
        row_base = (tid // TX) * VEC
        col_base = (tid % TX) * VEC
        M, N, K = dims(A, B)
        if STREAMED:
            stream(A, B, C, bias, M, N, K, sA, sB, tid, row_base, col_base, a_frag, b_frag, acc)
            return
        top, left = origin(M, N)
        row0, col0 = edge_origin(top, left, M, N)
        k_begin, k_end = 0, K
        if SPLITS > 1:
            k_span = -(-K // (SPLITS * BK)) * BK
            k_begin = cuda.blockIdx.y * k_span
            k_end = min(K, k_begin + k_span)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = elem_t(0)
        multiply_all(A, B, sA, sB, k_begin, k_end, row0, col0, tid, row_base, col_base, a_frag, b_frag, acc)
        if bias is not None:
            if cuda.blockIdx.y == 0:  # one split adds it
                add_bias(bias, N, col0, col_base, acc)
        write_back(C, M, N, row0, col0, row_base, col_base, acc)

    return Kernel(family, dict(config), dtype, vector_matmul, block=(THREADS,), tile=(BM, BN), splits=SPLITS,
                  workers_per_sm=workers_per_sm,
                  min_blocks=max(config["min_blocks"], workers_per_sm), layout=layout, offset_bits=offset_bits,
                  unaligned=UNALIGNED + "C" * C_GROUPED,
                  dynamic_shared=SHARED_BYTES if DYNAMIC else 0)


def _lanes(width: int):
    """group_of(acc, t, j) -> (acc[t, j], ..., acc[t, j + width - 1]) as a tuple."""
    if width == 4:
        return cuda.jit(device=True)(lambda acc, t, j: (acc[t, j], acc[t, j + 1], acc[t, j + 2], acc[t, j + 3]))
    if width == 2:
        return cuda.jit(device=True)(lambda acc, t, j: (acc[t, j], acc[t, j + 1]))
    raise ValueError(f"no {width}-lane vectors")


FAMILY = Family(name="vector", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=0,
                shared_bytes=shared_bytes,
                instructions=instructions, footprint=footprint, schedules=SCHEDULES, rule_tiles=True)
