"""The warpgroup family (kernels/wgmma.py): which GPUs run it and how its builds are stored, and,
under the simulator, the cases the sampled property tests (tests/sampled.py) do not reach: two
warpgroups a block, and a K long enough for the ring of raw tiles and both split stages to wrap.
The layouts, unaligned rows and offset widths are the sampled tests' (64 x 64 configs), and here
the whole 16-byte words that two producer warpgroups move unaligned rows as; Inf, NaN and
the float32 range's edges are tests/test_special_values.py's; the instruction's layout rules are
tests/test_wgmma_layout.py's."""

import numpy as np
import pytest
from conftest import ON_GPU
from numba import cuda

import kernels
from autotune.space.configs import GpuLimits, arch_infeasibility, families_for, feasible_configs, runs_on
from autotune.store.cubins import BuildKey, key_parts
from kernels import warpgroup
from kernels import wgmma_layout as wl
from kernels.rules import Arch

CONFIG = {"bm": 64, "bn": 64, "stages": 2, "splits": 1, "min_blocks": 1, "producer": 0}


def test_only_sm_90_runs_it_and_its_builds_are_keyed_for_sm_90a():
    for cc, runs in (("9.0", True), ("8.0", False), ("10.0", False), ("12.0", False)):
        assert runs_on("wgmma", "float32", cc) is runs and ("wgmma" in families_for("float32", cc)) is runs
        reason = arch_infeasibility("wgmma", CONFIG, "float32", cc)
        assert (reason is None) is runs and (runs or "needs compute capability 9.0a" in reason)
    assert "wgmma" not in families_for("float64") and "wgmma" not in families_for("int32")
    assert Arch.of("9.0").has("9.0a") and not Arch.of("10.0").has("9.0a") and Arch.of("10.0").has("9.0")
    key = BuildKey.of(kernels.Config.of("wgmma", CONFIG), "float32", (256, 256, 256), "NN", Arch.of("9.0"))
    assert key.arch == Arch(9, 0, "a") and key_parts(key)["arch"] == "sm_90a"
    assert BuildKey.of(key.config, "float32", (256, 256, 256), "NN", Arch.of("8.0")).arch == Arch(8, 0)


def test_an_h100_takes_the_large_tiles_in_its_shared_memory():
    configs = feasible_configs("wgmma", "float32", GpuLimits.for_cc("9.0", 132))
    for producer in (0, 1, 2):
        tile = {"bm": 128, "bn": 128, "stages": 4, "splits": 1, "min_blocks": 1, "producer": producer, "swap": 0}
        assert tile in configs
    assert not [c for c in configs if c["bm"] * c["bn"] == 128 * 128 and c["min_blocks"] == 2]  # registers
    assert not [c for c in configs if c["producer"] and (c["bm"] == 64 or c["stages"] == 2)]
    assert kernels.family("wgmma").first_tile("float32", "9.0") and not kernels.family("wgmma").first_tile("float32", "8.0")


@pytest.mark.skipif(ON_GPU, reason="calls the device function on the host, as the simulator runs it")
def test_the_descriptor_is_the_layout_rules():
    for address in (0, 1024, 5 * 1024 + 32 * 3, 200 * 1024):
        assert int(warpgroup.descriptor(address)) == wl.Descriptor(start=address).bits


def test_two_warpgroups_over_a_k_that_wraps_the_ring_give_the_product(rng):
    """A 128-row block (two warpgroups sharing B's split tiles) over a partial tile of C, K split
    in two: 3 K-tiles through 3 raw stages and 2 split stages in one half, 2 in the other, the
    last one partial."""
    m, n, k = 120, 40, 150
    A, B = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    config = {"bm": 128, "bn": 64, "stages": 3, "splits": 2, "min_blocks": 1, "producer": 0}  # 3 K-tiles, then 2
    kernel = kernels.build_for("wgmma", config, "float32", (m, n, k), "NT")
    C = cuda.to_device(np.full((m, n), np.nan, np.float32))
    kernel(cuda.to_device(A), cuda.to_device(np.ascontiguousarray(B.T)), C)
    error = np.abs(C.copy_to_host() - exact) / (np.abs(A) @ np.abs(B))
    assert error.max() <= 2.0**-21, error.max()


@pytest.mark.parametrize("producer", [1, 2])
@pytest.mark.parametrize("layout, shape, stages, splits",
                         [("NT", (120, 40, 152), 3, 2), ("TN", (70, 33, 99), 4, 1), ("NN", (72, 64, 100), 3, 1),
                          ("TT", (72, 40, 96), 3, 1)])
