"""The PTX and LLVM behind kernels.intrinsics' device functions, as Numba intrinsics: 32-bit
element offsets, vector loads and stores, `red` adds, `cp.async` copies and dynamic shared arrays.
"""

from __future__ import annotations

import functools

from .rules import VECTOR_BYTES


def _element_pointer(context, builder, kinds: tuple, values: tuple, bits=32):
    """Pointer to array[index] of a C-contiguous array, the offset computed Horner over the shape:
    `kinds` are the array's and the index's Numba types, `values` their LLVM values.

    bits=32: in i32, for global arrays (see the module docstring). bits=64: in i64 marked
    no-wrap, for shared arrays: the backend then folds constant index parts (an unrolled step's
    k, a group's offset) into the load's immediate offset instead of computing each address."""
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils

    (array_type, index_type), (array_value, index_value) = kinds, values
    width = ir.IntType(bits)
    no_wrap = ["nuw", "nsw"] if bits == 64 else ["nuw"]
    data = context.make_array(array_type)(context, builder, value=array_value)
    shape = cgutils.unpack_tuple(builder, data.shape)
    offset = ir.Constant(width, 0)
    for axis, (value, kind) in enumerate(zip(cgutils.unpack_tuple(builder, index_value), index_type)):
        index = context.cast(builder, value, kind, types.int64)
        extent = shape[axis]
        if bits == 32:
            index, extent = builder.trunc(index, width), builder.trunc(extent, width)
        if axis:
            offset = builder.mul(offset, extent, flags=no_wrap)
        offset = builder.add(offset, index, flags=no_wrap)
    if bits == 32:
        # An opaque copy: otherwise NVVM folds the truncations back and does the arithmetic in 64 bits.
        offset = builder.asm(ir.FunctionType(width, [width]), "mov.u32 $0, $1;", "=r,r", [offset], False)
        offset = builder.zext(offset, ir.IntType(64))
    return builder.gep(data.data, [offset], inbounds=True)


def _indexable(array, index) -> bool:
    from numba import types

    return isinstance(array, types.Array) and isinstance(index, types.BaseTuple) and len(index) == array.ndim


