"""How the warpgroup family (kernels.wgmma) copies a tile of A or B into shared memory as it lies
in memory: `cp.async`, 16 bytes a copy where the rows allow, else 4 or (straight-line producers)
the whole 16-byte words that hold each row, out-of-range elements zero-filled, in the family's
swizzled, padded or shifted raw layouts; how it splits B's raw tile into the big and small TF32
tiles its instructions read; and how the multiplying warpgroups read A's raw tile."""

from __future__ import annotations

from dataclasses import dataclass

from numba import cuda

from . import wgmma_layout as wl
from .base import unrolled
from .intrinsics import async_copy, scalar_access, vector_load, vector_store, word_copy, word_offset
from .warp_mma import split_tf32

#: K of a tile: one 128-byte swizzled row of float32
BK = wl.TILE_K
#: float32 more per row of a raw tile whose rows run along M or N: a thread's reads of A's
#: column pairs 4 apart then fall on different banks
PAD = 4
#: float32 of a shifted raw tile's row along K (shifted_copier): the nine 16-byte words that hold
#: a row's BK elements where its rows are not 16-byte aligned
SHIFTED_ROW = BK + 4
#: float32 more per k of a shifted raw tile whose rows run along M or N: one 16-byte word, and
#: PAD's banks again
SHIFTED_PAD = 2 * PAD + 4


