"""A warp's float64 matrix multiply-accumulate on the FP64 tensor cores (`mma.sync`).

`mma_f64(shape)` returns mma(a, b, c) -> d for one of SHAPES (M x N x K: sm_80 has m8n8k4, sm_90
the 16-row ones too): the 32 lanes of a warp together compute D = A @ B + C for an M x K A, a
K x N B and M x N C and D, each lane holding the tuples a, b, c and d of the elements that
`fragment` lists for it. With g = lane // 4 and t = lane % 4 (PTX ISA, "Matrix fragments for
mma.m16n8k*" with .f64):
  a[v0 + M/8 * v1] = A[g + 8 v0, t + 4 v1]    b[v] = B[t + 4 v, g]    c[v0 + 2 v1] = C[g + 8 v1, 2 t + v0]
Every lane of the warp must call it together (no divergence), the same number of times.

Under the CUDA simulator, which runs a block's threads as Python threads, each call posts the
lane's a and b and meets the block's other threads at a barrier, so every thread of the block
must call it the same number of times (the kernels of kernels.dmma do); the lanes then compute
their elements of D from what their warp posted, by `fragment`.
"""

from __future__ import annotations

import threading

from numba import config

#: (M, N, K) of each instruction shape
SHAPES = {"m8n8k4": (8, 8, 4), "m16n8k4": (16, 8, 4), "m16n8k8": (16, 8, 8), "m16n8k16": (16, 8, 16)}
WARP = 32


def fragment(shape: str, lane: int) -> dict[str, list[tuple[int, int]]]:
    """(row, column) in A, B and C (and D) of each element a lane holds, in the order it holds them."""
    m, _, k = SHAPES[shape]
    g, t = lane // 4, lane % 4
    return {
        "A": [(g + 8 * v0, t + 4 * v1) for v1 in range(k // 4) for v0 in range(m // 8)],
        "B": [(t + 4 * v, g) for v in range(k // 4)],
        "C": [(g + 8 * v1, 2 * t + v0) for v1 in range(m // 8) for v0 in range(2)],
    }


def counts(shape: str) -> tuple[int, int, int]:
    """Elements of A, B and C a lane holds."""
    m, n, k = SHAPES[shape]
    return m * k // WARP, k * n // WARP, m * n // WARP


def mma_f64(shape: str):
    if shape not in SHAPES:
        raise ValueError(f"unknown mma shape {shape!r}; known: {', '.join(SHAPES)}")
    return _simulated_mma_f64(shape) if config.ENABLE_CUDASIM else _intrinsic_mma_f64(shape)


def _simulated_mma_f64(shape: str):
    m, n, k = SHAPES[shape]
    layouts = [fragment(shape, lane) for lane in range(WARP)]

    def mma(a, b, c):
        thread = threading.current_thread()  # the simulator's BlockThread
        posted = thread._manager.__dict__.setdefault("mmtune_mma_posted", {})
        posted[thread.thread_id] = (a, b)
        thread.syncthreads()
        warp, lane = divmod(thread.thread_id, WARP)
        A, B = [[0.0] * k for _ in range(m)], [[0.0] * n for _ in range(k)]
        for other in range(WARP):
            a_other, b_other = posted[warp * WARP + other]
            for (row, col), value in zip(layouts[other]["A"], a_other):
                A[row][col] = value
            for (row, col), value in zip(layouts[other]["B"], b_other):
                B[row][col] = value
        d = []
        for (row, col), value in zip(layouts[lane]["C"], c):
            for i in range(k):
                value = value + A[row][i] * B[i][col]
            d.append(value)
        thread.syncthreads()  # nobody posts the next call's elements before every lane has read these
        return tuple(d)

    return mma


def _intrinsic_mma_f64(shape: str):
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    A_COUNT, B_COUNT, C_COUNT = counts(shape)
    registers = [C_COUNT, A_COUNT, B_COUNT, C_COUNT]
    groups, first = [], 0
    for count in registers:
        groups.append("{" + ", ".join(f"${first + i}" for i in range(count)) + "}")
        first += count
    INSTRUCTION = f"mma.sync.aligned.{shape}.row.col.f64.f64.f64.f64 {', '.join(groups)};"
    CONSTRAINTS = ",".join(["=d"] * C_COUNT + ["d"] * (A_COUNT + B_COUNT + C_COUNT))

    @intrinsic
    def mma(typingctx, a, b, c):
        if not all(isinstance(x, types.BaseTuple) and len(x) == size for x, size in zip((a, b, c), registers[1:])):
            return None

        def codegen(context, builder, sig, args):
            f64 = ir.DoubleType()
            values = [context.cast(builder, value, kind, types.float64)
                      for arg, tuple_type in zip(args, sig.args)
                      for value, kind in zip(cgutils.unpack_tuple(builder, arg), tuple_type)]
            out = builder.asm(ir.FunctionType(ir.LiteralStructType([f64] * C_COUNT), [f64] * len(values)),
                              INSTRUCTION, CONSTRAINTS, values, False)
            lanes = [builder.extract_value(out, i) for i in range(C_COUNT)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return types.UniTuple(types.float64, C_COUNT)(a, b, c), codegen

    return mma
