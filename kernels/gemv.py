"""Products of a few rows (a batch of one, the rows left by peeling): B streamed once from memory.

The tile families stage B through shared memory for tiles of at least 16 rows, so a product of one
row does sixteen rows' work between barriers. Here a block computes `rows` rows by `cols` columns
of C over its share of K with no barrier until the end: each thread streams its part of B from
global memory straight into registers, `unroll` 16-byte loads in flight before it multiplies them,
and reads A's few values through the cache; then the block sums its threads' partial products
through shared memory in a fixed order. How a thread's part of B lies follows B's layout:
  B's rows in memory (NN, TN): a thread holds VEC adjacent columns of C (VEC = 16 bytes of
      elements) and walks K with a stride of the threads that share those columns;
  B's columns in memory (NT, TT, as in x @ W.T): a thread holds one column of C and reads VEC
      adjacent k's at a time, threads / cols threads per column.
With B's columns in memory and `a_vectors`, a thread reads A as vector loads where A's rows are
aligned: in NT a row's VEC k's a load, and in TT (A transposed) a k's `rows` values, instead of one
scalar a value (in TT strided by A's row across the team); each sum adds the same products in the
same order either way.
Where B's rows (or columns) are not 16-byte aligned a thread's VEC elements come as VEC scalar
loads from one address; past C's last whole group of VEC columns (B's rows in memory) and in K's
last partial group of VEC k's (B's columns in memory), one element at a time with bounds tests.
Parameters:
  rows       rows of C per block; a product of more rows runs ceil(M / rows) tile rows
  cols       columns of C per block
  threads    threads per block
  unroll     loads of B each thread issues before multiplying them
  splits     blocks along K per tile of C: more than 1 adds into C (zeroed first) atomically, so
             the last bits vary from run to run
  streamed   B's 16-byte loads allocate nothing in L1 (kernels.streaming), which
             keeps A's rows there for the threads that read them again; for a B that L2 cannot hold
  a_vectors  A read as vectors where B's columns are in memory (above)
"""

from __future__ import annotations

from numba import cuda

from .base import DeviceLimits, Family, Footprint, Kernel, Product, itemsize, numba_type, product_shape, tile_origin
from .intrinsics import reduce_add, rows_aligned, scalar_access, vector_load, vector_width
from .streaming import streamed_load

SPACE = {
    "rows": [1, 2, 4, 8, 16],
    "cols": [16, 32, 64, 128, 256],
    "threads": [64, 128, 256, 512],
    "unroll": [1, 2, 4],
    "splits": [1, 2, 4, 8, 16, 32, 64, 128],
    "streamed": [False, True],
    "a_vectors": [False, True],
}
DEFAULT = {"rows": 1, "cols": 64, "threads": 256, "unroll": 2, "splits": 1, "streamed": False, "a_vectors": False}


def shared_bytes(config: dict, dtype: str) -> int:
    """The partial products the block sums, for the layout that needs more of them (B's rows in
    memory: every thread holds VEC columns), each row of them one element longer than the tile."""
    team = config["threads"] * vector_width(itemsize(dtype)) // config["cols"]
    return team * config["rows"] * (config["cols"] + 1) * itemsize(dtype)


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    if config["cols"] > config["threads"]:
        return f"{config['cols']} columns need as many threads when B's columns are streamed"
    if config["threads"] > limits.max_threads_per_block:
        return f"{config['threads']} threads is more than a block may have"
    if shared_bytes(config, dtype) > limits.max_shared_per_block:
        return f"summing the partial products takes {shared_bytes(config, dtype)} bytes of shared memory"
    return None


def footprint(config: dict, dtype: str) -> Footprint:
    """A rows x cols tile whose k-step is one k: each block walks its share of K a k at a time."""
    return Footprint(tile=(config["rows"], config["cols"]), bk=1, threads=config["threads"], registers=64,
                     shared=shared_bytes(config, dtype))