def tasks(majors: int, per: int, threads: int, minor_first: bool = False):
    """(task, steps): task(i, tid) -> (major, minor, inside) of straight-line step i of thread
    tid, over `majors` x `per` tasks. Each step takes threads // per whole majors, the thread's
    minor the same in every step and its major a constant further, so that the places it works on
    are one offset plus constants. A power of two `per` takes shifts of the thread's index; where
    the tasks fill every step (`even`: every tile of 64 or 128 columns) each thread works in each,
    else the threads past the last major sit out (tiles of any 8 columns, kernels.wgmma's bn).
    `minor_first`: the shifts in the order B's split computed them, which its PTX keeps."""
    ROWS, SHIFT, MASK = threads // per, per.bit_length() - 1, per - 1
    if even(majors * per, per, threads):
        @cuda.jit(device=True, inline="always")
        def every(i, tid):
            if minor_first:
                minor = tid & MASK
                return (tid >> SHIFT) + i * ROWS, minor, True
            return (tid >> SHIFT) + i * ROWS, tid & MASK, True

        return every, majors * per // threads

    @cuda.jit(device=True, inline="always")
    def task(i, tid):
        major = tid // per + i * ROWS
        return major, tid % per, tid < ROWS * per and major < majors

    return task, -(-majors // ROWS)


def even(count: int, per: int, threads: int) -> bool:
    """Whether `count` tasks laid out `per` to a major index fill every step of `threads` alike,
    each thread's minor index the same from step to step (shifts of its index serve them)."""
    return per & (per - 1) == 0 and threads % per == 0 and count % threads == 0


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

        ROLLED = rows & (rows - 1) != 0  # see copy_across_k_any

        @cuda.jit(device=True)
        def copy_along_k(X, words, at, origin, k0, k_end, tid):
            for i in range(COUNT + (k0 >> 62) * ROLLED):
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

    if even(BK * PER_K, PER_K, threads):
        return copy_across_k
    task, steps = tasks(BK, PER_K, threads)

    @cuda.jit(device=True)
    def copy_across_k_any(X, words, at, origin, k0, k_end, tid):
        # a bound the compiler cannot count (k0 >= 0), so that the loop stays rolled: unrolled, its
        # steps' places, each a division's remainder, took more registers than a producer has
        for i in range(steps + (k0 >> 62)):
            k, w, inside = task(i, tid)
            row, col = k0 + k, origin + w * width
            inside = inside and row < k_end and col < X.shape[1]
            copy(words, (at + k * (rows + PAD) + w * width,), X, (row if inside else 0, col if inside else 0), inside)

    return copy_across_k_any


@dataclass(frozen=True)
class Copies:
    """How a build copies one operand: in straight-line steps (unrolled_copier) or rolled loops
    (raw_copier), and whether its rows may be 16-byte aligned (`wide`: 16 bytes a copy where they
    are at run time) or are not. Unaligned rows move 4 bytes a copy in loops, and as the whole
    16-byte words that hold them in straight-line steps (shifted_copier)."""

    straight: bool
    wide: bool

    @property
    def shifted(self) -> bool:
        return self.straight and not self.wide


def operand_copier(rows: int, along_k: bool, swizzle: tuple[int, int], threads: int, offset_bits: int,
                   copies: Copies):
    """copy(X, words, at, origin, k0, k_end, tid, wide): raw_copier's, 16 bytes a copy where
    `wide` (X's rows are 16-byte aligned), else 4, as `copies` says; shifted_copier's where its
    rows are unaligned and the steps straight."""
    if copies.shifted:
        return shifted_copier(rows, along_k, threads, offset_bits)
    one = raw_copier(rows, along_k, swizzle, 1, threads, offset_bits)
    if not copies.wide:
        @cuda.jit(device=True)
        def copy_narrow(X, words, at, origin, k0, k_end, tid, wide):
            one(X, words, at, origin, k0, k_end, tid)

        return copy_narrow
    four = (unrolled_copier(rows, along_k, swizzle, threads, offset_bits) if copies.straight
            else raw_copier(rows, along_k, swizzle, 4, threads, offset_bits))

    @cuda.jit(device=True)
    def copy_either(X, words, at, origin, k0, k_end, tid, wide):
        if wide:
            four(X, words, at, origin, k0, k_end, tid)
        else:
            one(X, words, at, origin, k0, k_end, tid)

    return copy_either


def raw_words(rows: int, along_k: bool = False, shifted: bool = False) -> int:
    """float32 of one operand's raw tile of `rows` x BK: rows + PAD per k, or where the rows are
    shifted (shifted_copier) SHIFTED_ROW per row along K or rows + SHIFTED_PAD per k."""
    if not shifted:
        return BK * (rows + PAD)
    return rows * SHIFTED_ROW if along_k else BK * (rows + SHIFTED_PAD)


def skewer(along_k: bool):
    """skew(X, origin) -> (base, ld), which `shift` reads: how far into its row of a shifted raw
    tile (shifted_copier) each row of X's tile at `origin` (its first row along K, else column)
    starts. K-tiles start at multiples of 4, so it is the same for every K-tile."""
    offset = word_offset()

    @cuda.jit(device=True)
    def skew(X, origin):
        ld = X.shape[1]
        return offset(X) + (origin * ld if along_k else origin), ld

    return skew


@cuda.jit(device=True)
def shift(skew, x):
    """Where row x of a shifted raw tile (a row of the tile along K, a k across it) starts in its
    slot: its first element's place in its 16-byte word."""
    return (skew[0] + x * skew[1]) & 3


def shifted_copier(rows: int, along_k: bool, threads: int, offset_bits: int):
    """raw_copier's copy for rows of X that are not 16-byte aligned: each row of the tile along K
    moves as the nine 16-byte words that hold it (each k across it as rows / 4 + 1 words), 16 bytes
    a copy, into a slot of SHIFTED_ROW (rows + SHIFTED_PAD) float32, where it starts `shift`
    elements in. Elements past X's edge or k_end are zeros; those of its first word before the
    row's start (up to 12 bytes, before X's first element on its first row where X itself is not
    16-byte aligned: within the same word of its allocation) and those of its last word past its
    end but inside X are read, and never used."""
    copy, skew_of = word_copy(offset_bits), skewer(along_k)
    if along_k:
        WORDS = BK // 4  # words of an aligned row

        @cuda.jit(device=True)
        def word_along_k(X, words, at, origin, k0, k_end, r, w, skew):
            row = origin + r
            left = k0 - shift(skew, r) + 4 * w  # X's column of the word's first element
            count = min(max(k_end - left, 0), 4) if row < X.shape[0] and k0 < k_end else 0
            # an element of the word inside X: its first, or (the first word) the tile's first
            copy(words, (at + r * SHIFTED_ROW + 4 * w,), X, (row if count else 0, max(left, k0) if count else 0),
                 count)

        task, count = tasks(rows, WORDS, threads)

        @cuda.jit(device=True)
        def step_along_k(i, X, words, at, origin, k0, k_end, tid, skew):
            r, w, inside = task(i, tid)
            if inside:
                word_along_k(X, words, at, origin, k0, k_end, r, w, skew)

        steps = unrolled(step_along_k, count)

        @cuda.jit(device=True)
        def copy_along_k(X, words, at, origin, k0, k_end, tid, wide):
            skew = skew_of(X, origin)
            steps(X, words, at, origin, k0, k_end, tid, skew)
            if tid < rows:
                word_along_k(X, words, at, origin, k0, k_end, tid, WORDS, skew)  # each row's last word

        return copy_along_k
    PER_K = rows // 4  # 16-byte words along one k of an aligned tile
    SLOT = rows + SHIFTED_PAD

    @cuda.jit(device=True)
    def word_across_k(X, words, at, origin, k0, k_end, k, w, skew):
        row = k0 + k
        left = origin - shift(skew, k) + 4 * w  # X's column of the word's first element
        count = min(max(X.shape[1] - left, 0), 4) if row < k_end else 0
        copy(words, (at + k * SLOT + 4 * w,), X, (row if count else 0, max(left, origin) if count else 0), count)

    task, count = tasks(BK, PER_K, threads)

    @cuda.jit(device=True)
    def step_across_k(i, X, words, at, origin, k0, k_end, tid, skew):
        k, w, inside = task(i, tid)
        if inside:
            word_across_k(X, words, at, origin, k0, k_end, k, w, skew)

    steps = unrolled(step_across_k, count)

    @cuda.jit(device=True)
    def copy_across_k(X, words, at, origin, k0, k_end, tid, wide):
        skew = skew_of(X, origin)
        steps(X, words, at, origin, k0, k_end, tid, skew)
        if tid < BK:
            word_across_k(X, words, at, origin, k0, k_end, tid, PER_K, skew)

    return copy_across_k


def unrolled_copier(rows: int, along_k: bool, swizzle: tuple[int, int], threads: int, offset_bits: int):
    """raw_copier's copy of 16 bytes a copy, as straight-line steps whose indices are shifts of the
    thread's index and constants: a thread copies the same words of every K-tile, so what does not
    depend on the tile's k0 can leave the K-loop (the rolled loop divides signed indices anew
    each tile). Tiles whose words do not fill the steps evenly (`even`) take `tasks`' indices."""
    copy = async_copy(4, offset_bits)
    MASK, SHIFT = swizzle
    if along_k:

        @cuda.jit(device=True)
        def word_along_k(X, words, at, origin, k0, k_end, r, w):
            row, col = origin + r, k0 + 4 * w
            inside = row < X.shape[0] and col < k_end
            place = at + r * BK + ((w ^ ((r & MASK) << SHIFT)) << 2)
            copy(words, (place,), X, (row if inside else 0, col if inside else 0), inside)

        task, steps = tasks(rows, BK // 4, threads)

        @cuda.jit(device=True)
        def step_along_k(i, X, words, at, origin, k0, k_end, tid):
            r, w, inside = task(i, tid)
            if inside:
                word_along_k(X, words, at, origin, k0, k_end, r, w)

        return unrolled(step_along_k, steps)

    @cuda.jit(device=True)
    def word_across_k(X, words, at, origin, k0, k_end, k, r):
        row, col = k0 + k, origin + r
        inside = row < k_end and col < X.shape[1]
        copy(words, (at + k * (rows + PAD) + r,), X, (row if inside else 0, col if inside else 0), inside)

    task, steps = tasks(BK, rows // 4, threads)  # 16-byte words along one k of the tile

    @cuda.jit(device=True)
    def step_across_k(i, X, words, at, origin, k0, k_end, tid):
        k, w, inside = task(i, tid)
        if inside:
            word_across_k(X, words, at, origin, k0, k_end, k, w << 2)

    return unrolled(step_across_k, steps)


def b_splitter(bn: int, along_k: bool, a_raw: int, workers: int, straight: bool, shifted: bool = False):
    """split(words, raw, stage, tid, skew): B's raw tile (`a_raw` words after the raw tile of A at
    word `raw`) split into its big and small K-major swizzled tiles at word `stage` (the small one
    bn BK words further), bn * 8 / workers 16-byte words a thread. Where B's rows run along K
    (`along_k`) a warp's threads take the 8 words of 4 rows, else 32 rows of one word, so that
    their reads of the raw tile fall on distinct banks. With `straight`, the words are unrolled
    steps whose places are shifts of the thread's index and constants. With `shifted`, the raw
    tile is shifted_copier's, whose rows start where `skew` (skewer's) says."""
    load1, store4, split = scalar_access(64)[0], vector_store(4), split_tf32(0)
    TASKS, SMALL, SLOT = bn * 8 // workers, bn * BK, bn + SHIFTED_PAD

    @cuda.jit(device=True)
    def b_column(words, raw_b, n, q, i, skew):
        """B[k, n] of the raw tile at column i of split word q (k = 16 (q & 1) + 4 i + q // 2)."""
        k = 16 * (q & 1) + 4 * i + (q >> 1)
        if shifted:
            if along_k:
                return load1(words, (raw_b + n * SHIFTED_ROW + shift(skew, n) + k,))
            return load1(words, (raw_b + k * SLOT + shift(skew, k) + n,))
        if along_k:
            return load1(words, (raw_b + n * BK + ((((k >> 2) ^ (n & 7)) << 2) | (k & 3)),))
        return load1(words, (raw_b + k * (bn + PAD) + n,))

    @cuda.jit(device=True)
    def split_word(words, raw, stage, n, q, skew):
        """Split word q of column n of B's raw tile into its big and small tiles at word `stage`."""
        b0, s0 = split(b_column(words, raw + a_raw, n, q, 0, skew))
        b1, s1 = split(b_column(words, raw + a_raw, n, q, 1, skew))
        b2, s2 = split(b_column(words, raw + a_raw, n, q, 2, skew))
        b3, s3 = split(b_column(words, raw + a_raw, n, q, 3, skew))
        place = stage + n * BK + ((q ^ (n & 7)) << 2)
        store4(words, (place,), (b0, b1, b2, b3))
        store4(words, (place + SMALL,), (s0, s1, s2, s3))

    @cuda.jit(device=True)
    def split_b(words, raw, stage, tid, skew):
        for j in range(TASKS):
            task = tid + j * workers
            if along_k:
                n, q = task >> 3, task & 7
            else:
                q, n = task // bn, task % bn
            split_word(words, raw, stage, n, q, skew)

    task, steps = tasks(bn, 8, workers) if along_k else tasks(8, bn, workers, minor_first=True)

    @cuda.jit(device=True)
    def split_b_word(j, words, raw, stage, tid, skew):
        """split_b's tasks of straight-line step j: column n's word q, n a row of B's raw tile
        (along K) or a column of it (across K)."""
        major, minor, inside = task(j, tid)
        if inside:
            n, q = (major, minor) if along_k else (minor, major)
            split_word(words, raw, stage, n, q, skew)

    return unrolled(split_b_word, steps) if straight else split_b


def a_reader(bm: int, along_k: bool, shifted: bool):
    """a_word(words, raw, r, c, skew) -> A[r, 4 c .. 4 c + 3] of the raw tile at word `raw`: one
    16-byte read where A's rows run along K, four reads of a column each else, and four reads
    where the raw tile is shifted_copier's (whose rows start where `skew`, skewer's, says)."""
    load1, load4 = scalar_access(64)[0], vector_load(4, 64)
    COLUMN, SLOT = bm + PAD, bm + SHIFTED_PAD

    @cuda.jit(device=True)
    def a_word(words, raw, r, c, skew):
        if shifted:
            if along_k:
                at = raw + r * SHIFTED_ROW + shift(skew, r) + 4 * c
                return load1(words, (at,)), load1(words, (at + 1,)), load1(words, (at + 2,)), load1(words, (at + 3,))
            k = 4 * c
            return (load1(words, (raw + k * SLOT + shift(skew, k) + r,)),
                    load1(words, (raw + (k + 1) * SLOT + shift(skew, k + 1) + r,)),
                    load1(words, (raw + (k + 2) * SLOT + shift(skew, k + 2) + r,)),
                    load1(words, (raw + (k + 3) * SLOT + shift(skew, k + 3) + r,)))
        if along_k:
            return load4(words, (raw + r * BK + ((c ^ ((r & 1) << 2)) << 2),))
        at = raw + 4 * c * COLUMN + r
        return load1(words, (at,)), load1(words, (at + COLUMN,)), load1(words, (at + 2 * COLUMN,)), load1(
            words, (at + 3 * COLUMN,))

    return a_word
