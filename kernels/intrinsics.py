"""Array access Numba does not emit by itself: 32-bit index arithmetic and wide loads.

Numba indexes with 64-bit signed integers and wraps negative indices around, which costs a shift,
a mask and 64-bit multiplies per access (visible in the SASS of a tile fetch). `load` and `store`
compute the element offset of a C-contiguous array in unsigned 32-bit arithmetic with no
wraparound, so the caller guarantees every index is in range and the array has < 2**32 elements;
kernels built with offset_bits=64 (for larger operands) compute it in 64 bits instead. `vector_load` reads `width` adjacent elements
as one LLVM vector (<4 x float>, <2 x double>), which compiles to one 16-byte load
(`ld.shared.v4.f32`, `ld.global.v4.f32`, `ld.shared.v2.f64`...) and `vector_store` writes them
so; the caller guarantees 16-byte alignment, which `rows_aligned` checks for a whole array.
`reduce_add` adds into global memory atomically without reading back (`red`), 4 float32 lanes
at a time, and `reduce_add_unaligned` 4 lanes at any 4-byte alignment, as the widest `red`s the
address allows (`vector_phase`).
`async_copy` moves elements from global to shared memory without staging them in registers
(`cp.async`, sm_80 and later), completed by `async_commit` and `async_wait` and a barrier.
`dynamic_shared_array` carves a fixed-shape array out of the block's dynamic shared memory, which
a launch may size past the 48 KB that static shared arrays are limited to.
Under the CUDA simulator (which runs kernels as Python) the same calls are plain indexing, and
copies complete at once.
"""

from __future__ import annotations

import functools

from numba import config, cuda

VECTOR_BYTES = 16
#: what to pass as `alignment=` to cuda.shared.array: the simulator accepts only None
SHARED_ALIGNMENT = None if config.ENABLE_CUDASIM else VECTOR_BYTES
#: arrays must have fewer elements than this for 32-bit offsets
MAX_ELEMENTS = 2**32


def vector_width(itemsize: int) -> int:
    return VECTOR_BYTES // itemsize


def vector_load(width: int, bits: int = 64, aligned: bool = True):
    """load(array, index) -> a `width`-tuple of array[index[:-1] + (index[-1] + i,)]. The offset
    is computed in `bits` bits (see `_element_pointer`: 64 for shared arrays, 32 for global).
    aligned=False: the elements need only their own alignment, and the load compiles to `width`
    scalar loads at immediate offsets from one address."""
    if config.ENABLE_CUDASIM:
        return _simulated_vector_load(width)
    return _intrinsic_vector_load(width, bits, aligned)


def vector_store(width: int):
    """store(array, index, values): array[index[:-1] + (index[-1] + i,)] = values[i], one
    16-byte store into a shared array."""
    return _simulated_vector_store(width) if config.ENABLE_CUDASIM else _intrinsic_vector_store(width)


def reduce_add(width: int, bits: int = 32):
    """add(array, index, values): array[index[:-1] + (index[-1] + i,)] += values[i] atomically
    for i < `width`, into a global array, reading nothing back: float32 lanes as one vector
    `red.global.add` (sm_90 and later; the caller guarantees 16-byte alignment), float64 and
    int32 ones one `red` a lane. The offset is computed in `bits` bits."""
    return _simulated_reduce_add(width) if config.ENABLE_CUDASIM else _intrinsic_reduce_add(width, bits)


def reduce_add_unaligned(bits: int = 32):
    """add(array, index, values): `reduce_add(4)` of 4 float32 lanes whose address need only be
    4-byte aligned, as the widest `red`s it allows: one 16-byte add where the first lane starts a
    16-byte word, two 8-byte adds where it starts the word's second half, else a 4-byte add, an
    8-byte one and a 4-byte one (float32 rows of any length; sm_90 and later)."""
    phase_of = vector_phase(4, bits)
    one, two, four = reduce_add(1, bits), reduce_add(2, bits), reduce_add(4, bits)

    @cuda.jit(device=True)
    def add(array, index, values):
        head, last = index[:-1], index[-1]
        phase = phase_of(array, index)
        if phase == 0:
            four(array, index, values)
        elif phase == 2:
            two(array, index, (values[0], values[1]))
            two(array, head + (last + 2,), (values[2], values[3]))
        else:
            one(array, index, (values[0],))
            two(array, head + (last + 1,), (values[1], values[2]))
            one(array, head + (last + 3,), (values[3],))

    return add


def vector_phase(width: int, bits: int = 32):
    """phase(array, index) -> which of the `width` element slots of its 16-byte word array[index]
    occupies: 0 where a vector access of `width` elements may start."""
    return _simulated_vector_phase(width) if config.ENABLE_CUDASIM else _intrinsic_vector_phase(width, bits)


