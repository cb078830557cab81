"""How the warpgroup family (kernels.wgmma) copies a tile of A or B into shared memory as it lies
in memory: `cp.async`, 16 bytes a copy where the rows allow, else 4, out-of-range elements
zero-filled, in the family's swizzled or padded raw layouts; and how it splits B's raw tile into
the big and small TF32 tiles its instructions read."""

from __future__ import annotations

from numba import cuda

from . import wgmma_layout as wl
from .base import unrolled
from .intrinsics import async_copy, scalar_access, vector_store
from .warp_mma import split_tf32

#: K of a tile: one 128-byte swizzled row of float32
BK = wl.TILE_K
#: float32 more per row of a raw tile whose rows run along M or N: a thread's reads of A's
#: column pairs 4 apart then fall on different banks
PAD = 4


def raw_copier(rows: int, along_k: bool, swizzle: tuple[int, int], width: int, threads: int, offset_bits: int):
    """copy(X, words, at, origin, k0, k_end, tid): start copying one operand's `rows` x BK tile
    into the raw tile at word `at` of shared `words`, `width` elements a copy. Element (r, k) is
    X[origin + r, k0 + k] where X's rows run along K (`along_k`), and lies at row r, 16-byte
    word (k / 4) ^ ((r & mask) << shift) (`swizzle`); else it is X[k0 + k, origin + r], at row k
    of rows + PAD. Elements past X's edge or k_end are zeros."""
    copy = async_copy(width, offset_bits)
    MASK, SHIFT = swizzle
    if along_k:
        PER_ROW = BK // width
        COUNT = rows * PER_ROW // threads

        @cuda.jit(device=True)
        def copy_along_k(X, words, at, origin, k0, k_end, tid):
            for i in range(COUNT):
                j = tid + i * threads
                r, k = j // PER_ROW, j % PER_ROW * width
                row, col = origin + r, k0 + k
                inside = row < X.shape[0] and col < k_end
                place = at + r * BK + ((((k >> 2) ^ ((r & MASK) << SHIFT)) << 2) | (k & 3))
                copy(words, (place,), X, (row if inside else 0, col if inside else 0), inside)

        return copy_along_k

    PER_K = rows // width
    COUNT = BK * PER_K // threads

    @cuda.jit(device=True)
    def copy_across_k(X, words, at, origin, k0, k_end, tid):
        for i in range(COUNT):
            j = tid + i * threads
            k, r = j // PER_K, j % PER_K * width
            row, col = k0 + k, origin + r
            inside = row < k_end and col < X.shape[1]
            copy(words, (at + k * (rows + PAD) + r,), X, (row if inside else 0, col if inside else 0), inside)

    return copy_across_k


def operand_copier(rows: int, along_k: bool, swizzle: tuple[int, int], threads: int, offset_bits: int,
                   wide_copies: str | None):
    """copy(X, words, at, origin, k0, k_end, tid, wide): raw_copier's, 16 bytes a copy where
    `wide` (X's rows are 16-byte aligned), else 4. `wide_copies` says how the 16-byte copies run:
    "rolled" (raw_copier's loop) or "straight" (unrolled_copier's steps); None where the build's
    rows are unaligned, so that every copy moves 4 bytes."""
    one = raw_copier(rows, along_k, swizzle, 1, threads, offset_bits)
    if wide_copies is None:
        @cuda.jit(device=True)
        def copy_narrow(X, words, at, origin, k0, k_end, tid, wide):
            one(X, words, at, origin, k0, k_end, tid)

        return copy_narrow
    four = (unrolled_copier(rows, along_k, swizzle, threads, offset_bits) if wide_copies == "straight"
            else raw_copier(rows, along_k, swizzle, 4, threads, offset_bits))

    @cuda.jit(device=True)
    def copy_either(X, words, at, origin, k0, k_end, tid, wide):
        if wide:
            four(X, words, at, origin, k0, k_end, tid)
        else:
            one(X, words, at, origin, k0, k_end, tid)

    return copy_either


