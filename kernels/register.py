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

from .base import DeviceLimits, Kernel, itemsize, numba_type, registers_per_value
from .tiles import loads_per_thread, tile_movers

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
MAX_ELEMENTS_PER_THREAD = 64
#: registers a thread needs besides its tiles (indices, pointers, loop counters), from ptxas reports
#: of sm_90 compiles. The estimate only screens out configs that would spill heavily: kernels are
#: compiled with launch_bounds, so ptxas itself keeps every accepted config launchable.
OVERHEAD_REGISTERS = 40


def _threads(config: dict) -> int:
    return (config["bm"] // config["tm"]) * (config["bn"] // config["tn"])


def _loads_per_thread(config: dict) -> tuple[int, int]:
    return loads_per_thread(config["bm"], config["bn"], config["bk"], _threads(config))


def shared_bytes(config: dict, dtype: str) -> int:
    words = config["bk"] * (config["bm"] + config["pad"] + config["bn"] + config["pad"])
    return words * itemsize(dtype)


def estimated_registers(config: dict, dtype: str) -> int:
    values = config["tm"] * config["tn"] + config["tm"] + config["tn"]
    if config["prefetch"]:
        values += sum(_loads_per_thread(config))
    return values * registers_per_value(dtype) + OVERHEAD_REGISTERS


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    bm, bn, tm, tn = config["bm"], config["bn"], config["tm"], config["tn"]
    if bm % tm or bn % tn:
        return f"register tile {tm}x{tn} does not divide block tile {bm}x{bn}"
    if tm * tn > MAX_ELEMENTS_PER_THREAD:
        return f"{tm * tn} elements per thread > {MAX_ELEMENTS_PER_THREAD}"
    threads = _threads(config)
    if threads < 32:
        return f"{threads} threads per block is less than one warp"
    if threads > limits.max_threads_per_block:
        return f"{threads} threads per block > {limits.max_threads_per_block}"
    smem = shared_bytes(config, dtype)
    if smem > limits.max_shared_per_block:
        return f"{smem} bytes of shared memory > {limits.max_shared_per_block}"
    regs = estimated_registers(config, dtype)
    budget = min(limits.max_registers_per_thread, limits.max_registers_per_block // threads)
    if regs > budget:
        return f"needs ~{regs} registers per thread; a block of {threads} threads leaves {budget}"
    return None


def build(config: dict, dtype: str) -> Kernel:
    BM, BN, BK = config["bm"], config["bn"], config["bk"]
    TM, TN = config["tm"], config["tn"]
    PREFETCH = bool(config["prefetch"])
    TX, TY = BN // TN, BM // TM  # threads along the columns and rows of the tile
    THREADS = TX * TY
    A_LOADS, B_LOADS = _loads_per_thread(config)
    STRIDED = config["mapping"] == "strided"
    ROW_STEP = TY if STRIDED else 1  # distance between a thread's rows of C
    COL_STEP = TX if STRIDED else 1
    SA_SHAPE = (BK, BM + config["pad"])
    SB_SHAPE = (BK, BN + config["pad"])
    ACC_SHAPE = (TM, TN)
    elem_t = numba_type(dtype)

    fetch, stash = tile_movers(BM, BN, BK, THREADS, elem_t)

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

    def register_matmul(A, B, C):
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
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        row_base = ty * (1 if STRIDED else TM)
        col_base = tx * (1 if STRIDED else TN)
        M, K = A.shape
        N = B.shape[1]
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
                        C[r, c] = acc[i, j]

    return Kernel("register", dict(config), dtype, register_matmul, block=(THREADS,), tile=(BM, BN))