def rows_aligned(width: int):
    """aligned(array) -> whether every row of a C-contiguous array starts on a 16-byte boundary
    (its data pointer is aligned and its rows hold a multiple of `width` elements), so that
    `vector_load` may read it anywhere at a column that is a multiple of `width`."""
    return _simulated_rows_aligned(width) if config.ENABLE_CUDASIM else _intrinsic_rows_aligned(width)


def async_copy(width: int, bits: int = 32):
    """copy(dst, dst_index, src, src_index, valid): start copying `width` adjacent elements of the
    global array src at src_index into the shared array dst at dst_index (both 16-byte aligned
    when width > 1); when not `valid`, write zeros and read nothing. The copy is in flight until
    `async_wait` says its group is done; other threads see it after a barrier. The source offset
    is computed in `bits` bits."""
    return _simulated_async_copy(width) if config.ENABLE_CUDASIM else _intrinsic_async_copy(width, bits)


def scalar_access(bits: int = 32):
    """(load, store): load(array, index) -> array[index] and store(array, index, value), the
    offset computed in `bits` bits."""
    if config.ENABLE_CUDASIM:
        return _simulated_load, _simulated_store
    return _intrinsic_scalar_access(bits)


def dynamic_shared_array(shape: tuple, dtype, offset: int = 0):
    """A device function f() -> a C-contiguous `shape` array of `dtype` (a Numba type) at element
    `offset` of the block's dynamic shared memory, which the launch must size to hold it. Unlike
    slicing and reshaping `cuda.shared.array(0, dtype)`, which go through generic addresses and a
    runtime call, the array's address stays a known shared-memory one, so its loads stay
    `ld.shared` with immediate offsets."""
    if config.ENABLE_CUDASIM:
        return _simulated_dynamic_shared_array(shape, dtype, offset)
    return _intrinsic_dynamic_shared_array(tuple(shape), dtype, offset)


def async_commit():
    """commit(): close the group of copies this thread started since the last commit."""
    return _simulated_nothing if config.ENABLE_CUDASIM else _intrinsic_asm("cp.async.commit_group;")


def async_wait(pending: int):
    """wait(): block until at most `pending` of this thread's committed groups are in flight."""
    return _simulated_nothing if config.ENABLE_CUDASIM else _intrinsic_asm(f"cp.async.wait_group {pending};")


@cuda.jit(device=True)
def anywhere(array):
    """In place of `rows_aligned`'s test where the accesses need no alignment."""
    return True


def _simulated_async_copy(width: int):
    def copy(dst, dst_index, src, src_index, valid):
        head, last = dst_index[:-1], dst_index[-1]
        source_head, source_last = src_index[:-1], src_index[-1]
        for i in range(width):
            dst[head + (last + i,)] = src[source_head + (source_last + i,)] if valid else 0

    return copy


def _simulated_nothing():
    pass


def _simulated_dynamic_shared_array(shape: tuple, dtype, offset: int):
    import math

    SHAPE, START, STOP = shape, offset, offset + math.prod(shape)

    @cuda.jit(device=True)
    def tiles():
        return cuda.shared.array(0, dtype)[START:STOP].reshape(SHAPE)

    return tiles


def _simulated_vector_load(width: int):
    def load(array, index):
        head, last = index[:-1], index[-1]
        return tuple(array[head + (last + i,)] for i in range(width))

    return load


def _simulated_vector_store(width: int):
    def store(array, index, values):
        head, last = index[:-1], index[-1]
        for i in range(width):
            array[head + (last + i,)] = values[i]

    return store


def _simulated_reduce_add(width: int):
    import threading

    lock = threading.Lock()  # the simulator runs a block's threads as Python threads

    def add(array, index, values):
        head, last = index[:-1], index[-1]
        if width > 1 and array.dtype == "float32":  # one vector `red`, which faults unless aligned to its size
            address = _simulated_address(array, index)
            assert address % (width * array.itemsize) == 0, f"misaligned {width}-lane add at {address:#x}"
        with lock:
            for i in range(width):
                array[head + (last + i,)] += values[i]

    return add


def _simulated_address(array, index) -> int:
    return array.__array_interface__["data"][0] + sum(i * s for i, s in zip(index, array.strides))


def _simulated_vector_phase(width: int):
    def phase(array, index):
        return _simulated_address(array, index) // array.itemsize % width

    return phase


def _simulated_rows_aligned(width: int):
    def aligned(array):
        address, row = array.__array_interface__["data"][0], array.shape[len(array.shape) - 1]
        return address % VECTOR_BYTES == 0 and row % width == 0

    return aligned


def _simulated_load(array, index):
    return array[index]


def _simulated_store(array, index, value):
    array[index] = value


