"""How the warpgroup family (kernels.wgmma) copies a tile of A or B into shared memory as it lies
in memory: `cp.async`, 16 bytes a copy where the rows allow, else 4, out-of-range elements
zero-filled, in the family's swizzled or padded raw layouts."""

from __future__ import annotations

from numba import cuda

from . import wgmma_layout as wl
from .intrinsics import async_copy

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


def operand_copier(rows: int, along_k: bool, swizzle: tuple[int, int], narrow: bool, threads: int,
                   offset_bits: int):
    """copy(X, words, at, origin, k0, k_end, tid, wide): raw_copier's, 16 bytes a copy where
    `wide` (X's rows are 16-byte aligned) and the build allows it, else 4."""
    one = raw_copier(rows, along_k, swizzle, 1, threads, offset_bits)
    if narrow:
        @cuda.jit(device=True)
        def copy_narrow(X, words, at, origin, k0, k_end, tid, wide):
            one(X, words, at, origin, k0, k_end, tid)

        return copy_narrow
    four = raw_copier(rows, along_k, swizzle, 4, threads, offset_bits)

    @cuda.jit(device=True)
    def copy_either(X, words, at, origin, k0, k_end, tid, wide):
        if wide:
            four(X, words, at, origin, k0, k_end, tid)
        else:
            one(X, words, at, origin, k0, k_end, tid)

    return copy_either
