"""One thread per element of C, reading its row of A and column of B from global memory (seed 000/001).

Threads along x walk the columns of C, so a warp's reads of B and writes of C are coalesced.
"""

from __future__ import annotations

from numba import cuda

from .base import DeviceLimits, Family, Kernel, numba_type

SPACE = {
    "block_x": [8, 16, 32, 64, 128, 256],
    "block_y": [1, 2, 4, 8, 16, 32],
}
DEFAULT = {"block_x": 32, "block_y": 8}


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    threads = config["block_x"] * config["block_y"]
    if threads > limits.max_threads_per_block:
        return f"{threads} threads per block > {limits.max_threads_per_block}"
    return None


def build(config: dict, dtype: str) -> Kernel:
    acc_t = numba_type(dtype)

    def naive_matmul(A, B, C):
        col, row = cuda.grid(2)
        if row < C.shape[0] and col < C.shape[1]:
            acc = acc_t(0)
            for i in range(A.shape[1]):
                acc += A[row, i] * B[i, col]
            C[row, col] = acc

    bx, by = config["block_x"], config["block_y"]
    return Kernel("naive", dict(config), dtype, naive_matmul, block=(bx, by), tile=(by, bx))


FAMILY = Family("naive", SPACE, DEFAULT, restrict, build, first_guess=4)
