"""float32 products as three TF32 products on Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a).

kernels.tf32x3 issues a warp's `mma.sync` and splits each element once per warp that reads it;
here a block of BM / 64 warpgroups (128 threads each) computes a BM x BN tile of C (of C's
transpose with `swap`, where "A" and "B" below are B^T and A^T), warpgroup w rows 64 w to 64 w + 63, each with instructions of 64 x BN x 8 that run while the block moves the
next tiles. Per K-tile of 32:
  - the tiles of A and B arrive in shared memory as they lie in memory (`cp.async`, 16 bytes a
    copy where rows allow, else 4; out-of-range elements zero-filled), STAGES - 1 tiles ahead;
  - the block splits B's tile once into its big and small TF32 parts (kernels.warp_mma.split_tf32,
    the small part unscaled), written K-major in the 128-byte swizzle that the instruction reads
    through descriptors (kernels.wgmma_layout). TF32 has no transposed operand, so a B whose
    rows run along N (NN, TN) is transposed here, and one whose rows run along K is not;
  - each thread reads its 16 elements of A from the raw tile and splits them in registers: A
    comes from registers (wgmma_layout.a_fragment), so A needs no split tiles at all;
  - each warpgroup issues, from zero, small_A @ big_B and big_A @ small_B for the tile's four
    slices of 8, then big_A @ big_B onto the same sums, and adds those into its float32 sums
    after one wait. The tensor cores round their sums toward zero: summing one K-tile there and
    the tiles in float32 keeps the error within float32's (docs/performance.md, step 39).
Along K, the tile's columns are permuted (k = 16 h + 4 i + kk is column 4 h + i of slice kk), so
that a thread reads its elements of A as two 16-byte words a row; B's split tiles take the same
permutation, which leaves the sum unchanged. Inf and NaN come out as kernels.tf32x3's do; the
small parts are unscaled, so an operand is held to 2**-137 (kernels.tf32x3's to 2**-147), which
precision "tf32x3" allows (autotune.space.precision). Operands whose rows are not 16-byte
aligned move 4 bytes a copy, which makes those builds several times slower; with two producer
warpgroups they move as the whole 16-byte words that hold each row (wgmma_copies.shifted_copier).

With `producer`, one more warpgroup does the copies and B's split while the others only split
their A and multiply, instead of every warp doing all of it between its products: the producer
splits tile t + 1 while the multiplying warpgroups work on tile t. They meet at named barriers,
one pair per split stage: "full" (the producer has split it and the raw tile of A is in) and
"empty" (every product reading it is done). The producer gives up registers (setmaxnreg) that
the multiplying warpgroups take for their two sets of sums. With two producer warpgroups each
does half of that work, and their copies and splits are straight-line code whose addresses are
shifts of the thread's index and constants, so that what does not depend on the K-tile leaves
the K-loop (one producer keeps the rolled loops its records were timed on).
Parameters:
  bm, bn         block tile: bm / 64 warpgroups; bn columns per instruction
  stages         raw tiles of A and B in flight (2 to 4), in dynamic shared memory
  splits         blocks along K per tile of C, adding into C atomically (as `splitk`)
  min_blocks     blocks per SM ptxas must leave registers for (launch_bounds)
  producer       warpgroups of their own (1 or 2) that copy and split B (bm 128 only)
  swap           1: the block computes a tile of C's transpose as B^T @ A^T (`as_built`), so that
                 bm runs along N and bn along M, and stores it transposed: a short M then fills
                 the instruction's N, which steps by 8, where the instruction's M steps by 64
Tiles of any multiple of 8 columns (bn) and swapped operands take two producer warpgroups.
"""

from __future__ import annotations

from numba import cuda, float32

