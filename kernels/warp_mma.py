"""A warp's matrix multiply-accumulate on the tensor cores (`mma.sync`): float64, and TF32 into float32.

`mma(shape, kind)` returns mma(a, b, c) -> d for one of SHAPES (M x N x K) that KINDS lists for
the kind: "f64" multiplies float64 on the FP64 tensor cores (sm_80 has m8n8k4, sm_90 the 16-row
shapes too); "tf32" multiplies TF32 values (float32 with 10 mantissa bits, `split_tf32`) and adds
in float32 (sm_80). The 32 lanes of a warp together compute D = A @ B + C for an M x K A, a
K x N B and M x N C and D, each lane holding the tuples a, b, c and d of the elements that
`fragment` lists for it. With g = lane // 4 and t = lane % 4 (PTX ISA, "Matrix fragments for
mma.m16n8k*"; .tf32's m16n8k4 and m16n8k8 lie as .f64's):
  a[v0 + M/8 * v1] = A[g + 8 v0, t + 4 v1]    b[v] = B[t + 4 v, g]    c[v0 + 2 v1] = C[g + 8 v1, 2 t + v0]
Every lane of the warp must call it together (no divergence), the same number of times.

`split_tf32(x)` -> (big, small): x rounded to TF32 and the rest of x rounded to TF32, so that
big + small holds x to 22 of float32's 24 bits: three TF32 products (small * big, big * small,
big * big) make a float32 product on the tensor cores (kernels.tf32x3).

Under the CUDA simulator, which runs a block's threads as Python threads, each call posts the
lane's a and b and meets the block's other threads at a barrier, so every thread of the block
must call it the same number of times (the kernels of kernels.dmma do); the lanes then compute
their elements of D from what their warp posted, by `fragment`.
"""

from __future__ import annotations

import struct
import threading

from numba import config

#: (M, N, K) of each instruction shape
SHAPES = {"m8n8k4": (8, 8, 4), "m16n8k4": (16, 8, 4), "m16n8k8": (16, 8, 8), "m16n8k16": (16, 8, 16)}
#: the instruction's kind -> the shapes it comes in
KINDS = {"f64": tuple(SHAPES), "tf32": ("m16n8k4", "m16n8k8")}
WARP = 32
#: float32 bits below TF32's 10-bit mantissa, and half of their weight (round to nearest, ties away)
TF32_DROPPED_MASK, TF32_HALF = 0x1FFF, 0x1000


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


def mma(shape: str, kind: str = "f64"):
    if shape not in KINDS.get(kind, ()):
        raise ValueError(f"no {kind} mma of shape {shape!r}; known: "
                         + "; ".join(f"{k}: {', '.join(shapes)}" for k, shapes in KINDS.items()))
    return _simulated_mma(shape, kind) if config.ENABLE_CUDASIM else _intrinsic_mma(shape, kind)


def split_tf32():
    return _simulated_split_tf32 if config.ENABLE_CUDASIM else _intrinsic_split_tf32()


def round_tf32(x: float) -> float:
    """float32 `x` rounded to TF32 as `cvt.rna.tf32.f32` rounds it (nearest, ties away from zero)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if (bits >> 23) & 0xFF != 0xFF:  # Inf and NaN stay as they are
        bits = (bits + TF32_HALF) & ~TF32_DROPPED_MASK & 0xFFFFFFFF
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def truncated_tf32(x: float) -> float:
    """What the tensor cores read of a float32 operand of a TF32 mma: its TF32 bits alone."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0] & ~TF32_DROPPED_MASK & 0xFFFFFFFF
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _simulated_split_tf32(x):
    big = round_tf32(float(x))
    rest = struct.unpack("<f", struct.pack("<f", float(x) - big))[0]  # float32's subtraction
    return big, round_tf32(rest)


def _simulated_mma(shape: str, kind: str):
    m, n, k = SHAPES[shape]
    layouts = [fragment(shape, lane) for lane in range(WARP)]
    operand = truncated_tf32 if kind == "tf32" else float

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
                A[row][col] = operand(value)
            for (row, col), value in zip(layouts[other]["B"], b_other):
                B[row][col] = operand(value)
        d = []
        for (row, col), value in zip(layouts[lane]["C"], c):
            for i in range(k):
                value = value + A[row][i] * B[i][col]
            d.append(value)
        thread.syncthreads()  # nobody posts the next call's elements before every lane has read these
        return tuple(d)

    return mma


def _intrinsic_mma(shape: str, kind: str):
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
    if kind == "f64":
        TYPES, element, numba_element, operand, SUM, OPERAND = (
            "f64.f64.f64.f64", ir.DoubleType(), types.float64, ir.DoubleType(), "d", "d")
    else:  # TF32 operands go in .b32 registers, the float32 sums in .f32 ones
        TYPES, element, numba_element, operand, SUM, OPERAND = (
            "f32.tf32.tf32.f32", ir.FloatType(), types.float32, ir.IntType(32), "f", "r")
    INSTRUCTION = f"mma.sync.aligned.{shape}.row.col.{TYPES} {', '.join(groups)};"
    CONSTRAINTS = ",".join([f"={SUM}"] * C_COUNT + [OPERAND] * (A_COUNT + B_COUNT) + [SUM] * C_COUNT)

    @intrinsic
    def mma(typingctx, a, b, c):
        if not all(isinstance(x, types.BaseTuple) and len(x) == size for x, size in zip((a, b, c), registers[1:])):
            return None

        def codegen(context, builder, sig, args):
            values = [context.cast(builder, value, kind, numba_element)
                      for arg, tuple_type in zip(args, sig.args)
                      for value, kind in zip(cgutils.unpack_tuple(builder, arg), tuple_type)]
            operands = A_COUNT + B_COUNT
            values = [builder.bitcast(v, operand) for v in values[:operands]] + values[operands:]
            out = builder.asm(ir.FunctionType(ir.LiteralStructType([element] * C_COUNT), [v.type for v in values]),
                              INSTRUCTION, CONSTRAINTS, values, False)
            lanes = [builder.extract_value(out, i) for i in range(C_COUNT)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return types.UniTuple(numba_element, C_COUNT)(a, b, c), codegen

    return mma


def _intrinsic_split_tf32():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def split(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            def rounded(value):
                bits = builder.asm(ir.FunctionType(ir.IntType(32), [ir.FloatType()]), "cvt.rna.tf32.f32 $0, $1;",
                                   "=r,f", [value], False)
                return builder.bitcast(bits, ir.FloatType())

            big = rounded(args[0])
            small = rounded(builder.fsub(args[0], big))
            return context.make_tuple(builder, sig.return_type, [big, small])

        return types.UniTuple(types.float32, 2)(x), codegen

    return split
