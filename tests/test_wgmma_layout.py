"""The warpgroup MMA's layouts (kernels/wgmma_layout.py): a model that stages A and B's transpose
into swizzled shared tiles, reads them back through descriptors and sums per thread must give the
TF32 product, and each plausible mistake (no swizzle, a wrong stride, a wrong fragment map) must
not."""

import numpy as np
import pytest

from kernels import wgmma_layout as wl


def tf32(x: np.ndarray) -> np.ndarray:
    return (x.view(np.uint32) & wl.TF32_BITS).view(np.float32)


def staged_product(A, B, n, place=wl.swizzled_word, stride=wl.GROUP_BYTES, fragment=wl.accumulator):
    """C = A @ B (64 x K times K x n) as a warpgroup kernel moves it: per K-tile, A and B's
    transpose written into shared memory at 1024-aligned tiles by `place`, every STEP_K slice
    multiplied through descriptors, the sums scattered to C by `fragment`."""
    K = A.shape[1]
    a_at, b_at = 3 * wl.TILE_ALIGN, 3 * wl.TILE_ALIGN + wl.ROWS * wl.ROW_BYTES
    words = np.zeros((b_at + n * wl.ROW_BYTES) // 4, np.float32)
    sums = np.zeros((wl.THREADS, n // 2), np.float32)
    rows_a, ks_a = np.meshgrid(np.arange(wl.ROWS), np.arange(wl.TILE_K), indexing="ij")
    rows_b, ks_b = np.meshgrid(np.arange(n), np.arange(wl.TILE_K), indexing="ij")
    for k0 in range(0, K, wl.TILE_K):
        inside_a, inside_b = k0 + ks_a < K, k0 + ks_b < K
        words[a_at // 4 + place(rows_a, ks_a)] = np.where(inside_a, A[rows_a, np.minimum(k0 + ks_a, K - 1)], 0)
        words[b_at // 4 + place(rows_b, ks_b)] = np.where(inside_b, B[np.minimum(k0 + ks_b, K - 1), rows_b], 0)
        for step in range(wl.TILE_K // wl.STEP_K):
            a, b = (wl.Descriptor(start=at + step * wl.STEP_K * 4, stride=stride).bits for at in (a_at, b_at))
            sums = wl.mma(words, a, b, n, sums)
    C = np.full((wl.ROWS, n), np.nan, np.float32)
    rows, columns = fragment(np.arange(wl.THREADS)[:, None], np.arange(n // 2)[None, :])
    C[rows, columns] = sums
    return C


@pytest.mark.parametrize("n, k", [(8, 8), (64, 40), (128, 96), (256, 33)])
def test_staged_tiles_read_through_descriptors_give_the_tf32_product(n, k):
    rng = np.random.default_rng(n + k)
    A, B = rng.standard_normal((wl.ROWS, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    exact = tf32(A).astype(np.float64) @ tf32(B).astype(np.float64)
    assert np.abs(staged_product(A, B, n) - exact).max() <= 1e-5 * np.abs(exact).max()


def test_each_thread_s_sums_cover_the_tile_once_as_cutlass_lays_them_out():
    """CUTLASS's CLayout_64xN, ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)) from (thread, value) to
    m + 64 n, written out here on its own."""
    n = 256
    thread, register = np.meshgrid(np.arange(wl.THREADS), np.arange(n // 2), indexing="ij")
    index = (128 * (thread % 4) + (thread // 4) % 8 + 16 * (thread // 32)
             + 64 * (register % 2) + 8 * ((register // 2) % 2) + 512 * (register // 4))
    rows, columns = wl.accumulator(thread, register)
    assert (rows == index % 64).all() and (columns == index // 64).all()
    covered = np.zeros((wl.ROWS, n), int)
    np.add.at(covered, (rows, columns), 1)
    assert (covered == 1).all()


def test_a_wrong_swizzle_stride_or_fragment_map_gives_a_wrong_product():
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((wl.ROWS, 32), dtype=np.float32), rng.standard_normal((32, 64), dtype=np.float32)
    scale = np.abs(A @ B).max()

    def error(**mistake):
        return np.abs(staged_product(A, B, 64, **mistake) - A @ B).max() / scale

    assert error() < 1e-2  # TF32's rounding
    assert error(place=lambda row, k: row * wl.TILE_K + k) > 0.1  # written unswizzled
    assert error(stride=wl.GROUP_BYTES // 2) > 0.1  # 8-row groups 512 bytes apart
    def swapped(thread, register):  # registers 1 and 2 of each group of four exchanged
        return wl.accumulator(thread, (register & ~3) | (register & 1) << 1 | (register >> 1) & 1)

    assert error(fragment=swapped) > 0.1


def test_a_descriptor_holds_its_fields_in_the_documented_bits():
    descriptor = wl.slice_descriptor(0x2400, step=3)
    bits = descriptor.bits
    assert descriptor.start == 0x2400 + 96
    assert bits & 0x3FFF == (0x2400 + 96) >> 4 and (bits >> 16) & 0x3FFF == 1 and (bits >> 32) & 0x3FFF == 64
    assert bits >> 62 == wl.SWIZZLE_128B and (bits >> 49) & 7 == 0
    assert wl.Descriptor.of(bits) == descriptor
    with pytest.raises(ValueError, match="only 1024-byte-aligned tiles in the 128-byte swizzle"):
        wl.operand(np.zeros(64, np.float32), wl.Descriptor(start=0, swizzle=wl.SWIZZLE_NONE).bits, 8)
