"""Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a) as device functions, each with the
simulator's twin: the four warps of a warpgroup together compute a 64 x N product of TF32 values
into float32 sums that stay in their registers (N/2 a thread, kernels.wgmma_layout.accumulator)
while the instruction runs asynchronously.

`multiply(n)` issues one m64n{n}k8 instruction with A from four registers a thread
(wgmma_layout.a_fragment) and B through a shared-memory descriptor (`descriptor`, a K-major
tile in the 128-byte swizzle): multiply(words, sums, a, b_descriptor, accumulate) -> sums, where
`a` holds the thread's four elements of A and `words` is the block's shared memory as a float32
array (the simulator reads B there; the GPU reads it through the descriptor). Instructions
issued after `fence()` form a group at `commit()`; `wait()` blocks until every group is done,
and only then may the sums be read. `pin(sums)` keeps the compiler from moving arithmetic on
them across those points (CUTLASS's warpgroup_fence_operand). Shared memory written by threads
becomes visible to the instruction after `proxy_fence()` and a barrier.

A block whose warpgroups take roles (one copies and splits, the others multiply) meets at named
barriers: `barrier(count, arrive_only)` gives f(id) for barrier `id` (1 to 15; 0 is
syncthreads') of `count` threads, where a producer arrives and its consumers wait. `registers(n,
more)` moves a warpgroup's registers per thread to `n` (`setmaxnreg`), so that the multiplying
warpgroups hold their sums while the copying one makes do with few.

Under the simulator, which runs a block's threads as Python threads, each call posts the thread's
part of A and meets its warpgroup's other threads at a barrier (each of them must call it the same
number of times); named barriers are counters that release their waiters at `count` arrivals;
the warpgroup's product is then computed once, from A as posted and B as the descriptor finds it
in `words` (wgmma_layout.operand), in float64 and rounded to float32: it checks where data goes,
not how the tensor cores round.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import config, cuda

from . import ptx
from . import wgmma_layout as layout
from .warpgroup_simulator import (
    _identity,
    _nothing,
    _simulated_add,
    _simulated_address,
    _simulated_barrier,
    _simulated_biases,
    _simulated_multiply,
    _simulated_store,
)

#: the instruction's name in a family's instructions(), and the target that has it (sm_90a only)
INSTRUCTION = "wgmma.mma_async (sm_90a)"
TARGET = (9, 0, "a")
#: a descriptor's bits other than its start: leading and stride offsets, and the swizzle
_FIXED_BITS = layout.Descriptor(start=0).bits


@cuda.jit(device=True)
def descriptor(address):
    """The descriptor of the K-major, 128-byte-swizzled tile (or slice) at shared `address`."""
    return np.uint64(_FIXED_BITS) | (np.uint64(address & 0x3FFFF) >> np.uint64(4))


def shared_address():
    """address(array) -> the 32-bit shared-memory address of a shared array's first element
    (0 under the simulator, where descriptors then hold offsets into the array)."""
    return _simulated_address if config.ENABLE_CUDASIM else _intrinsic_address()


def fence():
    return _nothing if config.ENABLE_CUDASIM else ptx.asm("wgmma.fence.sync.aligned;")


def commit():
    return _nothing if config.ENABLE_CUDASIM else ptx.asm("wgmma.commit_group.sync.aligned;")


def wait():
    return _nothing if config.ENABLE_CUDASIM else ptx.asm("wgmma.wait_group.sync.aligned 0;")


def proxy_fence():
    return _nothing if config.ENABLE_CUDASIM else ptx.asm("fence.proxy.async.shared::cta;")


def barrier(count: int, arrive_only: bool):
    """f(id): `bar.arrive id, count` (signal and go on) or `bar.sync id, count` (signal and wait
    until `count` threads have)."""
    if config.ENABLE_CUDASIM:
        return functools.partial(_simulated_barrier, count, arrive_only)
    return _intrinsic_barrier(count, arrive_only)


def registers(count: int, more: bool):
    """The warpgroup's registers per thread become `count`, more or fewer than the launch gave."""
    if config.ENABLE_CUDASIM:
        return _nothing
    return ptx.asm(f"setmaxnreg.{'inc' if more else 'dec'}.sync.aligned.u32 {count};")


def zeros(count: int):
    """zeros() -> a tuple of `count` float32 zeros, held in registers."""
    return (lambda: (np.float32(0),) * count) if config.ENABLE_CUDASIM else _intrinsic_zeros(count)


def add():
    """add(a, b) -> a + b for two float32 tuples of one length, element by element."""
    return _simulated_add if config.ENABLE_CUDASIM else _intrinsic_add()