def _element_pointer(context, builder, array_type, array_value, index_type, index_value, bits=32):
    """Pointer to array[index] of a C-contiguous array, the offset computed Horner over the shape.

    bits=32: in i32, for global arrays (see the module docstring). bits=64: in i64 marked
    no-wrap, for shared arrays: the backend then folds constant index parts (an unrolled step's
    k, a group's offset) into the load's immediate offset instead of computing each address."""
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils

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


def _intrinsic_vector_load(width: int, bits: int, aligned: bool):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, array, index):
        if not _indexable(array, index):
            return None
        signature = types.UniTuple(array.dtype, width)(array, index)

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1], bits=bits)
            element = context.get_value_type(sig.args[0].dtype)
            vector_type = ir.VectorType(element, width)
            alignment = VECTOR_BYTES if aligned else context.get_abi_sizeof(element)
            vector = builder.load(builder.bitcast(pointer, vector_type.as_pointer()), align=alignment)
            lanes = [builder.extract_element(vector, ir.Constant(ir.IntType(32), i)) for i in range(width)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return signature, codegen

    return load


def _intrinsic_vector_store(width: int):
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
            pointer = _element_pointer(context, builder, array_type, args[0], index_type, args[1], bits=64)
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


def _intrinsic_reduce_add(width: int, bits: int):
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
            pointer = _element_pointer(context, builder, array_type, args[0], index_type, args[1], bits=bits)
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


def _intrinsic_async_copy(width: int, bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def copy(typingctx, dst, dst_index, src, src_index, valid):
        if not (_indexable(dst, dst_index) and _indexable(src, src_index)) or dst.dtype != src.dtype:
            return None

        def codegen(context, builder, sig, args):
            dst_type, dst_index_type, src_type, src_index_type, valid_type = sig.args
            element = context.get_value_type(dst_type.dtype)
            size = width * context.get_abi_sizeof(element)
            target = _element_pointer(context, builder, dst_type, args[0], dst_index_type, args[1], bits=64)
            source = _element_pointer(context, builder, src_type, args[2], src_index_type, args[3], bits=bits)
            i32 = ir.IntType(32)
            # Cast to the shared and global address spaces in LLVM, where the backend folds them
            # into the addressing; inline PTX would convert generic addresses at run time.
            target = builder.ptrtoint(builder.addrspacecast(target, ir.PointerType(element, 3)), i32)
            source = builder.ptrtoint(builder.addrspacecast(source, ir.PointerType(element, 1)), ir.IntType(64))
            valid = context.cast(builder, args[4], valid_type, types.boolean)
            read = builder.select(valid, ir.Constant(i32, size), ir.Constant(i32, 0))
            cache = "cg" if size == VECTOR_BYTES else "ca"  # .cg (L2 only) exists for 16-byte copies alone
            builder.asm(
                ir.FunctionType(ir.VoidType(), [i32, ir.IntType(64), i32]),
                f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;",
                "r,l,r,~{memory}",
                [target, source, read],
                True,
            )
            return context.get_dummy_value()

        return types.none(dst, dst_index, src, src_index, valid), codegen

    return copy


def _intrinsic_asm(instruction: str):
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


def _intrinsic_vector_phase(width: int, bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def phase(typingctx, array, index):
        if not _indexable(array, index):
            return None

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1], bits=bits)
            size = context.get_abi_sizeof(context.get_value_type(sig.args[0].dtype))
            address = builder.ptrtoint(pointer, ir.IntType(64))
            slot = builder.and_(builder.udiv(address, ir.Constant(address.type, size)), ir.Constant(address.type, width - 1))
            return builder.trunc(slot, ir.IntType(32))

        return types.int32(array, index), codegen

    return phase


def _intrinsic_rows_aligned(width: int):
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
def _intrinsic_scalar_access(bits: int):
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, array, index):
        """array[index] with `bits`-bit offset arithmetic."""
        if not _indexable(array, index):
            return None

        def codegen(context, builder, sig, args):
            return builder.load(_element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1], bits=bits))

        return array.dtype(array, index), codegen

    @intrinsic
    def store(typingctx, array, index, value):
        """array[index] = value with `bits`-bit offset arithmetic."""
        if not _indexable(array, index):
            return None

        def codegen(context, builder, sig, args):
            array_type, index_type, value_type = sig.args
            value = context.cast(builder, args[2], value_type, array_type.dtype)
            builder.store(value, _element_pointer(context, builder, array_type, args[0], index_type, args[1], bits=bits))
            return context.get_dummy_value()

        return types.none(array, index, value), codegen

    return load, store


load, store = scalar_access(32)


def _intrinsic_dynamic_shared_array(shape: tuple, dtype, offset: int):
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
