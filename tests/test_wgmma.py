"""The warpgroup family (kernels/wgmma.py): which GPUs run it and how its builds are stored, and,
under the simulator, the cases the sampled property tests (tests/sampled.py) do not reach: two
warpgroups a block, and a K long enough for the ring of raw tiles and both split stages to wrap.
The layouts, unaligned rows and offset widths are the sampled tests' (64 x 64 configs); Inf, NaN and
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

CONFIG = {"bm": 64, "bn": 64, "stages": 2, "splits": 1, "min_blocks": 1}


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
    assert {"bm": 128, "bn": 128, "stages": 4, "splits": 1, "min_blocks": 1} in configs
    assert not [c for c in configs if c["bm"] * c["bn"] == 128 * 128 and c["min_blocks"] == 2]  # registers
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
    config = {"bm": 128, "bn": 64, "stages": 3, "splits": 2, "min_blocks": 1}  # 3 K-tiles, then 2
    kernel = kernels.build_for("wgmma", config, "float32", (m, n, k), "NT")
    C = cuda.to_device(np.full((m, n), np.nan, np.float32))
    kernel(cuda.to_device(A), cuda.to_device(np.ascontiguousarray(B.T)), C)
    error = np.abs(C.copy_to_host() - exact) / (np.abs(A) @ np.abs(B))
    assert error.max() <= 2.0**-21, error.max()


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
