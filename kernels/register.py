"""Register tiling: a block computes a BM x BN tile of C, each thread a TM x TN sub-tile in registers.

Per k-step the block stages a BM x BK slice of A (stored transposed, so a thread's TM values for
one k are a row of shared memory) and a BK x BN slice of B in shared memory; each thread then does
TM*TN multiply-adds per pair of values it reads. Parameters:
  bm, bn, bk   block tile
  tm, tn       register tile ("elements per thread" = tm * tn)
  pad          extra columns per shared row, against bank conflicts on the transposed store of A
  mapping      "contiguous": a thread owns rows ty*TM .. ty*TM+TM-1 (and likewise columns);
               "strided": rows ty, ty+TY, ...; neighbouring threads then read neighbouring
               shared words (no bank conflicts) and write neighbouring elements of C (coalesced)
  prefetch     read the next global tile into registers before computing on the current one,
               so global latency hides behind the multiply-adds
Partial tiles load zeros and only in-range elements are stored, so any M, N, K works.
"""

from __future__ import annotations

from numba import cuda

from .base import DeviceLimits, Family, Footprint, Kernel, itemsize, numba_type, product_shape, tile_origin
from .tiles import Movement, estimated_registers, loads_per_thread, restrict_tiling, threads_per_block, tile_movers

SPACE = {
    "bm": [16, 32, 64, 128, 256],
    "bn": [16, 32, 64, 128, 256],
    "bk": [4, 8, 16, 32],
    "tm": [1, 2, 4, 8, 16],
    "tn": [1, 2, 4, 8, 16],
    "pad": [0, 1, 4],
    "mapping": ["contiguous", "strided"],
    "prefetch": [False, True],
}
DEFAULT = {
    "bm": 64, "bn": 64, "bk": 8, "tm": 4, "tn": 4,
    "pad": 4, "mapping": "strided", "prefetch": True,
}


def shared_bytes(config: dict, dtype: str) -> int:
    words = config["bk"] * (config["bm"] + config["pad"] + config["bn"] + config["pad"])
    return words * itemsize(dtype)


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    return restrict_tiling(config, dtype, limits, shared_bytes(config, dtype))


def footprint(config: dict, dtype: str) -> Footprint:
    """A block's tile, threads, registers (at least 32: ptxas's floor in practice) and shared tiles."""
    return Footprint(tile=(config["bm"], config["bn"]), bk=config["bk"], threads=threads_per_block(config),
                     registers=max(estimated_registers(config, dtype), 32), shared=shared_bytes(config, dtype))


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    BM, BN, BK = config["bm"], config["bn"], config["bk"]
    TM, TN = config["tm"], config["tn"]
    PREFETCH = bool(config["prefetch"])
    TX, TY = BN // TN, BM // TM  # threads along the columns and rows of the tile
    THREADS = TX * TY
    A_LOADS, B_LOADS = loads_per_thread(BM, BN, BK, THREADS)
    STRIDED = config["mapping"] == "strided"
    ROW_STEP = TY if STRIDED else 1  # distance between a thread's rows of C
    COL_STEP = TX if STRIDED else 1
    SA_SHAPE = (BK, BM + config["pad"])
    SB_SHAPE = (BK, BN + config["pad"])
    ACC_SHAPE = (TM, TN)
    elem_t = numba_type(dtype)

    fetch, stash = tile_movers(BM, BN, BK, elem_t, Movement(THREADS, layout=layout, offset_bits=offset_bits))
    origin, dims = tile_origin(BM, BN), product_shape(layout)

    @cuda.jit(device=True)
    def multiply_tile(sA, sB, row_base, col_base, a_frag, b_frag, acc):
        for kk in range(BK):
            for i in range(TM):
                a_frag[i] = sA[kk, row_base + i * ROW_STEP]
            for j in range(TN):
                b_frag[j] = sB[kk, col_base + j * COL_STEP]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a_frag[i] * b_frag[j]

    def register_matmul(A, B, C, bias=None):
        sA = cuda.shared.array(SA_SHAPE, elem_t)
        sB = cuda.shared.array(SB_SHAPE, elem_t)
        acc = cuda.local.array(ACC_SHAPE, elem_t)
        a_frag = cuda.local.array(TM, elem_t)
        b_frag = cuda.local.array(TN, elem_t)
        a_next = cuda.local.array(A_LOADS, elem_t)
        b_next = cuda.local.array(B_LOADS, elem_t)
        tid = cuda.threadIdx.x
        tx = tid % TX
        ty = tid // TX
        M, N, K = dims(A, B)
        row0, col0 = origin(M, N)
        row_base = ty * (1 if STRIDED else TM)
        col_base = tx * (1 if STRIDED else TN)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = elem_t(0)

        if PREFETCH:
            fetch(A, B, 0, row0, col0, tid, a_next, b_next)
            stash(sA, sB, tid, a_next, b_next)
            cuda.syncthreads()
            for k0 in range(0, K, BK):
                has_next = k0 + BK < K
                if has_next:
                    fetch(A, B, k0 + BK, row0, col0, tid, a_next, b_next)
                multiply_tile(sA, sB, row_base, col_base, a_frag, b_frag, acc)
                cuda.syncthreads()
                if has_next:
                    stash(sA, sB, tid, a_next, b_next)
                    cuda.syncthreads()
        else:
            for k0 in range(0, K, BK):
                fetch(A, B, k0, row0, col0, tid, a_next, b_next)
                stash(sA, sB, tid, a_next, b_next)
                cuda.syncthreads()
                multiply_tile(sA, sB, row_base, col_base, a_frag, b_frag, acc)
                cuda.syncthreads()

        for i in range(TM):
            r = row0 + row_base + i * ROW_STEP
            if r < M:
                for j in range(TN):
                    c = col0 + col_base + j * COL_STEP
                    if c < N:
                        if bias is not None:
                            acc[i, j] += bias[c]
                        C[r, c] = acc[i, j]

    return Kernel("register", dict(config), dtype, register_matmul, block=(THREADS,), tile=(BM, BN), layout=layout,
                  offset_bits=offset_bits)


#: small tiles that suit any shape and every dtype: the default a lookup falls back to
FAMILY = Family(name="register", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=2,
                shared_bytes=shared_bytes,
                footprint=footprint, fallback=True)
