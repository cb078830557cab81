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

from numba import config, cuda

from . import ptx, simulated
from .rules import VECTOR_BYTES

#: what to pass as `alignment=` to cuda.shared.array: the simulator accepts only None
SHARED_ALIGNMENT = None if config.ENABLE_CUDASIM else VECTOR_BYTES
#: the instructions here that not every GPU has, each with the oldest (major, minor) compute
#: capability whose PTX has it (kernels.base.Family.instructions): `async_copy`'s cp.async, and
#: `reduce_add`'s 16-byte float32 adds (float64 and int32 ones add a lane at a time, which all have)
ASYNC_COPY_NEEDS = {"cp.async": (8, 0)}
VECTOR_ADD_NEEDS = {"red.global.add.v4.f32 (16-byte adds into C)": (9, 0)}


def vector_width(itemsize: int) -> int:
    return VECTOR_BYTES // itemsize


def vector_load(width: int, bits: int = 64, aligned: bool = True):
    """load(array, index) -> a `width`-tuple of array[index[:-1] + (index[-1] + i,)]. The offset
    is computed in `bits` bits (see kernels.ptx: 64 for shared arrays, 32 for global). One load,
    aligned to its size (16 bytes at most): two float32 are one 8-byte load. aligned=False: the
    elements need only their own alignment, and the load compiles to `width` scalar loads at
    immediate offsets from one address."""
    if config.ENABLE_CUDASIM:
        return simulated.vector_load(width)
    return ptx.vector_load(width, bits, aligned)


def vector_store(width: int):
    """store(array, index, values): array[index[:-1] + (index[-1] + i,)] = values[i], one
    16-byte store into a shared array."""
    return simulated.vector_store(width) if config.ENABLE_CUDASIM else ptx.vector_store(width)


def reduce_add(width: int, bits: int = 32):
    """add(array, index, values): array[index[:-1] + (index[-1] + i,)] += values[i] atomically
    for i < `width`, into a global array, reading nothing back: float32 lanes as one vector
    `red.global.add` (sm_90 and later; the caller guarantees 16-byte alignment), float64 and
    int32 ones one `red` a lane. The offset is computed in `bits` bits."""
    return simulated.reduce_add(width) if config.ENABLE_CUDASIM else ptx.reduce_add(width, bits)


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
    return simulated.vector_phase(width) if config.ENABLE_CUDASIM else ptx.vector_phase(width, bits)


def rows_aligned(width: int):
    """aligned(array) -> whether every row of a C-contiguous array starts on a 16-byte boundary
    (its data pointer is aligned and its rows hold a multiple of `width` elements), so that
    `vector_load` may read it anywhere at a column that is a multiple of `width`."""
    return simulated.rows_aligned(width) if config.ENABLE_CUDASIM else ptx.rows_aligned(width)


def async_copy(width: int, bits: int = 32):
    """copy(dst, dst_index, src, src_index, valid): start copying `width` adjacent elements of the
    global array src at src_index into the shared array dst at dst_index (both 16-byte aligned
    when width > 1); when not `valid`, write zeros and read nothing. The copy is in flight until
    `async_wait` says its group is done; other threads see it after a barrier. The source offset
    is computed in `bits` bits."""
    return simulated.async_copy(width) if config.ENABLE_CUDASIM else ptx.async_copy(width, bits)


def async_copy_flat(width: int, bits: int = 32):
    """copy(dst, dst_index, src, offset, extra): `async_copy` from element offset + extra of the
    C-contiguous src counted from its first (the caller keeps it in range). `offset` is what a
    thread's copies of a tile share, `extra` what differs (a multiple of the row length): the
    compiler keeps one offset a tile rather than one a copy."""
    return simulated.async_copy_flat(width) if config.ENABLE_CUDASIM else ptx.async_copy_flat(width, bits)


def word_copy(bits: int = 32):
    """copy(dst, dst_index, src, src_index, count): start copying the 16-byte word that holds
    src[src_index] (a C-contiguous global array, its index in range) into dst at dst_index (16-byte
    aligned): its first `count` elements, the rest zeros. Rows that are not 16-byte aligned move so
    as whole words; `word_offset` and the index say where the word starts. Completed as
    `async_copy`'s."""
    return simulated.word_copy() if config.ENABLE_CUDASIM else ptx.word_copy(bits)


def word_offset():
    """offset(array) -> which element of its 16-byte word the array's first one is."""
    return simulated.word_offset() if config.ENABLE_CUDASIM else ptx.word_offset()


def scalar_access(bits: int = 32):
    """(load, store): load(array, index) -> array[index] and store(array, index, value), the
    offset computed in `bits` bits."""
    if config.ENABLE_CUDASIM:
        return simulated.load_element, simulated.store_element
    return ptx.scalar_access(bits)


def dynamic_shared_array(shape: tuple, dtype, offset: int = 0):
    """A device function f() -> a C-contiguous `shape` array of `dtype` (a Numba type) at element
    `offset` of the block's dynamic shared memory, which the launch must size to hold it. Unlike
    slicing and reshaping `cuda.shared.array(0, dtype)`, which go through generic addresses and a
    runtime call, the array's address stays a known shared-memory one, so its loads stay
    `ld.shared` with immediate offsets."""
    if config.ENABLE_CUDASIM:
        return simulated.dynamic_shared_array(shape, dtype, offset)
    return ptx.dynamic_shared_array(tuple(shape), dtype, offset)


def async_commit():
    """commit(): close the group of copies this thread started since the last commit."""
    return simulated.nothing if config.ENABLE_CUDASIM else ptx.asm("cp.async.commit_group;")


def async_wait(pending: int):
    """wait(): block until at most `pending` of this thread's committed groups are in flight."""
    return simulated.nothing if config.ENABLE_CUDASIM else ptx.asm(f"cp.async.wait_group {pending};")


@cuda.jit(device=True)
def anywhere(array):
    """In place of `rows_aligned`'s test where the accesses need no alignment."""
    return True












































load, store = scalar_access(32)


