"""Moving a block's tiles of A and B from global to shared memory, for the register-tiled families.

Each of THREADS threads fetches its share of a BM x BK tile of A and a BK x BN tile of B into
registers (zeros off the matrix edges), then stashes them in shared memory, A transposed so that
a thread's values of one k are adjacent. Splitting the two steps lets a kernel fetch the next
tile while it computes on the current one.
"""

from __future__ import annotations

from numba import cuda


def loads_per_thread(bm: int, bn: int, bk: int, threads: int) -> tuple[int, int]:
    return -(-bm * bk // threads), -(-bk * bn // threads)


def tile_movers(bm: int, bn: int, bk: int, threads: int, elem_t):
    """Device functions fetch(A, B, k0, row0, col0, tid, a_next, b_next) and
    stash(sA, sB, tid, a_next, b_next) for one tile geometry."""
    A_TILE, B_TILE = bm * bk, bk * bn
    A_LOADS, B_LOADS = loads_per_thread(bm, bn, bk, threads)
    A_EVEN, B_EVEN = A_TILE % threads == 0, B_TILE % threads == 0
    BK, BN, THREADS = bk, bn, threads

    @cuda.jit(device=True)
    def fetch(A, B, k0, row0, col0, tid, a_next, b_next):
        """Read this thread's share of the A and B tiles at k0 from global memory (0 off the edge)."""
        M, K = A.shape
        N = B.shape[1]
        for i in range(A_LOADS):
            idx = tid + i * THREADS
            r = row0 + idx // BK
            c = k0 + idx % BK
            v = elem_t(0)
            if (A_EVEN or idx < A_TILE) and r < M and c < K:
                v = A[r, c]
            a_next[i] = v
        for i in range(B_LOADS):
            idx = tid + i * THREADS
            r = k0 + idx // BN
            c = col0 + idx % BN
            v = elem_t(0)
            if (B_EVEN or idx < B_TILE) and r < K and c < N:
                v = B[r, c]
            b_next[i] = v

    @cuda.jit(device=True)
    def stash(sA, sB, tid, a_next, b_next):
        """Write the fetched values to shared memory, A transposed."""
        for i in range(A_LOADS):
            idx = tid + i * THREADS
            if A_EVEN or idx < A_TILE:
                sA[idx % BK, idx // BK] = a_next[i]
        for i in range(B_LOADS):
            idx = tid + i * THREADS
            if B_EVEN or idx < B_TILE:
                sB[idx // BN, idx % BN] = b_next[i]

    return fetch, stash
