"""Which row `lookup` serves: exact shapes before nearest ones, then by how closely the GPU a row
was measured on matches this one, stale rows last. The simulator pretends to be a GPU here
(MMTUNE_PRETEND_GPU), so rows of real GPU models can be served to it."""

import sqlite3

import pytest

import autotune
import autotune.store.records
import autotune.store.rows
import kernels
from autotune.store.cache import Cache
from autotune.space.guesses import SHORT_K
from autotune.space.problem import Problem
from autotune.store.rows import Row
from typer.testing import CliRunner

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
SHARED = {"tpb": 8, "pad": 0}


@pytest.fixture(autouse=True)
def pretend_h100(monkeypatch):
    """An H100, and no shipped measured table unless a test ships one (tests/test_neighbours.py)."""
    monkeypatch.setenv("MMTUNE_PRETEND_GPU", f"{H100};9.0;132")
    monkeypatch.setattr(autotune.store.records, "measured_tables", lambda: [])
    autotune.clear()


def row(device=H200, cc="9.0", sm_count=132, shape=(256, 256, 256), gflops=100.0, pad=0, fresh=True):
    m, n, k = shape
    return Row(device=device, cc=cc, sm_count=sm_count, dtype="float32", m=m, n=n, k=k, family="shared",
                params={"tpb": 8, "pad": pad}, gflops=gflops,
                source_hash=kernels.source_hash("shared") if fresh else "older code")


def ship(monkeypatch, *rows):
    monkeypatch.setattr(autotune.store.records, "shipped_rows", lambda device=None, dtype=None: [
        r for r in rows if device in (None, r.device) and dtype in (None, r.dtype)])
    autotune.clear()


def cache(*rows):
    for r in rows:
        Cache().record(r)
    autotune.clear()


def served(shape=(256, 256, 256)):
    choice = autotune.lookup(*shape)
    return choice.measured_on, choice.config["pad"], choice.source, choice.origin


def test_an_exact_shipped_record_beats_a_nearer_faster_cached_row(monkeypatch):
    ship(monkeypatch, row(H100, pad=1))
    cache(row(H100, shape=(512, 256, 256), gflops=1e6, pad=2))
    assert served() == (H100, 1, "exact", "shipped")
    assert served((500, 256, 256))[1:3] == (2, "nearest")


def test_gpus_rank_this_model_then_same_cc_and_sms_then_same_cc(monkeypatch):
    this = row(H100, pad=1, gflops=1.0)
    twin = row(H200, pad=2, gflops=50.0)
    cousin = row("NVIDIA H800 PCIe", sm_count=114, pad=0, gflops=500.0)
    other_arch = row("NVIDIA A100", cc="8.0", sm_count=108, gflops=1e6)
    ship(monkeypatch, this, twin, cousin, other_arch)
    assert served() == (H100, 1, "exact", "shipped")
    ship(monkeypatch, twin, cousin, other_arch)
    assert served() == (H200, 2, "exact", "shipped")
    assert autotune.lookup(256, 256, 256).gpu_match == "same compute capability and SM count"
    ship(monkeypatch, cousin, other_arch)
    assert served() == ("NVIDIA H800 PCIe", 0, "exact", "shipped")
    ship(monkeypatch, other_arch)
    assert autotune.lookup(256, 256, 256).source == "default"  # another architecture is never served


def test_among_nearest_rows_the_gpu_match_comes_before_the_distance(monkeypatch):
    ship(monkeypatch, row(H200, shape=(256, 256, 300), pad=1), row(H100, shape=(1024, 256, 256), pad=2))
    assert served() == (H100, 2, "nearest", "shipped")


def test_a_cached_row_of_this_gpu_beats_a_shipped_twin_at_the_same_shape(monkeypatch):
    ship(monkeypatch, row(H200, pad=1, gflops=1e6))
    cache(row(H100, pad=2, gflops=1.0))
    assert served() == (H100, 2, "exact", "cache")


def test_stale_rows_only_when_nothing_fresh_fits_with_a_warning(monkeypatch):
    ship(monkeypatch, row(H100, pad=1, fresh=False), row(H100, shape=(512, 256, 256), pad=2))
    assert served() == (H100, 2, "nearest", "shipped")
    ship(monkeypatch, row(H100, pad=1, fresh=False))
    with pytest.warns(UserWarning, match="measured on older kernel code"):
        choice = autotune.lookup(256, 256, 256)
    assert (choice.config["pad"], choice.stale) == (1, True)


def test_lookup_cli_says_which_gpu_the_row_came_from(monkeypatch):
    ship(monkeypatch, row(H200, pad=1))
    from autotune.cli import app

    result = CliRunner().invoke(app, ["lookup", "--m", "256", "--n", "256", "--k", "256"])
    assert result.exit_code == 0, result.output
    assert f"on {H200} (same compute capability and SM count; shipped row)" in result.stdout