def biases(n: int, transposed: bool = False):
    """biases(bias, thread, col0) -> bias[col0 + c] for each register of warpgroup `thread`, (r, c)
    = wgmma_layout.accumulator, 0 past the bias's end: the epilogue adds them to the sums. With
    `transposed` (sums of C's transpose: store_sums'), biases(bias, thread, row0) -> bias[row0 + r]."""
    if config.ENABLE_CUDASIM:
        return _simulated_biases(n, transposed)
    return _intrinsic_biases(n, transposed)


def pin():
    """pin(values) -> values, through an empty asm that reads and writes each register."""
    return _identity if config.ENABLE_CUDASIM else _intrinsic_pin()


def multiply(n: int):
    return _simulated_multiply(n) if config.ENABLE_CUDASIM else _intrinsic_multiply(n)


def store_sums(n: int, bits: int, adds: bool, transposed: bool = False):
    """store(C, sums, thread, row0, col0): C[row0 + r, col0 + c] = sums[i] (or += atomically
    with `adds`) for each register i of warpgroup `thread`, (r, c) = wgmma_layout.accumulator,
    where inside C; offsets computed in `bits` bits. With `transposed` the sums are C's transpose
    (a product of B^T and A^T): C[col0 + c, row0 + r] = sums[i]."""
    if config.ENABLE_CUDASIM:
        return _simulated_store(n, adds, transposed)
    return _intrinsic_store(n, bits, adds, transposed)


def _float_tuple(values, count: int | None = None) -> bool:
    from numba import types

    return (isinstance(values, types.UniTuple) and values.dtype == types.float32
            and (count is None or values.count == count))


def _intrinsic_address():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def address(typingctx, array):
        if not isinstance(array, types.Array):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            shared = builder.addrspacecast(data, ir.PointerType(data.type.pointee, 3))
            return builder.ptrtoint(shared, ir.IntType(32))

        return types.int32(array), codegen

    return address