def test_producer_warpgroups_feed_two_multiplying_ones(layout, shape, stages, splits, producer, rng):
    """With `producer`, one or two warpgroups of their own copy and split B while two others
    multiply, meeting at named barriers: over a K that wraps the ring of raw tiles (3 stages: 3
    K-tiles, then 2, K split in two, the first split adding a bias) and both split stages, 16 bytes a
    copy (B's rows along K, and across it; A's along it, and across it in TT), and over unaligned
    rows (4 stages, 4 K-tiles, the last partial), in the layouts whose A or B the copies transpose."""
    config = {"bm": 128, "bn": 64, "stages": stages, "splits": splits, "min_blocks": 1, "producer": producer}
    kernel = kernels.build_for("wgmma", config, "float32", shape, layout)
    assert kernel.threads == (2 + producer) * wl.THREADS and kernel.unaligned == ("AB" if layout == "TN" else "")
    assert _error_with_bias(kernel, shape, rng) <= 2.0**-21


def _error_with_bias(kernel, shape: tuple[int, int, int], rng) -> float:
    """The kernel's largest error on U[-1, 1] operands stored as its layout says, against what its
    terms allow; where it splits K, with a bias (which one split adds) into a zeroed C."""
    m, n, k = shape
    A, B = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    bias = rng.uniform(-4, 4, n).astype(np.float32) if kernel.splits > 1 else np.zeros(n, np.float32)
    if kernel.splits > 1:
        kernel = kernel.with_bias()
    stored_a = np.ascontiguousarray(A.T) if kernel.layout[0] == "T" else A
    stored_b = np.ascontiguousarray(B.T) if kernel.layout[1] == "T" else B
    C = cuda.to_device(np.full((m, n), 0 if kernel.splits > 1 else np.nan, np.float32))
    kernel(cuda.to_device(stored_a), cuda.to_device(stored_b), C, bias=cuda.to_device(bias) if kernel.bias else None)
    exact = A.astype(np.float64) @ B.astype(np.float64) + bias
    return float((np.abs(C.copy_to_host() - exact) / (np.abs(A) @ np.abs(B) + np.abs(bias))).max())


def _offset_device(x: np.ndarray, skip: int):
    """x on the device, its first element `skip` 4-byte elements past a 16-byte boundary."""
    flat = np.zeros(x.size + skip, x.dtype)
    flat[skip:] = x.ravel()
    return cuda.to_device(flat)[skip:].reshape(x.shape)


@pytest.mark.parametrize("layout, skip", [("NN", 1), ("NT", 2), ("TN", 3), ("TT", 0)])
def test_two_producers_move_unaligned_rows_as_whole_words(layout, skip, rng):
    """Where rows are not 16-byte aligned, two producer warpgroups copy each row of a tile as the
    16-byte words that hold it, and every reader finds its elements shifted in their slots: rows
    along K and across it in each operand, arrays whose first element is off its 16-byte word
    (A by `skip` elements, B by 3 - skip), K split in two with a partial last tile, and two tiles
    of C each way, the second past C's edges (a tile's first row and column shift its rows too)."""
    m, n, k = 131, 67, 75
    A, B = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    config = {"bm": 128, "bn": 64, "stages": 3, "splits": 2, "min_blocks": 1, "producer": 2}
    kernel = kernels.build_for("wgmma", config, "float32", (m, n, k), layout)
    assert kernel.unaligned == "AB"
    stored_a = np.ascontiguousarray(A.T) if layout[0] == "T" else A
    stored_b = np.ascontiguousarray(B.T) if layout[1] == "T" else B
    C = cuda.to_device(np.zeros((m, n), np.float32))
    kernel(_offset_device(stored_a, skip), _offset_device(stored_b, 3 - skip), C)
    error = np.abs(C.copy_to_host() - A.astype(np.float64) @ B) / (np.abs(A) @ np.abs(B))
    assert error.max() <= 2.0**-21, error.max()


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("swap, bn, shape, splits",
                         [(1, 40, (40, 150, 100), 2), (0, 72, (70, 130, 96), 1), (1, 24, (45, 131, 75), 1)])
