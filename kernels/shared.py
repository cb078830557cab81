"""Square TPB x TPB tiles of A and B staged in shared memory (the seed's `fast_matmul`, fixed).

The seed works only when N is a multiple of TPB and returns early before `syncthreads`. Here
partial tiles load zeros, every thread reaches every barrier, and only in-range elements are
stored, so any M, N, K works. `pad` extra columns per shared row move column reads of the tiles
to different banks.
"""

from __future__ import annotations

from numba import cuda

from .base import DeviceLimits, Family, Kernel, itemsize, numba_type

SPACE = {
    "tpb": [8, 16, 32],
    "pad": [0, 1, 2],
}
DEFAULT = {"tpb": 16, "pad": 0}


def shared_bytes(config: dict, dtype: str) -> int:
    tpb = config["tpb"]
    return 2 * tpb * (tpb + config["pad"]) * itemsize(dtype)


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    threads = config["tpb"] ** 2
    if threads > limits.max_threads_per_block:
        return f"{threads} threads per block > {limits.max_threads_per_block}"
    smem = shared_bytes(config, dtype)
    if smem > limits.max_shared_per_block:
        return f"{smem} bytes of shared memory > {limits.max_shared_per_block}"
    return None


def build(config: dict, dtype: str) -> Kernel:
    TPB = config["tpb"]
    TILE = (TPB, TPB + config["pad"])
    elem_t = numba_type(dtype)

    def shared_matmul(A, B, C):
        sA = cuda.shared.array(TILE, elem_t)
        sB = cuda.shared.array(TILE, elem_t)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * TPB + ty
        col = cuda.blockIdx.x * TPB + tx
        M, K = A.shape
        N = B.shape[1]
        zero = elem_t(0)
        acc = zero
        for k0 in range(0, K, TPB):
            a_col = k0 + tx
            b_row = k0 + ty
            sA[ty, tx] = A[row, a_col] if row < M and a_col < K else zero
            sB[ty, tx] = B[b_row, col] if b_row < K and col < N else zero
            cuda.syncthreads()
            for i in range(TPB):
                acc += sA[ty, i] * sB[i, tx]
            cuda.syncthreads()
        if row < M and col < N:
            C[row, col] = acc

    return Kernel("shared", dict(config), dtype, shared_matmul, block=(TPB, TPB), tile=(TPB, TPB))


FAMILY = Family("shared", SPACE, DEFAULT, restrict, build, first_guess=3, shared_bytes=shared_bytes)