def _intrinsic_barrier(count: int, arrive_only: bool):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    text = f"bar.{'arrive' if arrive_only else 'sync'} $0, {count};"

    @intrinsic
    def meet(typingctx, barrier_id):
        if not isinstance(barrier_id, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            value = context.cast(builder, args[0], sig.args[0], types.int32)
            builder.asm(ir.FunctionType(ir.VoidType(), [ir.IntType(32)]), text, "r,~{memory}", [value], True)
            return context.get_dummy_value()

        return types.none(barrier_id), codegen

    return meet


def _intrinsic_zeros(count: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def zeros(typingctx):
        def codegen(context, builder, sig, args):
            return context.make_tuple(builder, sig.return_type, [ir.Constant(ir.FloatType(), 0.0)] * count)

        return types.UniTuple(types.float32, count)(), codegen

    return zeros


def _intrinsic_add():
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def add(typingctx, a, b):
        if not (_float_tuple(a) and a == b):
            return None

        def codegen(context, builder, sig, args):
            x, y = (cgutils.unpack_tuple(builder, arg) for arg in args)
            return context.make_tuple(builder, sig.return_type, [builder.fadd(u, v) for u, v in zip(x, y)])

        return a(a, b), codegen

    return add


def _intrinsic_biases(n: int, transposed: bool):
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    result = types.UniTuple(types.float32, n // 2)

    @intrinsic
    def biases(typingctx, bias, thread, first):
        if not (isinstance(bias, types.Array) and bias.ndim == 1 and bias.dtype == types.float32):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0])
            t, f0 = (context.cast(builder, args[i], sig.args[i], types.int64) for i in (1, 2))
            if transposed:  # bias[first + r]: the register's row (wgmma_layout.accumulator)
                lane = builder.and_(t, t.type(31))
                start = builder.add(f0, builder.add(builder.shl(builder.lshr(t, t.type(5)), t.type(4)),
                                                    builder.lshr(lane, t.type(2))))
                offsets = [8 * ((i >> 1) & 1) for i in range(n // 2)]
            else:  # bias[first + c]: its column
                start = builder.add(f0, builder.shl(builder.and_(t, t.type(3)), t.type(1)))
                offsets = [8 * (i >> 2) + (i & 1) for i in range(n // 2)]
            loaded = {}
            for offset in offsets:
                if offset not in loaded:
                    index = builder.add(start, t.type(offset))
                    inside = builder.icmp_signed("<", index, cgutils.unpack_tuple(builder, data.shape)[0])
                    value = builder.load(builder.gep(data.data, [builder.select(inside, index, t.type(0))],
                                                     inbounds=True))
                    loaded[offset] = builder.select(inside, value, value.type(0.0))
            return context.make_tuple(builder, result, [loaded[offset] for offset in offsets])

        return result(bias, thread, first), codegen

    return biases


def _intrinsic_pin():
    from llvmlite import ir
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def pin(typingctx, values):
        if not _float_tuple(values):
            return None
        count = values.count

        def codegen(context, builder, sig, args):
            items = cgutils.unpack_tuple(builder, args[0])
            f32 = ir.FloatType()
            constraints = ",".join(["=f"] * count + [str(i) for i in range(count)] + ["~{memory}"])
            out = builder.asm(ir.FunctionType(ir.LiteralStructType([f32] * count), [f32] * count), "", constraints,
                              list(items), True)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(out, i) for i in range(count)])

        return values(values), codegen

    return pin


def _intrinsic_multiply(n: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    count = n // 2
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    sums_out = ", ".join(f"${i}" for i in range(count))
    TEXT = ("{ .reg .pred p; setp.ne.b32 p, $%d, 0; "
            "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 {%s}, {$%d, $%d, $%d, $%d}, $%d, p, 1, 1; }"
            % (count + 5, n, sums_out, count, count + 1, count + 2, count + 3, count + 4))
    CONSTRAINTS = ",".join(["=f"] * count + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(count)])

    @intrinsic
    def multiply(typingctx, words, sums, a, b_descriptor, accumulate):
        if not (_float_tuple(sums, count) and _float_tuple(a, 4)):
            return None

        def codegen(context, builder, sig, args):
            kinds = sig.args
            a = [builder.bitcast(value, i32) for value in cgutils.unpack_tuple(builder, args[2])]
            b = context.cast(builder, args[3], kinds[3], types.uint64)
            scale = context.cast(builder, args[4], kinds[4], types.int32)
            kind = ir.FunctionType(ir.LiteralStructType([f32] * count), [i32] * 4 + [i64, i32] + [f32] * count)
            out = builder.asm(kind, TEXT, CONSTRAINTS, a + [b, scale] + list(cgutils.unpack_tuple(builder, args[1])),
                              True)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(out, i) for i in range(count)])

        return sums(words, sums, a, b_descriptor, accumulate), codegen

    return multiply


def _intrinsic_store(n: int, bits: int, adds: bool, transposed: bool):
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    count = n // 2
    width = ir.IntType(bits)

    @intrinsic
    def store(typingctx, C, sums, thread, row0, col0):
        if not (isinstance(C, types.Array) and _float_tuple(sums, count)):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0])
            rows, cols = cgutils.unpack_tuple(builder, data.shape)
            t, r0, c0 = (context.cast(builder, args[i], sig.args[i], types.int64) for i in (2, 3, 4))
            warp, lane = builder.lshr(t, t.type(5)), builder.and_(t, t.type(31))
            first_row = builder.add(r0, builder.add(builder.shl(warp, t.type(4)), builder.lshr(lane, t.type(2))))
            first_col = builder.add(c0, builder.shl(builder.and_(lane, t.type(3)), t.type(1)))
            values = cgutils.unpack_tuple(builder, args[1])

            def narrow(x):
                return builder.trunc(x, width) if bits == 32 else x

            def put(value, offset):
                if bits == 32:
                    offset = builder.zext(offset, ir.IntType(64))
                pointer = builder.gep(data.data, [offset], inbounds=True)
                if adds:  # NVVM's IR has no atomicrmw fadd
                    target = builder.ptrtoint(builder.addrspacecast(pointer, ir.PointerType(value.type, 1)),
                                              ir.IntType(64))
                    builder.asm(ir.FunctionType(ir.VoidType(), [ir.IntType(64), value.type]),
                                "red.global.add.f32 [$0], $1;", "l,f,~{memory}", [target, value], True)
                else:
                    builder.store(value, pointer)

            if transposed:  # the sums' column is C's row
                for i, value in enumerate(values):
                    row = builder.add(first_col, t.type(8 * (i >> 2) + (i & 1)))
                    col = builder.add(first_row, t.type(8 * ((i >> 1) & 1)))
                    inside = builder.and_(builder.icmp_signed("<", row, rows), builder.icmp_signed("<", col, cols))
                    with builder.if_then(inside, likely=True):
                        put(value, builder.add(builder.mul(narrow(row), narrow(cols)), narrow(col)))
                return context.get_dummy_value()
            for half in (0, 8):
                row = builder.add(first_row, t.type(half))
                row_inside = builder.icmp_signed("<", row, rows)
                row_start = builder.mul(narrow(row), narrow(cols))
                for i, value in enumerate(values):
                    if 8 * ((i >> 1) & 1) != half:
                        continue
                    col = builder.add(first_col, t.type(8 * (i >> 2) + (i & 1)))
                    inside = builder.and_(row_inside, builder.icmp_signed("<", col, cols))
                    with builder.if_then(inside, likely=True):
                        put(value, builder.add(row_start, narrow(col)))
            return context.get_dummy_value()

        return types.none(C, sums, thread, row0, col0), codegen

    return store