def vector_load(width: int, bits: int, aligned: bool):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, array, index):
        if not _indexable(array, index):
            return None
        signature = types.UniTuple(array.dtype, width)(array, index)

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[:2], args[:2], bits=bits)
            element = context.get_value_type(sig.args[0].dtype)
            vector_type = ir.VectorType(element, width)
            size = context.get_abi_sizeof(element)
            alignment = min(VECTOR_BYTES, width * size) if aligned else size
            vector = builder.load(builder.bitcast(pointer, vector_type.as_pointer()), align=alignment)
            lanes = [builder.extract_element(vector, ir.Constant(ir.IntType(32), i)) for i in range(width)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return signature, codegen

    return load


def vector_store(width: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def store(typingctx, array, index, values):
        if not _indexable(array, index) or not isinstance(values, types.BaseTuple) or len(values) != width:
            return None

        def codegen(context, builder, sig, args):
            array_type, index_type, values_type = sig.args
            pointer = _element_pointer(context, builder, (array_type, index_type), (args[0], args[1]), bits=64)
            element = context.get_value_type(array_type.dtype)
            vector = ir.Constant(ir.VectorType(element, width), ir.Undefined)
            lanes = cgutils.unpack_tuple(builder, args[2])
            for i, (lane, kind) in enumerate(zip(lanes, values_type)):
                lane = context.cast(builder, lane, kind, array_type.dtype)
                vector = builder.insert_element(vector, lane, ir.Constant(ir.IntType(32), i))
            builder.store(vector, builder.bitcast(pointer, vector.type.as_pointer()), align=VECTOR_BYTES)
            return context.get_dummy_value()

        return types.none(array, index, values), codegen

    return store


def reduce_add(width: int, bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    PTX_TYPES = {types.float32: ("f32", "f"), types.float64: ("f64", "d"), types.int32: ("s32", "r")}

    @intrinsic
    def add(typingctx, array, index, values):
        if not _indexable(array, index) or not isinstance(values, types.BaseTuple) or len(values) != width:
            return None
        if array.dtype not in PTX_TYPES:
            return None

        def codegen(context, builder, sig, args):
            array_type, index_type, values_type = sig.args
            element = context.get_value_type(array_type.dtype)
            pointer = _element_pointer(context, builder, (array_type, index_type), (args[0], args[1]), bits=bits)
            address = builder.ptrtoint(builder.addrspacecast(pointer, ir.PointerType(element, 1)), ir.IntType(64))
            lanes = [context.cast(builder, lane, kind, array_type.dtype)
                     for lane, kind in zip(cgutils.unpack_tuple(builder, args[2]), values_type)]
            kind, register = PTX_TYPES[array_type.dtype]
            if kind == "f32" and width > 1:
                operands = ", ".join(f"${i + 1}" for i in range(width))
                instruction = f"red.global.add.v{width}.f32 [$0], {{{operands}}};"
            else:  # vector adds exist for float32 alone: one per lane
                size = context.get_abi_sizeof(element)
                instruction = " ".join(f"red.global.add.{kind} [$0+{i * size}], ${i + 1};" for i in range(width))
            builder.asm(
                ir.FunctionType(ir.VoidType(), [ir.IntType(64)] + [element] * width),
                instruction, ",".join(["l"] + [register] * width + ["~{memory}"]), [address] + lanes, True,
            )
            return context.get_dummy_value()

        return types.none(array, index, values), codegen

    return add


def async_copy(width: int, bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def copy(typingctx, dst, dst_index, src, src_index, valid):
        if not _copyable(dst, dst_index, src, src_index):
            return None

        def codegen(context, builder, sig, args):
            element, target, source = _copy_addresses(context, builder, sig, args, bits)
            size = width * context.get_abi_sizeof(element)
            i32 = ir.IntType(32)
            valid = context.cast(builder, args[4], sig.args[4], types.boolean)
            read = builder.select(valid, ir.Constant(i32, size), ir.Constant(i32, 0))
            cache = "cg" if size == VECTOR_BYTES else "ca"  # .cg (L2 only) exists for 16-byte copies alone
            _start_copy(builder, f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;", (target, source, read))
            return context.get_dummy_value()

        return types.none(dst, dst_index, src, src_index, valid), codegen

    return copy


def async_copy_flat(width: int, bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def copy(typingctx, dst, dst_index, src, offset, extra):
        if not (_indexable(dst, dst_index) and isinstance(src, types.Array) and src.dtype == dst.dtype
                and isinstance(offset, types.Integer) and isinstance(extra, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            element, kind = context.get_value_type(sig.args[0].dtype), ir.IntType(bits)
            first, extra = (context.cast(builder, v, t, types.int64) for v, t in zip(args[3:], sig.args[3:]))
            if bits == 32:
                first, extra = builder.trunc(first, kind), builder.trunc(extra, kind)
            # opaque, so that the compiler keeps one offset a tile rather than an induction variable a copy
            first = builder.asm(ir.FunctionType(kind, [kind]), f"mov.b{bits} $0, $1;",
                                "=r,r" if bits == 32 else "=l,l", [first], False)
            offset = builder.add(first, extra)
            offset = builder.zext(offset, ir.IntType(64)) if bits == 32 else offset
            data = context.make_array(sig.args[2])(context, builder, value=args[2]).data
            source = builder.gep(data, [offset], inbounds=True)
            target = _element_pointer(context, builder, sig.args[:2], args[:2], bits=64)
            target = builder.ptrtoint(builder.addrspacecast(target, ir.PointerType(element, 3)), ir.IntType(32))
            source = builder.ptrtoint(builder.addrspacecast(source, ir.PointerType(element, 1)), ir.IntType(64))
            size = width * context.get_abi_sizeof(element)
            cache = "cg" if size == VECTOR_BYTES else "ca"
            _start_copy(builder, f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;",
                        (target, source, ir.Constant(ir.IntType(32), size)))
            return context.get_dummy_value()

        return types.none(dst, dst_index, src, offset, extra), codegen

    return copy


def word_copy(bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def copy(typingctx, dst, dst_index, src, src_index, count):
        if not _copyable(dst, dst_index, src, src_index):
            return None

        def codegen(context, builder, sig, args):
            element, target, source = _copy_addresses(context, builder, sig, args, bits)
            i32 = ir.IntType(32)
            source = builder.and_(source, ir.Constant(ir.IntType(64), -VECTOR_BYTES))
            read = builder.mul(context.cast(builder, args[4], sig.args[4], types.int32),
                               ir.Constant(i32, context.get_abi_sizeof(element)))
            _start_copy(builder, f"cp.async.cg.shared.global [$0], [$1], {VECTOR_BYTES}, $2;", (target, source, read))
            return context.get_dummy_value()

        return types.none(dst, dst_index, src, src_index, count), codegen

    return copy


def _copyable(dst, dst_index, src, src_index) -> bool:
    """Whether a copy's Numba types index two arrays of one dtype."""
    return _indexable(dst, dst_index) and _indexable(src, src_index) and dst.dtype == src.dtype


def _copy_addresses(context, builder, sig, args, bits: int):
    """(element type, dst[dst_index] as a shared i32 address, src[src_index] as a global i64
    address) of a copy's first four arguments. Cast to the shared and global address spaces in
    LLVM, where the backend folds them into the addressing; inline PTX would convert generic
    addresses at run time."""
    from llvmlite import ir

    element = context.get_value_type(sig.args[0].dtype)
    target = _element_pointer(context, builder, sig.args[:2], args[:2], bits=64)
    source = _element_pointer(context, builder, sig.args[2:4], args[2:4], bits=bits)
    target = builder.ptrtoint(builder.addrspacecast(target, ir.PointerType(element, 3)), ir.IntType(32))
    source = builder.ptrtoint(builder.addrspacecast(source, ir.PointerType(element, 1)), ir.IntType(64))
    return element, target, source


def _start_copy(builder, instruction: str, operands: tuple) -> None:
    """`instruction`, a cp.async of (shared i32 address, global i64 address, i32 bytes to read)."""
    from llvmlite import ir

    i32 = ir.IntType(32)
    builder.asm(ir.FunctionType(ir.VoidType(), [i32, ir.IntType(64), i32]), instruction, "r,l,r,~{memory}",
                list(operands), True)


def word_offset():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def offset(typingctx, array):
        if not isinstance(array, types.Array):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0])
            itemsize = context.get_abi_sizeof(context.get_value_type(sig.args[0].dtype))
            i64 = ir.IntType(64)
            address = builder.ptrtoint(data.data, i64)
            within = builder.and_(address, ir.Constant(i64, VECTOR_BYTES - 1))
            return builder.udiv(within, ir.Constant(i64, itemsize))

        return types.int64(array), codegen

    return offset


def asm(instruction: str):
    """A device function of no arguments that is one PTX instruction with side effects."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def emit(typingctx):
        def codegen(context, builder, sig, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), instruction, "~{memory}", [], True)
            return context.get_dummy_value()

        return types.none(), codegen

    return emit


def vector_phase(width: int, bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def phase(typingctx, array, index):
        if not _indexable(array, index):
            return None

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[:2], args[:2], bits=bits)
            size = context.get_abi_sizeof(context.get_value_type(sig.args[0].dtype))
            address = builder.ptrtoint(pointer, ir.IntType(64))
            slot = builder.and_(builder.udiv(address, ir.Constant(address.type, size)), ir.Constant(address.type, width - 1))
            return builder.trunc(slot, ir.IntType(32))

        return types.int32(array, index), codegen

    return phase


def rows_aligned(width: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def aligned(typingctx, array):
        if not isinstance(array, types.Array):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0])
            i64 = ir.IntType(64)
            address = builder.ptrtoint(data.data, i64)
            row = cgutils.unpack_tuple(builder, data.shape)[-1]
            misaligned = builder.or_(
                builder.and_(address, ir.Constant(i64, VECTOR_BYTES - 1)),
                builder.and_(row, ir.Constant(i64, width - 1)),
            )
            return builder.icmp_unsigned("==", misaligned, ir.Constant(i64, 0))

        return types.boolean(array), codegen

    return aligned


@functools.cache
def scalar_access(bits: int):
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, array, index):
        """array[index] with `bits`-bit offset arithmetic."""
        if not _indexable(array, index):
            return None

        def codegen(context, builder, sig, args):
            return builder.load(_element_pointer(context, builder, sig.args[:2], args[:2], bits=bits))

        return array.dtype(array, index), codegen

    @intrinsic
    def store(typingctx, array, index, value):
        """array[index] = value with `bits`-bit offset arithmetic."""
        if not _indexable(array, index):
            return None

        def codegen(context, builder, sig, args):
            array_type, index_type, value_type = sig.args
            value = context.cast(builder, args[2], value_type, array_type.dtype)
            pointer = _element_pointer(context, builder, (array_type, index_type), args[:2], bits=bits)
            builder.store(value, pointer)
            return context.get_dummy_value()

        return types.none(array, index, value), codegen

    return load, store


def dynamic_shared_array(shape: tuple, dtype, offset: int):
    import math

    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    SYMBOL = "_mmtune_dynamic_shared"  # every extern shared array aliases the launch's dynamic memory
    array_type = types.Array(dtype, len(shape), "C")

    @intrinsic
    def tiles(typingctx):
        def codegen(context, builder, sig, args):
            element = context.get_data_type(dtype)
            module = builder.module
            memory = module.globals.get(SYMBOL)
            if memory is None:
                memory = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), 0), SYMBOL, addrspace=3)
                memory.linkage = "external"
                memory.align = VECTOR_BYTES
            itemsize = context.get_abi_sizeof(element)
            start = builder.gep(memory, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), offset * itemsize)],
                                inbounds=True)
            data = builder.addrspacecast(builder.bitcast(start, ir.PointerType(element, 3)), ir.PointerType(element))
            strides, step = [], itemsize
            for extent in reversed(shape):
                strides.append(step)
                step *= extent
            array = context.make_array(array_type)(context, builder)
            context.populate_array(
                array, data=data, shape=[context.get_constant(types.intp, s) for s in shape],
                strides=[context.get_constant(types.intp, s) for s in reversed(strides)],
                itemsize=context.get_constant(types.intp, itemsize), meminfo=None,
            )
            assert math.prod(shape) > 0
            return array._getvalue()

        return array_type(), codegen

    return tiles
