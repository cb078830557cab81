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

`split_tf32(x)` -> (big, small): float32 x as two TF32 values, x = big + small / SMALL_SCALE
to 22 of float32's 24 bits, so that three TF32 products (small * big, big * small, big * big)
make a float32 product on the tensor cores (kernels.tf32x3). big is x rounded to TF32 (nearest,
ties away from zero), except that it never overflows: the few finite values that rounding would
take to Inf are truncated instead, and +-Inf's big part is +-1 with its small part +-Inf. small
is the rest of x, scaled by SMALL_SCALE before it is rounded, so that it stays a normal number
(11 significant bits) down to x of 2**-126 instead of 2**-115, and x is held to 2**-147 below
that; the scale leaves every small part under half its x, so that no finite sum of small
products overflows where the products of x do not. Inf thus reaches a sum only through the
small products, with its IEEE sign: Inf * b gives Inf * big(b), whose sign is b's, and every
big part is finite (`split_parts` is the rule, in Python). `split_tf32(0)` holds the small part
unscaled, for a kernel that adds all three products into one sum (kernels.wgmma): then it stays
a normal number down to x of 2**-115 only.

Under the CUDA simulator, which runs a block's threads as Python threads, each call posts the
lane's a and b and meets the block's other threads at a barrier, so every thread of the block
must call it the same number of times (the kernels of kernels.dmma do); the lanes then take
their elements of D from their warp's product, computed once per warp and call from what the
warp posted, by `fragment`.
"""

from __future__ import annotations

import struct
import threading

import numpy as np
from numba import config

#: (M, N, K) of each instruction shape
SHAPES = {"m8n8k4": (8, 8, 4), "m16n8k4": (16, 8, 4), "m16n8k8": (16, 8, 8), "m16n8k16": (16, 8, 16)}
#: the instruction's kind -> the shapes it comes in
KINDS = {"f64": tuple(SHAPES), "tf32": ("m16n8k4", "m16n8k8")}
#: the oldest (major, minor) compute capability whose PTX has each kind's shapes: sm_80 has f64's
#: m8n8k4 and TF32's, sm_90 f64's 16-row shapes (`needs`)
OLDEST_ARCH = {("f64", "m8n8k4"): (8, 0), ("f64", "m16n8k4"): (9, 0), ("f64", "m16n8k8"): (9, 0),
               ("f64", "m16n8k16"): (9, 0), ("tf32", "m16n8k4"): (8, 0), ("tf32", "m16n8k8"): (8, 0)}
#: the data-center GPUs whose tensor cores multiply float64 and TF32 faster than their FFMA units;
#: others (sm_86, sm_89, sm_120) run the instructions at no more than their FFMA rate
FAST_TENSOR_CORES = {"8.0", "9.0", "10.0"}
WARP = 32
#: float32 bits below TF32's 10-bit mantissa, and half of their weight (round to nearest, ties away)
TF32_DROPPED_MASK, TF32_HALF = 0x1FFF, 0x1000
#: a float32 element's small part is held times 2**SMALL_SHIFT (split_tf32)
SMALL_SHIFT = 10
SMALL_SCALE = 2.0**SMALL_SHIFT
#: float32 bits: of the smallest magnitude that rounding to TF32 takes to Inf, of Inf, of a sign,
#: and what subtracting INF_TO_ONE from +-Inf's bits leaves: +-1
ROUNDS_TO_INF, INF_BITS, SIGN_BIT, INF_TO_ONE = 0x7F7FF000, 0x7F800000, 0x80000000, 0x40000000


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


def needs(kind: str, shape: str) -> dict[str, tuple[int, int]]:
    """{the mma.sync of `shape` and `kind`: the oldest compute capability that has it}, or {}
    for a shape the kind lacks (which the families' restrictions turn down)."""
    arch = OLDEST_ARCH.get((kind, shape))
    return {f"mma.sync {shape}": arch} if arch else {}


def mma(shape: str, kind: str = "f64"):
    if shape not in KINDS.get(kind, ()):
        raise ValueError(f"no {kind} mma of shape {shape!r}; known: "
                         + "; ".join(f"{k}: {', '.join(shapes)}" for k, shapes in KINDS.items()))
    return _simulated_mma(shape, kind) if config.ENABLE_CUDASIM else _intrinsic_mma(shape, kind)


def split_tf32(shift: int = SMALL_SHIFT):
    """split(x) -> (big, small), small held times 2**shift (split_parts)."""
    if config.ENABLE_CUDASIM:
        return lambda x: split_parts(x, shift)
    return _intrinsic_split_tf32(shift)


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


def split_parts(x: float, shift: int = SMALL_SHIFT) -> tuple[float, float]:
    """(big, small) of float32 `x` as split_tf32(shift) computes them on the GPU, bit for bit."""
    bits = _bits(x)
    magnitude = bits & ~SIGN_BIT
    if magnitude < ROUNDS_TO_INF:
        bits += TF32_HALF
    bits &= ~TF32_DROPPED_MASK & 0xFFFFFFFF
    if magnitude == INF_BITS:
        bits -= INF_TO_ONE
    big = _float(bits)
    with np.errstate(all="ignore"):  # Inf - 1, NaN - NaN
        rest = (np.float32(x) - np.float32(big)) * np.float32(2.0**shift)  # float32's arithmetic
    return big, _float((_bits(rest) + TF32_HALF) & ~TF32_DROPPED_MASK & 0xFFFFFFFF)


def _bits(x) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def _simulated_mma(shape: str, kind: str):
    m, n, k = SHAPES[shape]
    layouts = [fragment(shape, lane) for lane in range(WARP)]
    # where each lane's elements of A, B and C lie: index arrays over (lane, element)
    a_at, b_at, c_at = (tuple(np.array([layouts[lane][name] for lane in range(WARP)]).transpose(2, 0, 1))
                        for name in ("A", "B", "C"))
    truncated = kind == "tf32"

    def operand(values):
        values = np.asarray(values, np.float32 if truncated else np.float64)
        if truncated:  # the tensor cores read a float32 operand's TF32 bits alone
            values = (values.view(np.uint32) & np.uint32(~TF32_DROPPED_MASK & 0xFFFFFFFF)).view(np.float32)
        return values.astype(np.float64)

    def product(posted, warp):
        """The warp's A @ B, from the elements its lanes posted; IEEE's Inf and NaN throughout."""
        lanes = [posted[warp * WARP + lane] for lane in range(WARP)]
        A, B = np.zeros((m, k)), np.zeros((k, n))
        A[a_at] = operand([a for a, _ in lanes])
        B[b_at] = operand([b for _, b in lanes])
        with np.errstate(all="ignore"):  # Inf * 0 and Inf - Inf are NaN, as on the GPU
            return (A[:, :, None] * B[None, :, :]).sum(axis=1)

    def mma(a, b, c):
        thread = threading.current_thread()  # the simulator's BlockThread
        state = thread._manager.__dict__.setdefault("mmtune_mma", {"calls": {}, "posted": ({}, {}),
                                                                   "products": ({}, {})})
        calls = state["calls"].get(thread.thread_id, 0)
        state["calls"][thread.thread_id] = calls + 1
        # Alternate buffers: a lane posts its next call's elements only after the next barrier,
        # which every lane reaches only once it has read this call's product.
        posted, products = state["posted"][calls % 2], state["products"][calls % 2]
        posted[thread.thread_id] = (a, b)
        thread.syncthreads()
        warp, lane = divmod(thread.thread_id, WARP)
        found = products.get(warp)
        if found is None or found[0] != calls:
            found = products[warp] = (calls, product(posted, warp))
        rows, cols = c_at[0][lane], c_at[1][lane]
        return tuple(float(value) + float(found[1][row, col]) for value, row, col in zip(c, rows, cols))

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


def _intrinsic_split_tf32(shift: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    # split_parts in PTX: the roundings in integer arithmetic on the bits (as ptxas compiles
    # cvt.rna.tf32.f32), the subtraction and the scaling without flushing subnormals to zero
    SPLIT = "\n".join((
        "{", ".reg .pred %near, %inf;", ".reg .b32 %u, %v;", ".reg .f32 %t, %big;",
        "mov.b32 %u, $2;",
        "abs.f32 %t, $2;",
        f"setp.lt.f32 %near, %t, 0f{ROUNDS_TO_INF:08X};",
        f"@%near add.u32 %u, %u, {TF32_HALF};",
        f"and.b32 %u, %u, {~TF32_DROPPED_MASK & 0xFFFFFFFF};",
        f"setp.eq.f32 %inf, %t, 0f{INF_BITS:08X};",
        f"@%inf sub.u32 %u, %u, {INF_TO_ONE};",
        "mov.b32 %big, %u;",
        "sub.rn.f32 %t, $2, %big;",
        *([f"mul.rn.f32 %t, %t, 0f{_bits(2.0**shift):08X};"] if shift else []),
        "mov.b32 %v, %t;",
        f"add.u32 %v, %v, {TF32_HALF};",
        f"and.b32 %v, %v, {~TF32_DROPPED_MASK & 0xFFFFFFFF};",
        "mov.b32 $0, %u;",
        "mov.b32 $1, %v;",
        "}",
    ))

    @intrinsic
    def split(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            pair = ir.LiteralStructType([ir.FloatType(), ir.FloatType()])
            out = builder.asm(ir.FunctionType(pair, [ir.FloatType()]), SPLIT, "=f,=f,f", [args[0]], False)
            parts = [builder.extract_value(out, i) for i in range(2)]
            return context.make_tuple(builder, sig.return_type, parts)

        return types.UniTuple(types.float32, 2)(x), codegen

    return split