def test_tiles_of_any_eight_columns_and_swapped_operands_give_the_product(layout, swap, bn, shape, splits, rng):
    """Tiles whose columns are not 64 or 128 (their copies and B's split take `tasks`' steps, the
    last one partial) and swapped operands (the block multiplies B^T by A^T and stores C
    transposed, the bias added along its rows): K split in two with a bias, two tiles of C along
    the swapped tile's rows, and rows that are not 16-byte aligned (131 x 75: whole words)."""
    config = {"bm": 128, "bn": bn, "stages": 3, "splits": splits, "min_blocks": 1, "producer": 2, "swap": swap}
    kernel = kernels.build_for("wgmma", config, "float32", shape, layout)
    assert kernel.tile == ((bn, 128) if swap else (128, bn))
    assert _error_with_bias(kernel, shape, rng) <= 2.0**-21


def test_a_tile_fits_a_product_nobody_tuned_along_its_sides():
    """kernels.wgmma.fit: where two producers build it, a swapped tile's bn covers M in as few
    tiles as its width needs, each as narrow as 8 columns allow, and an unswapped one narrows to
    an N it covers once; 64 or 128 otherwise; only two producers build other widths or swap."""
    from kernels.wgmma_space import fit

    tile = {"bm": 128, "bn": 128, "stages": 4, "min_blocks": 1, "producer": 2, "swap": 0}
    assert fit(tile, (4096, 100, 64))["bn"] == 104 and fit(tile, (4096, 30, 64))["bn"] == 32
    assert fit(tile, (4096, 208, 64))["bn"] == 128 and fit(tile, (4096, 832, 64))["bn"] == 128
    swapped = {**tile, "swap": 1}
    assert fit(swapped, (96, 4096, 64)) == {**swapped, "bn": 96} and fit(swapped, (144, 4096, 64))["bn"] == 72
    assert fit(swapped, (4096, 40, 64)) == {**swapped, "bm": 64, "bn": 128}
    rolled = {**tile, "producer": 0}
    assert fit(rolled, (4096, 72, 64))["bn"] == 128 and fit(rolled, (4096, 40, 64))["bn"] == 64
    limits = GpuLimits.for_cc("9.0", 132)
    for params in ({**tile, "bn": 72, "producer": 1}, {**tile, "producer": 0, "swap": 1}, {**tile, "bn": 132}):
        assert kernels.family("wgmma").restrict({**params, "splits": 1}, "float32", limits)
    assert kernels.family("wgmma").restrict({**tile, "bn": 72, "swap": 1, "splits": 1}, "float32", limits) is None
    with pytest.raises(ValueError, match="with two producers"):  # its loops would copy too few words
        kernels.build_for("wgmma", {**tile, "bn": 72, "producer": 0, "splits": 1}, "float32", (72, 72, 64))


@pytest.mark.skipif(ON_GPU, reason="the simulator's layout rule can be swapped")
@pytest.mark.parametrize("layout", ["NN", "TN"])
def test_a_wrong_k_permutation_on_one_side_is_caught(layout, monkeypatch, rng):
    """Mutation check: A's elements read for the wrong slice (k + 1 instead of k) no longer match
    B's split tiles, and the product is wrong."""
    import kernels.wgmma_layout as layout_rules

    real = layout_rules.a_fragment
    monkeypatch.setattr(layout_rules, "a_fragment", lambda thread, register: real(thread, (register + 2) % 4))
    m, n, k = 20, 24, 40
    A, B = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    kernel = kernels.build_for("wgmma", CONFIG, "float32", (m, n, k), layout)
    C = cuda.to_device(np.zeros((m, n), np.float32))
    kernel(cuda.to_device(np.ascontiguousarray(A.T) if layout[0] == "T" else A), cuda.to_device(B), C)
    assert np.abs(C.copy_to_host() - A.astype(np.float64) @ B).max() > 1e-2


def test_a_row_written_before_the_producer_parameter_reads_as_the_code_it_measured():
    """Rows of a cache written before `producer` existed ran what producer=0 runs, whose code is
    the same (autotune.store.rows.SAME_CODE): they read as producer=0 and stay current."""
    from autotune.store.rows import Row, stale

    params = {"bm": 128, "bn": 128, "stages": 4, "splits": 1, "min_blocks": 1}
    row = Row.of({"device": "NVIDIA H200", "dtype": "float32", "m": 4096, "n": 4096, "k": 4096, "family": "wgmma",
                  "params": params, "gflops": 6e4, "source_hash": "b3bf49dceafe423b", "precision": "tf32x3"})
    assert row.params == {**params, "producer": 0, "swap": 0} and row.config.params == row.params
    assert not stale(row, kernels.source_hashes())
