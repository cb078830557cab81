"""Loads of an operand that each thread reads once from global memory (kernels.gemv's B): through
the read-only path, allocating nothing in L1 (STREAMED), so that what is read again stays there.
The operand must not be written while the kernel runs."""

from __future__ import annotations

from numba import config

from . import ptx, simulated

#: the cache qualifiers of `ld.global` for a streamed operand
STREAMED = ".nc.L1::no_allocate"


def streamed_load(width: int, bits: int):
    """kernels.intrinsics.vector_load(width, bits) as one `ld.global` STREAMED of a global array
    (offsets computed in `bits` bits)."""
    if config.ENABLE_CUDASIM:
        return simulated.vector_load(width)
    return _ptx_load(width, bits)


def _ptx_load(width: int, bits: int):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    PTX_TYPES = {types.float32: ("f32", "f"), types.float64: ("f64", "d"), types.int32: ("b32", "r")}

    @intrinsic
    def load(typingctx, array, index):
        if not ptx._indexable(array, index) or array.dtype not in PTX_TYPES:
            return None
        signature = types.UniTuple(array.dtype, width)(array, index)

        def codegen(context, builder, sig, args):
            element = context.get_value_type(sig.args[0].dtype)
            pointer = ptx._element_pointer(context, builder, sig.args[:2], args[:2], bits=bits)
            address = builder.ptrtoint(builder.addrspacecast(pointer, ir.PointerType(element, 1)), ir.IntType(64))
            kind, register = PTX_TYPES[sig.args[0].dtype]
            lanes = ", ".join(f"${i}" for i in range(width))
            text = f"ld.global{STREAMED}.v{width}.{kind} {{{lanes}}}, [${width}];"
            out = builder.asm(ir.FunctionType(ir.LiteralStructType([element] * width), [ir.IntType(64)]), text,
                              ",".join([f"={register}"] * width + ["l"]), [address], False)
            lanes = [builder.extract_value(out, i) for i in range(width)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return signature, codegen

    return load
