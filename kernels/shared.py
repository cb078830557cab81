"""Square TPB x TPB tiles of A and B staged in shared memory (the seed's `fast_matmul`, fixed).

The seed works only when N is a multiple of TPB and returns early before `syncthreads`. Here
partial tiles load zeros, every thread reaches every barrier, and only in-range elements are
stored, so any M, N, K works. `pad` extra columns per shared row move column reads of the tiles
to different banks.
"""

from __future__ import annotations

from numba import cuda

from .base import DeviceLimits, Family, Footprint, Kernel, itemsize, numba_type, product_shape, tile_origin

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


def footprint(config: dict, dtype: str) -> Footprint:
    """A TPB x TPB tile, TPB k's a step, a thread an element, in few registers."""
    tpb = config["tpb"]
    return Footprint(tile=(tpb, tpb), bk=tpb, threads=tpb**2, registers=32, shared=shared_bytes(config, dtype))


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    """Indexing is Numba's own, in 64 bits, so `offset_bits` changes nothing here; nor does
    `unaligned`, as every load moves one element."""
    TPB = config["tpb"]
    TILE = (TPB, TPB + config["pad"])
    elem_t = numba_type(dtype)
    A_T, B_T = layout[0] == "T", layout[1] == "T"
    origin, dims = tile_origin(TPB, TPB), product_shape(layout)

    def shared_matmul(A, B, C, bias=None):
        sA = cuda.shared.array(TILE, elem_t)
        sB = cuda.shared.array(TILE, elem_t)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        M, N, K = dims(A, B)
        row0, col0 = origin(M, N)
        row = row0 + ty
        col = col0 + tx
        zero = elem_t(0)
        acc = zero
        for k0 in range(0, K, TPB):
            a_col = k0 + tx
            b_row = k0 + ty
            if row < M and a_col < K:
                sA[ty, tx] = A[a_col, row] if A_T else A[row, a_col]
            else:
                sA[ty, tx] = zero
            if b_row < K and col < N:
                sB[ty, tx] = B[col, b_row] if B_T else B[b_row, col]
            else:
                sB[ty, tx] = zero
            cuda.syncthreads()
            for i in range(TPB):
                acc += sA[ty, i] * sB[i, tx]
            cuda.syncthreads()
        if row < M and col < N:
            if bias is not None:
                acc += bias[col]
            C[row, col] = acc

    return Kernel("shared", dict(config), dtype, shared_matmul, block=(TPB, TPB), tile=(TPB, TPB), layout=layout,
                  offset_bits=offset_bits)


FAMILY = Family(name="shared", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=3,
                shared_bytes=shared_bytes,
                footprint=footprint)