def test_a_fresh_row_replaces_a_stale_one_even_if_slower():
    hashes = kernels.source_hashes()
    cache(row(H100, gflops=500.0, fresh=False))
    assert not Cache().record(row(H100, gflops=100.0, pad=1))  # without today's hashes: the faster stays
    assert Cache().record(row(H100, gflops=100.0, pad=1), hashes)
    assert Cache().get(Problem(H100, "float32", 256, 256, 256)).params == {"tpb": 8, "pad": 1}
    assert not Cache().record(row(H100, gflops=50.0, pad=2), hashes)  # both current: the faster stays
    assert not Cache().record(row(H100, gflops=900.0, pad=3, fresh=False), hashes)  # a stale row never displaces a current one
    assert not Cache().merge([row(H100, gflops=900.0, pad=3, fresh=False)], hashes)
    assert Cache().get(Problem(H100, "float32", 256, 256, 256)).params == {"tpb": 8, "pad": 1}


def test_an_older_cache_gains_the_sm_count_column_in_place(isolated_cache):
    isolated_cache.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(isolated_cache)
    old.execute("CREATE TABLE best (device TEXT, dtype TEXT, m INTEGER, n INTEGER, k INTEGER, family TEXT, params TEXT, "
                "gflops FLOAT, PRIMARY KEY (device, dtype, m, n, k))")
    old.execute("INSERT INTO best VALUES ('GPU', 'float32', 8, 8, 8, 'shared', '{\"tpb\": 8, \"pad\": 0}', 1.0)")
    old.commit()
    old.close()
    rows = Cache().rows()
    assert [(r.device, r.params, r.sm_count) for r in rows] == [("GPU", SHARED, None)]


def test_the_pretended_gpu_must_be_well_formed(monkeypatch):
    monkeypatch.setenv("MMTUNE_PRETEND_GPU", "H100")
    autotune.clear()
    with pytest.raises(ValueError, match="MMTUNE_PRETEND_GPU must be 'NAME;CC;SMS'"):
        autotune.lookup(8, 8, 8)


def test_stale_rows_of_this_gpu_are_retimed_into_the_cache(monkeypatch):
    from autotune.tune.replay import Replay, config_key

    from autotune.tune.retime import retime_stale

    shipped_stale = row(H100, shape=(64, 64, 64), pad=1, fresh=False)
    ship(monkeypatch, shipped_stale, row(H100, shape=(32, 32, 32)), row(H200, shape=(16, 16, 16), fresh=False))
    cache(row(H100, pad=2, fresh=False), row(H100, shape=(8, 8, 8), pad=0, fresh=False),
          row(H100, shape=(64, 64, 64), pad=1, fresh=False))  # stale in the cache and the records: once
    replay = Replay({config_key("shared", {"tpb": 8, "pad": 2}): 7.0}, default=3.0)
    done = retime_stale(measurer=replay, dtype="float32")
    assert len(replay.calls) == 3
    assert sorted((r.old.m, r.new.gflops) for r in done) == [(8, 3.0), (64, 3.0), (256, 7.0)]
    rows = {r.m: r for r in Cache().rows(H100)}
    assert set(rows) == {8, 64, 256} and not any(autotune.store.rows.stale(r, kernels.source_hashes()) for r in rows.values())
    assert rows[256].gflops == 7.0 and rows[256].sm_count == 132
    assert retime_stale(measurer=Replay(), dtype="float32") == []  # nothing stale is left for this GPU


def test_warm_retime_re_times_stale_rows_from_the_cli(monkeypatch):
    from autotune.cli import app

    cache(row(H100, shape=(8, 8, 8), pad=2, fresh=False))
    result = CliRunner().invoke(app, ["warm", "--retime", "--simulate"])
    assert result.exit_code == 0, result.output
    assert f"{H100} float32 8x8x8 shared: 100 -> " in result.stdout
    assert not autotune.store.rows.stale(Cache().get(Problem(H100, "float32", 8, 8, 8)), kernels.source_hashes())


def test_lookup_for_another_gpu_of_the_host(monkeypatch):
    """The call path looks up for the operands' GPU, which on a mixed host is not the current one."""
    from autotune.backends import Device

    ship(monkeypatch, row(H100, pad=1), row(H200, pad=2))
    assert autotune.lookup(256, 256, 256).config["pad"] == 1
    choice = autotune.lookup(256, 256, 256, device=Device(H200, "9.0", 132))
    assert (choice.config["pad"], choice.measured_on, choice.gpu_match) == (2, H200, "this GPU model")


