"""Where Hopper's warpgroup MMA finds its operands and leaves its sums, as plain arithmetic: the
family that issues `wgmma.mma_async.sync.aligned.m64nNk8.f32.tf32.tf32` (sm_90a) builds its
shared tiles and descriptors from these rules, and the simulator reads them back through the same
rules, so a wrong swizzle, descriptor or fragment map shows on the CPU.

Both operands live in shared memory as K-major tiles of 32 float32 a row (one 128-byte row: TF32
has no transpose bit, so an operand stored MN-major is transposed as it is written), in the
128-byte swizzle: the 16-byte chunk k // 4 of row r sits at chunk (k // 4) ^ (r % 8), each tile
starting on a 1024-byte boundary. A descriptor names a tile's rows 8 at a time: its start address,
the stride from one 8-row group to the next (1024 bytes), and the swizzle; the k-th slice of
8 along K starts 32 k bytes further. Thread t of the warpgroup holds N/2 float32 sums of the
64 x N product (`accumulator`). PTX ISA 9.7.15 (wgmma), CUTLASS cute/arch/mma_sm90_desc.hpp and
cute/atom/mma_traits_sm90_gmma.hpp (CLayout_64xN); a prototype kernel built on these rules
matched the TF32 product on an H100 (docs/performance.md, step 38).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: rows of a wgmma's A operand and of its sum; threads of a warpgroup
ROWS = 64
THREADS = 128
#: K of one instruction for TF32, and of one swizzled row (128 bytes of float32)
STEP_K = 8
TILE_K = 32
ROW_BYTES = TILE_K * 4
#: rows a descriptor steps over at once, and the bytes between such groups
GROUP_ROWS = 8
GROUP_BYTES = GROUP_ROWS * ROW_BYTES
#: a tile's alignment: where the swizzle pattern starts again
TILE_ALIGN = 1024
#: descriptor swizzle modes (bits 62-63)
SWIZZLE_NONE, SWIZZLE_128B, SWIZZLE_64B, SWIZZLE_32B = 0, 1, 2, 3
#: the leading-byte offset of a swizzled K-major tile: unused, by convention 1 (16 bytes)
LEADING_BYTES = 16
#: the mask TF32 reads of a float32: sign, exponent and 10 mantissa bits
TF32_BITS = np.uint32(0xFFFFE000)


def swizzled_word(row, k):
    """The float32 index of element (row, k) in a K-major 128-byte-swizzled tile (ints or arrays)."""
    return row * TILE_K + ((((k >> 2) ^ (row & 7)) << 2) | (k & 3))


@dataclass(frozen=True)
class Descriptor:
    """A wgmma matrix descriptor's fields, in bytes."""

    start: int
    leading: int = LEADING_BYTES
    stride: int = GROUP_BYTES
    base: int = 0
    swizzle: int = SWIZZLE_128B

    @property
    def bits(self) -> int:
        """The 64-bit word wgmma takes: start, leading and stride offsets in 16-byte units."""
        return ((self.start & 0x3FFFF) >> 4 | (self.leading >> 4) << 16 | (self.stride >> 4) << 32
                | self.base << 49 | self.swizzle << 62)

    @classmethod
    def of(cls, bits: int) -> Descriptor:
        return cls(start=(bits & 0x3FFF) << 4, leading=((bits >> 16) & 0x3FFF) << 4,
                   stride=((bits >> 32) & 0x3FFF) << 4, base=(bits >> 49) & 7, swizzle=(bits >> 62) & 3)


def slice_descriptor(tile_address: int, step: int) -> Descriptor:
    """The descriptor of the `step`-th slice of STEP_K along K of the tile at `tile_address`."""
    return Descriptor(start=tile_address + step * STEP_K * 4)


def operand(words: np.ndarray, bits: int, rows: int) -> np.ndarray:
    """The rows x STEP_K block a wgmma reads through descriptor `bits` from shared memory `words`
    (float32, indexed by byte address // 4), as TF32: a 128-byte swizzle XORs address bits 4-6
    with bits 7-9."""
    descriptor = Descriptor.of(bits)
    if descriptor.swizzle != SWIZZLE_128B or descriptor.base:
        raise ValueError(f"only 1024-byte-aligned tiles in the 128-byte swizzle are modelled, not {descriptor}")
    row = np.arange(rows)[:, None]
    address = descriptor.start + row // GROUP_ROWS * descriptor.stride + row % GROUP_ROWS * ROW_BYTES
    address = address + 4 * np.arange(STEP_K)[None, :]
    address = address ^ ((address >> 7) & 7) << 4
    return (words[address // 4].view(np.uint32) & TF32_BITS).view(np.float32)


def accumulator(thread, register):
    """(row, column) of the 64 x N sum that `register` of warpgroup `thread` holds (ints or arrays)."""
    warp, lane = thread >> 5, thread & 31
    row = 16 * warp + (lane >> 2) + 8 * ((register >> 1) & 1)
    column = 8 * (register >> 2) + 2 * (lane & 3) + (register & 1)
    return row, column


def a_fragment(thread, register):
    """(row, k) of the 64 x STEP_K slice of A that `register` (0-3) of warpgroup `thread` holds
    where A comes from registers (CUTLASS's ALayout_64x8 for TF32): rows 8 apart, k 4 apart."""
    warp, lane = thread >> 5, thread & 31
    return 16 * warp + (lane >> 2) + 8 * (register & 1), (lane & 3) + 4 * (register >> 1)


def mma(words: np.ndarray, a_bits: int, b_bits: int, n: int, sums: np.ndarray) -> np.ndarray:
    """The warpgroup's sums (THREADS x n/2, float32) after one m64n{n}k8 instruction: A (64 x 8)
    and B's transpose (n x 8) read through their descriptors and added to `sums` in float64,
    rounded once to float32. The hardware truncates its sums instead, which is why a kernel adds
    each tile's products into float32 sums of its own; this model checks where data goes, not how
    the tensor cores round."""
    product = operand(words, a_bits, ROWS).astype(np.float64) @ operand(words, b_bits, n).astype(np.float64).T
    rows, columns = accumulator(np.arange(THREADS)[:, None], np.arange(n // 2)[None, :])
    return (sums.astype(np.float64) + product[rows, columns]).astype(np.float32)