#: searched only for products of at most this many rows: a tune of more would time kernels that
#: read B once per few rows
MAX_ROWS = 16


#: float32 and float64 products of at most FEW_ROWS rows stream B once through this family (the
#: rule of autotune.space.guesses.few_rows_guess; studies/step34_gemv.py at 9c578e9, float64 in
#: step 53), its tile by how B lies (layout[1]: "N", its rows in memory; "T", its columns), K
#: split into the most shares (a power of 2) that keep FEW_ROWS_SPLIT_K[dtype][layout[1]] k's
#: each within FEW_ROWS_WAVES blocks per SM
FEW_ROWS = 4


FEW_ROWS_TILES = {"N": {"cols": 64, "threads": 256, "unroll": 4}, "T": {"cols": 16, "threads": 256, "unroll": 4}}


FEW_ROWS_SPLIT_K = {"float32": {"N": 128, "T": 1024}, "float64": {"N": 64, "T": 256}}


FEW_ROWS_WAVES = 8


#: the rule streams B (param "streamed") from this size on: more than the L2 of an H100 or H200
#: holds, so that every call reads it from memory anyway
STREAMED_BYTES = 50 << 20


#: with B's columns in memory the rule reads A as vectors (param "a_vectors") for products of more
#: than one row, and a thread issues this many loads of B at once by dtype and tile rows: A's
#: vectors hold registers that the fewer loads in flight leave (12 tiles timed at 28 shapes,
#: docs/performance.md, step 54)
FEW_ROWS_UNROLL_T = {"float32": {1: 4, 2: 1, 4: 1}, "float64": {1: 4, 2: 4, 4: 1}}


