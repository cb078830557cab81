"""One thread per element of C, reading its row of A and column of B from global memory (seed 000/001).

Threads along x walk the columns of C, so a warp's reads of B and writes of C are coalesced.
"""

from __future__ import annotations

from numba import cuda

from .base import DeviceLimits, Family, Footprint, Kernel, numba_type, product_shape, tile_origin

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


def footprint(config: dict, dtype: str) -> Footprint:
    """A block of threads, each a k of its element at a step, in few registers and no shared memory."""
    threads = config["block_x"] * config["block_y"]
    return Footprint(tile=(config["block_y"], config["block_x"]), bk=1, threads=threads, registers=32, shared=0)


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    """Indexing is Numba's own, in 64 bits, so `offset_bits` changes nothing here; nor does
    `unaligned`, as every load moves one element."""
    acc_t = numba_type(dtype)
    bx, by = config["block_x"], config["block_y"]
    A_T, B_T = layout[0] == "T", layout[1] == "T"
    origin, dims = tile_origin(by, bx), product_shape(layout)

    def naive_matmul(A, B, C, bias=None):
        M, N, K = dims(A, B)
        row0, col0 = origin(M, N)
        row = row0 + cuda.threadIdx.y
        col = col0 + cuda.threadIdx.x
        if row < M and col < N:
            acc = acc_t(0)
            for i in range(K):
                acc += (A[i, row] if A_T else A[row, i]) * (B[col, i] if B_T else B[i, col])
            if bias is not None:
                acc += bias[col]
            C[row, col] = acc

    return Kernel("naive", dict(config), dtype, naive_matmul, block=(bx, by), tile=(by, bx), layout=layout,
                  offset_bits=offset_bits)


FAMILY = Family(name="naive", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=4,
                footprint=footprint)
