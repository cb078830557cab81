"""The simulator's twins of kernels.intrinsics' device functions: plain indexing in Python, copies
that complete at once, so that kernels run unchanged under NUMBA_ENABLE_CUDASIM.
"""

from __future__ import annotations

from numba import cuda

from .rules import VECTOR_BYTES


def async_copy(width: int):
    def copy(dst, dst_index, src, src_index, valid):
        head, last = dst_index[:-1], dst_index[-1]
        source_head, source_last = src_index[:-1], src_index[-1]
        for i in range(width):
            dst[head + (last + i,)] = src[source_head + (source_last + i,)] if valid else 0

    return copy


def async_copy_flat(width: int):
    def copy(dst, dst_index, src, offset, extra):
        values = src.reshape(-1)
        head, last = dst_index[:-1], dst_index[-1]
        for i in range(width):
            dst[head + (last + i,)] = values[offset + extra + i]

    return copy


def word_copy():
    def copy(dst, dst_index, src, src_index, count):
        values = src.reshape(-1)
        flat = src_index[0] * src.shape[1] + src_index[1]
        start = flat - (word_offset()(src) + flat) % (VECTOR_BYTES // src.itemsize)
        head, last = dst_index[:-1], dst_index[-1]
        for i in range(VECTOR_BYTES // src.itemsize):
            at = start + i
            dst[head + (last + i,)] = values[at] if i < count and 0 <= at < values.size else 0

    return copy


def word_offset():
    def offset(array):
        return array.__array_interface__["data"][0] % VECTOR_BYTES // array.itemsize

    return offset


def nothing():
    pass


def dynamic_shared_array(shape: tuple, dtype, offset: int):
    import math

    SHAPE, START, STOP = shape, offset, offset + math.prod(shape)

    @cuda.jit(device=True)
    def tiles():
        return cuda.shared.array(0, dtype)[START:STOP].reshape(SHAPE)

    return tiles


def vector_load(width: int):
    def load(array, index):
        head, last = index[:-1], index[-1]
        return tuple(array[head + (last + i,)] for i in range(width))

    return load


def vector_store(width: int):
    def store(array, index, values):
        head, last = index[:-1], index[-1]
        for i in range(width):
            array[head + (last + i,)] = values[i]

    return store


def reduce_add(width: int):
    import threading

    lock = threading.Lock()  # the simulator runs a block's threads as Python threads

    def add(array, index, values):
        head, last = index[:-1], index[-1]
        if width > 1 and array.dtype == "float32":  # one vector `red`, which faults unless aligned to its size
            address = address_of(array, index)
            assert address % (width * array.itemsize) == 0, f"misaligned {width}-lane add at {address:#x}"
        with lock:
            for i in range(width):
                array[head + (last + i,)] += values[i]

    return add


def address_of(array, index) -> int:
    return array.__array_interface__["data"][0] + sum(i * s for i, s in zip(index, array.strides))


def vector_phase(width: int):
    def phase(array, index):
        return address_of(array, index) // array.itemsize % width

    return phase


def rows_aligned(width: int):
    def aligned(array):
        address, row = array.__array_interface__["data"][0], array.shape[len(array.shape) - 1]
        return address % VECTOR_BYTES == 0 and row % width == 0

    return aligned


def load_element(array, index):
    return array[index]


def store_element(array, index, value):
    array[index] = value