def test_untuned_products_of_a_few_rows_or_a_short_k_are_served_by_rule():
    """Before the measured table: B streamed once for a few rows (K unsplit when deterministic),
    the rule's small tiles for a short K."""
    few = autotune.lookup(1, 4096, 1024)
    assert (few.source, few.family, few.config["splits"]) == ("few-rows", "gemv", 8)
    assert autotune.lookup(1, 4096, 1024, deterministic=True).config["splits"] == 1
    assert autotune.lookup(1, 4096, 1024, layout="NT").config["cols"] == 16
    short = autotune.lookup(2008, 944, 60)
    assert (short.source, short.family, short.config["bm"], short.config["bk"]) == ("small-k", "vector", 64, 8)
    assert short.basis == "K = 60: the 64x64 tile, BK 8, 3 async stages"  # 3.6 tiles an SM
    assert autotune.lookup(2008, 944, SHORT_K + 1).source != "small-k"
    aligned_rows_of_b = autotune.lookup(2896, 1713, 96, layout="NT")  # B's rows: K long in NT, N in NN
    assert (aligned_rows_of_b.source, aligned_rows_of_b.config["async_copy"]) == ("small-k", False)
    unaligned_rows_of_b = autotune.lookup(2896, 1713, 96)
    assert (unaligned_rows_of_b.source, unaligned_rows_of_b.config["async_copy"]) == ("small-k", True)
    few_tiles = autotune.lookup(34, 2745, 85, precision="tf32x3")  # K under MIN_K: the IEEE kernels
    assert (few_tiles.source, few_tiles.family, few_tiles.config["bm"], few_tiles.config["bn"]) == (
        "small-k", "vector", 32, 64)
    assert autotune.lookup(2299, 124, 161).source != "small-k"


def test_a_small_float64_product_nobody_tuned_gets_dmmas_small_tile():
    """After the few-rows and short-K rules: a small C of little work in float64 (steps 62 and 63), the
    tile larger where C makes more, a skinny C of few tiles over a long K (step 64) and a C of more tiles
    over a short K (step 65); an exact row still comes first, and float32 keeps its own rules."""
    small = autotune.lookup(41, 48, 68, "float64")
    assert (small.source, small.family, small.config["bm"], small.config["bn"]) == ("small-c", "dmma", 32, 16)
    assert small.basis == "a 41x48 C of 133,824 multiply-adds: dmma's 32x16 tile, K split 1 ways"
    assert autotune.lookup(35, 41, 4525, "float64").config["splits"] == 64
    assert autotune.lookup(35, 41, 4525, "float64", deterministic=True).config["splits"] == 1
    assert autotune.lookup(256, 256, 256, "float64").source == "exact"
    assert autotune.lookup(41, 48, 68).source != "small-c"
    larger = autotune.lookup(1000, 1000, 60, "float64")  # 2016 32x16 tiles
    assert (larger.source, larger.config["bm"], larger.config["bn"], larger.config["splits"]) == ("small-c", 64, 64, 1)
    assert autotune.lookup(1000, 1000, 600, "float64").source != "small-c"  # more work over a longer K
    short_k = autotune.lookup(4096, 4096, 400, "float64")  # more work over a short K (step 65)
    assert (short_k.source, short_k.config["bm"], short_k.config["bn"], short_k.config["splits"]) == ("small-c", 64, 64, 1)
    assert autotune.lookup(4096, 4096, 400, "float64", layout="NT").source != "small-c"  # B transposed: K to 256
    long_k = autotune.lookup(3036, 30, 4386, "float64")  # a skinny C over a long K (step 64)
    assert (long_k.source, long_k.config["bm"], long_k.config["bn"], long_k.config["splits"]) == ("small-c", 64, 32, 8)
    assert autotune.lookup(3036, 30, 4386, "float64", deterministic=True).source != "small-c"


def test_float64_products_of_a_few_rows_stream_b_once_with_k_split_by_their_own_rule():
    """gemv's few-rows rule serves float64 too (step 53), with shorter shares of K per split than
    float32's (kernels.gemv.FEW_ROWS_SPLIT_K): twice as many along B's rows here, four times along
    its columns; the product through the call path is float64's."""
    import numpy as np
    from numba import cuda

    few = autotune.lookup(1, 4096, 1024, "float64")
    assert (few.source, few.family, few.config["splits"]) == ("few-rows", "gemv", 16)
    assert autotune.lookup(1, 4096, 1024, "float64", layout="NT").config["splits"] == 4
    assert autotune.lookup(1, 4096, 1024, layout="NT").config["splits"] == 1
    assert autotune.lookup(5, 4096, 1024, "float64").family != "gemv"  # more rows than FEW_ROWS
    rng = np.random.default_rng(53)
    A, B = rng.standard_normal((3, 45)), rng.standard_normal((45, 37))
    assert autotune.lookup(3, 37, 45, "float64").family == "gemv"
    C = autotune.matmul(cuda.to_device(A), cuda.to_device(B)).copy_to_host()
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