def few_rows_config(product: Product, sm_count: int, deterministic: bool) -> dict | None:
    """The rule's params for a float32 or float64 product of at most FEW_ROWS rows (K not split
    where `deterministic`); None for others."""
    if product.m > FEW_ROWS or product.dtype not in FEW_ROWS_SPLIT_K:
        return None
    b, split_k = product.layout[1], FEW_ROWS_SPLIT_K[product.dtype][product.layout[1]]
    tile = {**FEW_ROWS_TILES[b], "rows": 1 << (product.m - 1).bit_length()}
    tiles = -(-product.n // tile["cols"])
    splits = 1
    while (not deterministic and splits < max(SPACE["splits"]) and product.k >= 2 * splits * split_k
           and tiles * splits * 2 <= FEW_ROWS_WAVES * sm_count):
        splits *= 2
    streamed = product.n * product.k * itemsize(product.dtype) >= STREAMED_BYTES
    if b == "T":
        tile["unroll"] = FEW_ROWS_UNROLL_T[product.dtype][tile["rows"]]
    return {**tile, "splits": splits, "streamed": streamed, "a_vectors": b == "T" and tile["rows"] > 1}


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    """The kernel for `layout`; `unaligned` changes nothing, since the kernel tests alignment
    where it matters."""
    R, BN, THREADS, U, SPLITS = config["rows"], config["cols"], config["threads"], config["unroll"], config["splits"]
    VEC = vector_width(itemsize(dtype))
    A_WIDTH = min(R, VEC)  # elements of a transposed A's row (a k's values) per load
    A_T, B_T = layout[0] == "T", layout[1] == "T"
    ALONG_K = VEC if B_T else 1  # k's one load of a thread covers
    WIDTH = 1 if B_T else VEC  # columns of C a thread holds
    LANES = BN // WIDTH  # threads across the block's columns
    TEAM = THREADS // LANES  # threads sharing a column's K
    STEP = TEAM * ALONG_K  # how far K advances per load of a team
    PARTIAL_SHAPE = (TEAM, R, BN + 1)
    elem_t = numba_type(dtype)
    load, store = scalar_access(offset_bits)
    wide = streamed_load(VEC, offset_bits) if config.get("streamed") else vector_load(VEC, offset_bits)
    grouped = vector_load(VEC, offset_bits, aligned=False)
    a_ks, a_rows = vector_load(VEC, offset_bits), vector_load(A_WIDTH, offset_bits)
    aligned, a_rows_aligned = rows_aligned(VEC), rows_aligned(A_WIDTH)
    add = reduce_add(1, offset_bits)
    origin, dims = tile_origin(R, BN), product_shape(layout)

    @cuda.jit(device=True)
    def a_at(A, row, k):
        return load(A, (k, row)) if A_T else load(A, (row, k))

    def walk_b_rows(group_load):
        """B's rows in memory: a thread's VEC columns (inside C) over its k's, from k by STEP,
        `group_load` reading each group of VEC."""

        @cuda.jit(device=True)
        def walk(A, B, k, k_end, col, row0, rows, acc):
            b = cuda.local.array((U, VEC), elem_t)
            while k + (U - 1) * STEP < k_end:
                for u in range(U):
                    values = group_load(B, (k + u * STEP, col))
                    for j in range(VEC):
                        b[u, j] = values[j]
                for u in range(U):
                    for r in range(R):
                        a = a_at(A, row0 + min(r, rows - 1), k + u * STEP)
                        for j in range(VEC):
                            acc[r, j] += a * b[u, j]
                k += U * STEP
            while k < k_end:
                values = group_load(B, (k, col))
                for r in range(R):
                    a = a_at(A, row0 + min(r, rows - 1), k)
                    for j in range(VEC):
                        acc[r, j] += a * values[j]
                k += STEP

        return walk

    def walk_b_columns(group_load, a_reads=""):
        """B's columns in memory: a thread's column over its whole groups of VEC k's, from k by
        STEP, `group_load` reading each group. A's values one load each, or by `a_reads`: "ks"
        (A's rows aligned) a row's VEC k's a load, "rows" (A transposed, its rows A_WIDTH-aligned,
        the tile's rows all in A) a k's R values as R / A_WIDTH loads."""

        @cuda.jit(device=True)
        def walk(A, B, k, k_end, col, row0, rows, acc):
            b = cuda.local.array((U, VEC), elem_t)
            a = cuda.local.array((VEC, R), elem_t)
            while k + (U - 1) * STEP + VEC <= k_end:
                for u in range(U):
                    values = group_load(B, (col, k + u * STEP))
                    for j in range(VEC):
                        b[u, j] = values[j]
                for u in range(U):
                    if a_reads == "rows":
                        for j in range(VEC):
                            for p in range(R // A_WIDTH):
                                values = a_rows(A, (k + u * STEP + j, row0 + p * A_WIDTH))
                                for q in range(A_WIDTH):
                                    a[j, p * A_WIDTH + q] = values[q]
                    for r in range(R):
                        if a_reads == "ks":
                            ks = a_ks(A, (row0 + min(r, rows - 1), k + u * STEP))
                        for j in range(VEC):
                            if a_reads == "rows":
                                acc[r, 0] += a[j, r] * b[u, j]
                            elif a_reads == "ks":
                                acc[r, 0] += ks[j] * b[u, j]
                            else:
                                acc[r, 0] += a_at(A, row0 + min(r, rows - 1), k + u * STEP + j) * b[u, j]
                k += U * STEP
            while k + VEC <= k_end:
                values = group_load(B, (col, k))
                if a_reads == "rows":
                    for j in range(VEC):
                        for p in range(R // A_WIDTH):
                            parts = a_rows(A, (k + j, row0 + p * A_WIDTH))
                            for q in range(A_WIDTH):
                                a[j, p * A_WIDTH + q] = parts[q]
                for r in range(R):
                    for j in range(VEC):
                        if a_reads == "rows":
                            acc[r, 0] += a[j, r] * values[j]
                        else:
                            acc[r, 0] += a_at(A, row0 + min(r, rows - 1), k + j) * values[j]
                k += STEP

        return walk

    rows_wide, rows_grouped = walk_b_rows(wide), walk_b_rows(grouped)
    columns_wide, columns_grouped = walk_b_columns(wide), walk_b_columns(grouped)
    columns_a_ks, columns_a_rows = walk_b_columns(wide, "ks"), walk_b_columns(wide, "rows")
    A_VECTORS = bool(config.get("a_vectors"))

    @cuda.jit(device=True)
    def edge(A, B, k, k_end, col, N, row0, rows, acc):
        """K from k to k_end one element at a time (by STEP along B's rows, by 1 along B's
        columns), skipping columns past C's edge."""
        while k < k_end:
            for j in range(WIDTH):
                if col + j < N:
                    b = load(B, (col + j, k)) if B_T else load(B, (k, col + j))
                    for r in range(R):
                        acc[r, j] += a_at(A, row0 + min(r, rows - 1), k) * b
            k += 1 if B_T else STEP

    def gemv(A, B, C, bias=None):
        acc = cuda.local.array((R, WIDTH), elem_t)
        partial = cuda.shared.array(PARTIAL_SHAPE, elem_t)
        tid = cuda.threadIdx.x
        M, N, K = dims(A, B)
        row0, col0 = origin(M, N)
        rows = min(R, M - row0)
        if B_T:
            member, lane = tid % TEAM, tid // TEAM
        else:
            lane, member = tid % LANES, tid // LANES
        col = col0 + lane * WIDTH
        share = (K + SPLITS - 1) // SPLITS
        share = (share + ALONG_K - 1) // ALONG_K * ALONG_K  # whole groups of k's, so loads stay aligned
        k_begin = min(K, cuda.blockIdx.y * share)
        k_end = min(K, k_begin + share)
        for r in range(R):
            for j in range(WIDTH):
                acc[r, j] = elem_t(0)
        k = k_begin + member * ALONG_K
        if B_T:
            if col < N:
                if A_VECTORS and A_T and R > 1 and aligned(B) and rows == R and a_rows_aligned(A):
                    columns_a_rows(A, B, k, k_end, col, row0, rows, acc)
                elif A_VECTORS and not A_T and aligned(B) and aligned(A):
                    columns_a_ks(A, B, k, k_end, col, row0, rows, acc)
                elif aligned(B):
                    columns_wide(A, B, k, k_end, col, row0, rows, acc)
                else:
                    columns_grouped(A, B, k, k_end, col, row0, rows, acc)
                if member == 0:  # K's last partial group, which no walk takes
                    edge(A, B, k_begin + (k_end - k_begin) // VEC * VEC, k_end, col, N, row0, rows, acc)
        elif col + VEC <= N:
            if aligned(B):
                rows_wide(A, B, k, k_end, col, row0, rows, acc)
            else:
                rows_grouped(A, B, k, k_end, col, row0, rows, acc)
        else:
            edge(A, B, k, k_end, col, N, row0, rows, acc)
        for r in range(R):
            for j in range(WIDTH):
                partial[member, r, lane * WIDTH + j] = acc[r, j]
        cuda.syncthreads()
        for index in range(tid, R * BN, THREADS):
            r, c = index // BN, index % BN
            total = elem_t(0)
            for t in range(TEAM):
                total += partial[t, r, c]
            if r < rows and col0 + c < N:
                if bias is not None:
                    if cuda.blockIdx.y == 0:  # one split adds it
                        total += bias[col0 + c]
                if SPLITS > 1:
                    add(C, (row0 + r, col0 + c), (total,))
                else:
                    store(C, (row0 + r, col0 + c), total)

    return Kernel("gemv", dict(config), dtype, gemv, block=(THREADS,), tile=(R, BN), splits=SPLITS, layout=layout,
                  offset_bits=offset_bits)


FAMILY = Family(name="gemv", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=5,
                shared_bytes=shared_bytes,
                max_rows=MAX_ROWS, footprint=footprint, few_rows_config=few_rows_config, summary="B streamed once")