def unrolled_copier(rows: int, along_k: bool, swizzle: tuple[int, int], threads: int, offset_bits: int):
    """raw_copier's copy of 16 bytes a copy, as straight-line steps whose indices are shifts of the
    thread's index and constants: a thread copies the same words of every K-tile, so what does not
    depend on the tile's k0 can leave the K-loop (the rolled loop divides signed indices anew
    each tile)."""
    copy = async_copy(4, offset_bits)
    MASK, SHIFT = swizzle
    if along_k:
        STEP_ROWS = threads // (BK // 4)  # rows apart from one step to the next

        @cuda.jit(device=True)
        def step_along_k(i, X, words, at, origin, k0, k_end, tid):
            r, w = (tid >> 3) + i * STEP_ROWS, tid & 7
            row, col = origin + r, k0 + 4 * w
            inside = row < X.shape[0] and col < k_end
            place = at + r * BK + ((w ^ ((r & MASK) << SHIFT)) << 2)
            copy(words, (place,), X, (row if inside else 0, col if inside else 0), inside)

        return unrolled(step_along_k, rows * (BK // 4) // threads)
    PER_K = rows // 4  # 16-byte words along one k of the tile
    LOG_PER_K, STEP_K = PER_K.bit_length() - 1, threads // PER_K

    @cuda.jit(device=True)
    def step_across_k(i, X, words, at, origin, k0, k_end, tid):
        k, r = (tid >> LOG_PER_K) + i * STEP_K, (tid & (PER_K - 1)) << 2
        row, col = k0 + k, origin + r
        inside = row < k_end and col < X.shape[1]
        copy(words, (at + k * (rows + PAD) + r,), X, (row if inside else 0, col if inside else 0), inside)

    return unrolled(step_across_k, BK * PER_K // threads)


def b_splitter(bn: int, along_k: bool, a_raw: int, workers: int, straight: bool):
    """split(words, raw, stage, tid): B's raw tile (`a_raw` words after the raw tile of A at word
    `raw`) split into its big and small K-major swizzled tiles at word `stage` (the small one
    bn BK words further), bn * 8 / workers 16-byte words a thread. Where B's rows run along K
    (`along_k`) a warp's threads take the 8 words of 4 rows, else 32 rows of one word, so that
    their reads of the raw tile fall on distinct banks. With `straight`, the words are unrolled
    steps whose places are shifts of the thread's index and constants."""
    load1, store4, split = scalar_access(64)[0], vector_store(4), split_tf32(0)
    TASKS, SMALL, LOG_BN = bn * 8 // workers, bn * BK, bn.bit_length() - 1

    @cuda.jit(device=True)
    def b_column(words, raw_b, n, q, i):
        """B[k, n] of the raw tile at column i of split word q (k = 16 (q & 1) + 4 i + q // 2)."""
        k = 16 * (q & 1) + 4 * i + (q >> 1)
        if along_k:
            return load1(words, (raw_b + n * BK + ((((k >> 2) ^ (n & 7)) << 2) | (k & 3)),))
        return load1(words, (raw_b + k * (bn + PAD) + n,))

    @cuda.jit(device=True)
    def split_word(words, raw, stage, n, q):
        """Split word q of column n of B's raw tile into its big and small tiles at word `stage`."""
        b0, s0 = split(b_column(words, raw + a_raw, n, q, 0))
        b1, s1 = split(b_column(words, raw + a_raw, n, q, 1))
        b2, s2 = split(b_column(words, raw + a_raw, n, q, 2))
        b3, s3 = split(b_column(words, raw + a_raw, n, q, 3))
        place = stage + n * BK + ((q ^ (n & 7)) << 2)
        store4(words, (place,), (b0, b1, b2, b3))
        store4(words, (place + SMALL,), (s0, s1, s2, s3))

    @cuda.jit(device=True)
    def split_b(words, raw, stage, tid):
        for j in range(TASKS):
            task = tid + j * workers
            if along_k:
                n, q = task >> 3, task & 7
            else:
                q, n = task // bn, task % bn
            split_word(words, raw, stage, n, q)

    @cuda.jit(device=True)
    def split_b_word(j, words, raw, stage, tid):
        """split_b's task tid + j workers."""
        if along_k:
            split_word(words, raw, stage, (tid >> 3) + j * (workers >> 3), tid & 7)
        else:
            split_word(words, raw, stage, tid & (bn - 1), (tid >> LOG_BN) + j * (workers >> LOG_BN))

    return unrolled(split_b_word, TASKS) if straight else split_b
