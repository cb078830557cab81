"""Wide loads Numba does not emit by itself: `width` adjacent elements in one instruction.

NVVM turns a run of adjacent scalar loads into scalar `ld.shared.f32`s; this intrinsic loads an
LLVM vector (<4 x float> for float32, <2 x double> for float64), which compiles to a single
`ld.shared.v4.f32` / `ld.shared.v2.f64` (16 bytes). The caller guarantees the address is 16-byte
aligned: the array is allocated with `alignment=16` and the last index is a multiple of `width`.
Under the CUDA simulator (which runs kernels as Python) the same call is a plain tuple of reads.
"""

from __future__ import annotations

from numba import config

VECTOR_BYTES = 16
#: what to pass as `alignment=` to cuda.shared.array: the simulator accepts only None
SHARED_ALIGNMENT = None if config.ENABLE_CUDASIM else VECTOR_BYTES


def vector_width(itemsize: int) -> int:
    return VECTOR_BYTES // itemsize


def vector_load(width: int):
    """load(array, index) -> a `width`-tuple of array[index[:-1] + (index[-1] + i,)]."""
    return _simulated_load(width) if config.ENABLE_CUDASIM else _intrinsic_load(width)


def _simulated_load(width: int):
    def load(array, index):
        head, last = index[:-1], index[-1]
        return tuple(array[head + (last + i,)] for i in range(width))

    return load


def _intrinsic_load(width: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, array, index):
        if not isinstance(array, types.Array) or not isinstance(index, types.BaseTuple) or len(index) != array.ndim:
            return None
        signature = types.UniTuple(array.dtype, width)(array, index)

        def codegen(context, builder, sig, args):
            array_type, index_type = sig.args
            array_value, index_value = args
            indices = [
                context.cast(builder, value, kind, types.intp)
                for value, kind in zip(cgutils.unpack_tuple(builder, index_value), index_type)
            ]
            data = context.make_array(array_type)(context, builder, value=array_value)
            pointer = cgutils.get_item_pointer(context, builder, array_type, data, indices, wraparound=False)
            vector_type = ir.VectorType(context.get_value_type(array_type.dtype), width)
            vector = builder.load(builder.bitcast(pointer, vector_type.as_pointer()), align=VECTOR_BYTES)
            lanes = [builder.extract_element(vector, ir.Constant(ir.IntType(32), i)) for i in range(width)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return signature, codegen

    return load