from . import warpgroup
from . import wgmma_layout as wl
from .base import Family, Kernel, Schedules, product_shape, tile_origin
from .intrinsics import async_commit, async_wait, dynamic_shared_array, rows_aligned
from .warp_mma import split_tf32
from .wgmma_copies import BK, Copies, a_reader, b_splitter, operand_copier, skewer
from .wgmma_space import (
    CONSUMER_REGISTERS,
    DEFAULT,
    DTYPE,
    EMPTY,
    FULL,
    PRODUCER_REGISTERS,
    PRODUCERS_ONLY,
    ROLLED_WIDTHS,
    SPACE,
    STRAIGHT_PRODUCERS,
    as_built,
    c_tile,
    first_tile,
    fit,
    footprint,
    instructions,
    raw_stage_words,
    restrict,
    shared_bytes,
    threads_per_block,
)


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    if dtype != DTYPE:
        raise ValueError(f"wgmma multiplies {DTYPE} only, not {dtype}")
    if (config["bn"] not in ROLLED_WIDTHS or config.get("swap")) and config["producer"] not in STRAIGHT_PRODUCERS:
        raise ValueError("wgmma builds tiles of other widths than 64 and 128, and swapped operands, with two producers")
    BM, BN, STAGES, SPLITS = config["bm"], config["bn"], config["stages"], config["splits"]
    THREADS = threads_per_block(config)
    PRODUCERS = config["producer"]
    WORKERS = PRODUCERS * wl.THREADS if PRODUCERS else THREADS  # the threads that copy and split B
    STRAIGHT = PRODUCERS in STRAIGHT_PRODUCERS
    SWAP = bool(config.get("swap"))
    built, built_unaligned = as_built(config, layout, unaligned)  # the roles' operands: A and B, or B and A
    A_ALONG_K, B_ALONG_K = built[0] == "N", built[1] == "T"
    B_TILE = BN * wl.ROW_BYTES  # bytes of one split tile of B
    SPLIT_STAGE = 2 * B_TILE  # its big and small parts
    A_RAW, B_RAW = raw_stage_words(config, layout, unaligned)
    RAW0, RAW_STAGE = 2 * SPLIT_STAGE // 4, A_RAW + B_RAW  # words
    SHARED = shared_bytes(config, dtype, layout, unaligned)
    copies_a, copies_b = Copies(STRAIGHT, "A" not in built_unaligned), Copies(STRAIGHT, "B" not in built_unaligned)
    # where A lies along K, a thread's rows r and r + 8 hold their 16-byte words at 4 (r & 1) ^ c, so
    # that a quarter warp's reads fall on distinct banks; B's rows, read down a column, at (r & 7) ^ c
    copy_a = operand_copier(BM, A_ALONG_K, (1, 2), WORKERS, offset_bits, copies_a)
    copy_b = operand_copier(BN, B_ALONG_K, (7, 0), WORKERS, offset_bits, copies_b)
    split_b = b_splitter(BN, B_ALONG_K, A_RAW, WORKERS, STRAIGHT, copies_b.shifted)
    a_word = a_reader(BM, A_ALONG_K, copies_a.shifted)
    skew_a, skew_b = skewer(A_ALONG_K), skewer(B_ALONG_K)
    aligned = rows_aligned(4)
    shared = dynamic_shared_array((SHARED // 4,), float32, 0)
    address = warpgroup.shared_address()
    split = split_tf32(0)
    multiply = warpgroup.multiply(BN)
    zeros, add, pin = warpgroup.zeros(BN // 2), warpgroup.add(), warpgroup.pin()
    fence, commit, wait, proxy_fence = warpgroup.fence(), warpgroup.commit(), warpgroup.wait(), warpgroup.proxy_fence()
    commit_copies, wait_copies = async_commit(), async_wait(STAGES - 2)
    store, biases = warpgroup.store_sums(BN, offset_bits, SPLITS > 1, SWAP), warpgroup.biases(BN, SWAP)
    descriptor = warpgroup.descriptor
    origin, dims = tile_origin(BM, BN), product_shape(built)
    arrive, meet = warpgroup.barrier(THREADS, True), warpgroup.barrier(THREADS, False)
    meet_producers = warpgroup.barrier(WORKERS, False)
    fewer = warpgroup.registers(PRODUCER_REGISTERS.get(PRODUCERS, 0), False)
    more = warpgroup.registers(CONSUMER_REGISTERS, True)

    @cuda.jit(device=True)
    def copy_tile(A, B, words, raw, row0, col0, k0, k_end, tid, wide_a, wide_b):
        copy_a(A, words, raw, row0, k0, k_end, tid, wide_a)
        copy_b(B, words, raw + A_RAW, col0, k0, k_end, tid, wide_b)

    @cuda.jit(device=True)
    def a_parts(words, raw, tid, skew):
        """This thread's elements of A for the tile's four slices (wgmma_layout.a_fragment, K
        permuted), split: (big, small), each 4 registers a slice."""
        r = 64 * (tid >> 7) + 16 * ((tid >> 5) & 3) + ((tid & 31) >> 2)
        t = tid & 3
        x0, x1 = a_word(words, raw, r, t, skew), a_word(words, raw, r, 4 + t, skew)
        y0, y1 = a_word(words, raw, r + 8, t, skew), a_word(words, raw, r + 8, 4 + t, skew)
        p0, q0 = split(x0[0])
        p1, q1 = split(y0[0])
        p2, q2 = split(x1[0])
        p3, q3 = split(y1[0])
        p4, q4 = split(x0[1])
        p5, q5 = split(y0[1])
        p6, q6 = split(x1[1])
        p7, q7 = split(y1[1])
        p8, q8 = split(x0[2])
        p9, q9 = split(y0[2])
        p10, q10 = split(x1[2])
        p11, q11 = split(y1[2])
        p12, q12 = split(x0[3])
        p13, q13 = split(y0[3])
        p14, q14 = split(x1[3])
        p15, q15 = split(y1[3])
        return ((p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15),
                (q0, q1, q2, q3, q4, q5, q6, q7, q8, q9, q10, q11, q12, q13, q14, q15))

    @cuda.jit(device=True)
    def products(words, b, big, small, d):
        """d = this tile's small_A @ big_B + big_A @ small_B from zero, then big_A @ big_B onto
        it; B's big tile at byte address b, its small tile B_TILE further."""
        s = b + B_TILE
        d = multiply(words, d, (small[0], small[1], small[2], small[3]), descriptor(b), 0)
        d = multiply(words, d, (big[0], big[1], big[2], big[3]), descriptor(s), 1)
        d = multiply(words, d, (small[4], small[5], small[6], small[7]), descriptor(b + 32), 1)
        d = multiply(words, d, (big[4], big[5], big[6], big[7]), descriptor(s + 32), 1)
        d = multiply(words, d, (small[8], small[9], small[10], small[11]), descriptor(b + 64), 1)
        d = multiply(words, d, (big[8], big[9], big[10], big[11]), descriptor(s + 64), 1)
        d = multiply(words, d, (small[12], small[13], small[14], small[15]), descriptor(b + 96), 1)
        d = multiply(words, d, (big[12], big[13], big[14], big[15]), descriptor(s + 96), 1)
        d = multiply(words, d, (big[0], big[1], big[2], big[3]), descriptor(b), 1)
        d = multiply(words, d, (big[4], big[5], big[6], big[7]), descriptor(b + 32), 1)
        d = multiply(words, d, (big[8], big[9], big[10], big[11]), descriptor(b + 64), 1)
        return multiply(words, d, (big[12], big[13], big[14], big[15]), descriptor(b + 96), 1)

    @cuda.jit(device=True, inline="always")
    def k_range(K):
        """(first k, end, K-tiles) of this block's part of K."""
        k_begin, k_end = 0, K
        if SPLITS > 1:
            k_span = -(-K // (SPLITS * BK)) * BK
            k_begin = cuda.blockIdx.y * k_span
            k_end = min(K, k_begin + k_span)
        return k_begin, k_end, max(0, -(-(k_end - k_begin) // BK))

    @cuda.jit(device=True)
    def produce(A, B, words, raw0, stage0, row0, col0, k_begin, k_end, tiles, tid):
        """The producer: copies STAGES - 2 tiles ahead; splits tile t's B into split stage t % 2
        once the products of tile t - 2 are done, and says so when it has."""
        wide_a, wide_b = aligned(A), aligned(B)
        skew = skew_b(B, col0)
        for s in range(STAGES - 2):
            if s < tiles:
                copy_tile(A, B, words, raw0 + s * RAW_STAGE, row0, col0, k_begin + s * BK, k_end, tid, wide_a, wide_b)
            commit_copies()
        for t in range(tiles):
            if t >= 2:
                meet(EMPTY + (t & 1))
            ahead = t + STAGES - 2
            if ahead < tiles:
                copy_tile(A, B, words, raw0 + (ahead % STAGES) * RAW_STAGE, row0, col0, k_begin + ahead * BK, k_end,
                          tid, wide_a, wide_b)
            commit_copies()
            wait_copies()
            meet_producers(PRODUCERS_ONLY)  # every copy of tile t is in
            split_b(words, raw0 + (t % STAGES) * RAW_STAGE, stage0 + (t & 1) * SPLIT_STAGE // 4, tid, skew)
            proxy_fence()
            arrive(FULL + (t & 1))

    @cuda.jit(device=True)
    def consume(words, raw0, first, tiles, tid, skew):
        """A multiplying warpgroup's sums over its tiles, each split stage released once its
        products are done (but the last two, which the producer does not wait for)."""
        total = zeros()
        d = zeros()
        for t in range(tiles):
            meet(FULL + (t & 1))
            big, small = a_parts(words, raw0 + (t % STAGES) * RAW_STAGE, tid, skew)
            fence()
            d = products(words, first + (t & 1) * SPLIT_STAGE, big, small, d)
            commit()
            wait()
            d = pin(d)
            big, small = pin(big), pin(small)
            if t + 2 < tiles:
                arrive(EMPTY + (t & 1))
            total = add(total, d)
        return total

    def wgmma_roles(A, B, C, bias=None):
        if SWAP:  # the block's first operand is B^T, its second A^T (as_built)
            X, Y = B, A
        else:
            X, Y = A, B
        words = shared()
        tid = cuda.threadIdx.x
        pad = ((-address(words)) & (wl.TILE_ALIGN - 1)) >> 2  # words to the first aligned one
        M, N, K = dims(X, Y)
        row0, col0 = origin(M, N)
        k_begin, k_end, tiles = k_range(K)
        if tid < WORKERS:
            fewer()
            produce(X, Y, words, pad + RAW0, pad, row0, col0, k_begin, k_end, tiles, tid)
        else:
            more()
            me = tid - WORKERS
            total = consume(words, pad + RAW0, address(words) + 4 * pad, tiles, me, skew_a(X, row0))
            if bias is not None:
                if cuda.blockIdx.y == 0:  # one split adds it; swapped, along the sums' rows
                    first = row0 + wl.ROWS * (me >> 7) if SWAP else col0
                    total = add(total, biases(bias, me & (wl.THREADS - 1), first))
            store(C, total, me & (wl.THREADS - 1), row0 + wl.ROWS * (me >> 7), col0)

    def wgmma_matmul(A, B, C, bias=None):
        words = shared()
        tid = cuda.threadIdx.x
        pad = ((-address(words)) & (wl.TILE_ALIGN - 1)) >> 2  # words to the first aligned one
        first = address(words) + 4 * pad  # byte address of split stage 0
        M, N, K = dims(A, B)
        row0, col0 = origin(M, N)
        k_begin, k_end, tiles = k_range(K)
        wide_a, wide_b = aligned(A), aligned(B)
        a_skew, b_skew = skew_a(A, row0), skew_b(B, col0)
        raw0 = pad + RAW0
        for s in range(STAGES - 1):
            if s < tiles:
                copy_tile(A, B, words, raw0 + s * RAW_STAGE, row0, col0, k_begin + s * BK, k_end, tid, wide_a, wide_b)
            commit_copies()  # empty groups too: the wait counts groups
        wait_copies()
        cuda.syncthreads()
        split_b(words, raw0, pad, tid, b_skew)
        proxy_fence()
        cuda.syncthreads()
        big, small = a_parts(words, raw0, tid, a_skew)
        total = zeros()
        d = zeros()
        for t in range(tiles):
            fence()
            d = products(words, first + (t & 1) * SPLIT_STAGE, big, small, d)
            commit()
            d = pin(d)
            ahead = t + STAGES - 1
            if ahead < tiles:
                copy_tile(A, B, words, raw0 + (ahead % STAGES) * RAW_STAGE, row0, col0, k_begin + ahead * BK, k_end,
                          tid, wide_a, wide_b)
            commit_copies()
            wait_copies()
            cuda.syncthreads()  # tile t + 1 is in, and every thread is done with tile t - 1
            following = raw0 + ((t + 1) % STAGES) * RAW_STAGE
            if t + 1 < tiles:
                split_b(words, following, pad + ((t + 1) & 1) * SPLIT_STAGE // 4, tid, b_skew)
                proxy_fence()
            next_big, next_small = a_parts(words, following, tid, a_skew)
            wait()
            d = pin(d)
            big, small = pin(big), pin(small)  # their instructions are done: the registers may go
            total = add(total, d)
            big, small = next_big, next_small
            cuda.syncthreads()
        if bias is not None:
            if cuda.blockIdx.y == 0:  # one split adds it
                total = add(total, biases(bias, tid & (wl.THREADS - 1), col0))
        store(C, total, tid & (wl.THREADS - 1), row0 + wl.ROWS * (tid >> 7), col0)

    body = wgmma_roles if config["producer"] else wgmma_matmul
    return Kernel("wgmma", dict(config), dtype, body, block=(THREADS,), tile=c_tile(config), splits=SPLITS,
                  min_blocks=config["min_blocks"], layout=layout, offset_bits=offset_bits,
                  unaligned="".join(name for name in "AB" if name in unaligned), dynamic_shared=SHARED)


#: a tile computed whole or with K split by the config's own `splits`
FAMILY = Family(name="wgmma", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=-1,
                shared_bytes=shared_bytes, precision="tf32x3", instructions=instructions, footprint=footprint,
                schedules=Schedules(whole="wgmma", split="wgmma"), first_tile=first_tile, fit=fit)
