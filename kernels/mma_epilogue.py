"""C from the accumulators of a block of `mma.sync` warps (kernels.dmma): each lane writes its elements of its
warp's tiles, c[v0 + 2 v1] = C[g + 8 v1, 2 t + v0] (kernels.warp_mma), adding them into C where K is split.

A lane holds two adjacent columns of every row it writes. `stores` "elements" writes them one at a time;
"pairs" writes float64's as one 16-byte store (kernels.intrinsics.vector_store, into global memory here) where
C's rows are 16-byte aligned: half the store instructions, a lane's two columns in one piece. The blocks of a
wave end at about the same time, every SM then writing its tile while none of them multiplies; fewer, fuller
stores drain that burst sooner. Products that add into C (split K) keep "elements", and so does
float32 (kernels.tf32x3).
"""

from __future__ import annotations

from numba import cuda

from .base import unrolled
from .intrinsics import reduce_add, rows_aligned, scalar_access, vector_store
from .mma_space import warp_tiles
from .warp_mma import SHAPES, counts


def writer(config: dict, dtype: str, offset_bits: int):
    """write_back(C, bias, M, N, row0, col0, a_row, c_col, acc): the block's tile of C from row0, col0 on, this
    lane's rows from a_row and columns from c_col on within it, from the accumulators `acc` and the bias (added
    into C when K is split, the bias by the first split). A block moved back from C's edge writes from its own
    tile's first row and column on (as `vector`'s)."""
    BM, BN, SPLITS = config["bm"], config["bn"], config["splits"]
    FM, FN = warp_tiles(config)
    IM, IN, _ = SHAPES[config["mma"]]
    C_PER, HALVES = counts(config["mma"])[2], IM // 8
    store_one = scalar_access(offset_bits)[1]
    add_one = reduce_add(1, offset_bits)

    @cuda.jit(device=True)
    def write_elements(C, bias, M, N, row0, col0, a_row, c_col, acc):
        top, left = -(-row0 // BM) * BM, -(-col0 // BN) * BN
        for i in range(FM):
            for v1 in range(HALVES):
                r = row0 + a_row + i * IM + 8 * v1
                if top <= r < M:
                    for j in range(FN):
                        for v0 in range(2):
                            c = col0 + c_col + j * IN + v0
                            value = acc[(i * FN + j) * C_PER + 2 * v1 + v0]
                            if left <= c < N:
                                if bias is not None:
                                    if cuda.blockIdx.y == 0:  # one split adds it
                                        value += bias[c]
                                if SPLITS == 1:
                                    store_one(C, (r, c), value)
                                else:
                                    add_one(C, (r, c), (value,))

    if config.get("stores", "elements") == "elements" or SPLITS > 1 or dtype != "float64":
        return write_elements
    store_pair, aligned = vector_store(2), rows_aligned(2)

    @cuda.jit(device=True)
    def pair(j, i, v1, C, bias, r, N, col, left, acc):
        """Row r's two columns of the warp's tile (i, j), from column col + j * IN on."""
        c, first = col + j * IN, (i * FN + j) * C_PER + 2 * v1
        if left <= c < N:  # and so c + 1 < N: N is even
            if bias is not None:
                store_pair(C, (r, c), (acc[first] + bias[c], acc[first + 1] + bias[c + 1]))
            else:
                store_pair(C, (r, c), (acc[first], acc[first + 1]))

    pair_row = unrolled(pair, FN)  # straight-line code keeps acc in registers

    @cuda.jit(device=True)
    def pair_half(v1, i, C, bias, M, N, row, col, top, left, acc):
        r = row + i * IM + 8 * v1
        if top <= r < M:
            pair_row(i, v1, C, bias, r, N, col, left, acc)

    pair_halves = unrolled(pair_half, HALVES)

    @cuda.jit(device=True)
    def pair_rows(i, C, bias, M, N, row, col, top, left, acc):
        pair_halves(i, C, bias, M, N, row, col, top, left, acc)

    pair_all = unrolled(pair_rows, FM)

    @cuda.jit(device=True)
    def write_pairs(C, bias, M, N, row0, col0, a_row, c_col, acc):
        if aligned(C):
            top, left = -(-row0 // BM) * BM, -(-col0 // BN) * BN
            pair_all(C, bias, M, N, row0 + a_row, col0 + c_col, top, left, acc)
        else:
            write_elements(C, bias, M, N, row0, col0, a_row, c_col, acc)

    return write_pairs
