"""The cost model for untuned shapes (autotune.select.model) and the deterministic mode, on made-up rows
whose times follow the model's own form, so its answers are known."""

import numpy as np
import pytest
from numba import cuda

from autotune import memos
import autotune
import autotune.store.records
import kernels
from autotune.select import model
from autotune.backends import Device
from autotune.store.rows import Row

H200 = Device("NVIDIA H200", "9.0", 132)
PIPELINE = {"pad": 4, "stages": 2, "unroll": True, "fragments": 1, "wide_fetch": True, "async_copy": False,
            "min_blocks": 1}
BIG = {**PIPELINE, "bm": 128, "bn": 128, "bk": 16, "tm": 8, "tn": 8}
THIN = {**PIPELINE, "bm": 16, "bn": 128, "bk": 32, "tm": 4, "tn": 8}
TAU = {"big": 0.004, "thin": 0.002}  # ms per k-step of a block on a full SM: thin tiles cost twice per flop


def timed(params, shape, tau, family="vector", dtype="float32"):
    """A row whose median_ms is what the model's form gives for `tau` (overhead 4 steps)."""
    m, n, k = shape
    g = model.geometry(family, params, dtype, "9.0")
    ms = (g.steps(k) + 4) * tau * g.step_units(m, n, 132, model.LONE_SHARE) + model.split_ms(m, n, g.splits, dtype)
    return Row(device=H200.name, cc="9.0", sm_count=132, dtype=dtype, m=m, n=n, k=k, family=family,
                params=dict(params), median_ms=ms, gflops=2 * m * n * k / ms / 1e6,
                source_hash=kernels.source_hash(family))


ROWS = [
    timed(BIG, (4096, 4096, 4096), TAU["big"]),
    timed(BIG, (2048, 2048, 2048), TAU["big"]),
    timed(THIN, (16, 8192, 1024), TAU["thin"]),
    timed(THIN, (32, 4096, 2048), TAU["thin"]),
]


def test_the_fit_recovers_the_overhead_the_rows_were_made_with():
    assert model.model_for(ROWS, 132, "9.0").overhead == 4


def test_a_wave_that_leaves_sms_less_than_full_steps_faster_per_block():
    """THIN's resident 5 blocks fill 6 waves at 1024x8192 and leave a seventh of 2 an SM; its 64
    blocks at 16x8192 run one an SM, each step no cheaper than LONE_SHARE of a full SM's."""
    g = model.geometry("vector", THIN, "float32", "9.0")
    assert g.resident == 5
    assert g.step_units(1024, 8192, 132, 0.25) == 6 * 5 + 2 and g.step_units(1024, 8192, 132, 1) == 7 * 5
    assert g.step_units(16, 8192, 132, 0.25) == 1.25 and g.step_units(16, 8192, 132, 0) == 1


DMMA = {"mma": "m16n8k8", "stored": "mn", "stores": "elements", "stages": 4, "min_blocks": 1, "splits": 1}
DMMA_BIG = {**DMMA, "bm": 128, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 4}  # one block an SM
DMMA_MID = {**DMMA, "bm": 64, "bn": 128, "bk": 8, "warps_m": 1, "warps_n": 4}  # two blocks an SM


def test_blocks_running_alone_are_not_priced_as_blocks_sharing_their_sm():
    """Step 52's float64 rows: the big tile runs faster per flop on full SMs, but at
    1000^3 its 64 blocks leave half the SMs idle, where the mid tile's 128 run one an SM, each
    step LONE_SHARE of a full SM's. Priced as if each shared its SM (the rule before step 53),
    the mid tile lost there."""
    rows = [timed(DMMA_BIG, (s, s, s), 1.13e-3, "dmma", "float64") for s in (4096, 8192)] + [
        timed(DMMA_MID, (s, s, s), 0.345e-3, "dmma", "float64") for s in (1792, 4096, 8192)]
    fitted = model.Model(rows, 132, "9.0")
    mid = next(c for c in fitted.candidates("float64", deterministic=True) if c.config.params == DMMA_MID)
    assert fitted.overhead == 4 and mid.tau == pytest.approx(0.345e-3)
    assert fitted.cost(mid, "float64", (1000, 1000, 1000)) == pytest.approx((125 + 4) * 0.345e-3 * model.LONE_SHARE * 2)
    assert fitted.predict((1000, 1000, 1000), "float64", deterministic=True).config == DMMA_MID
    assert fitted.predict((8192, 8192, 8192), "float64", deterministic=True).config == DMMA_BIG


def test_a_skinny_untuned_shape_gets_the_thin_tile_with_k_split_into_waves():
    found = model.predict((16, 4096, 16384), "float32", H200, ROWS)
    assert found.family == "splitk" and (found.config["bm"], found.config["bn"]) == (16, 128)
    blocks = 4096 // 128 * found.config["splits"]
    resident = model.geometry("splitk", found.config, "float32", "9.0").resident
    assert 0.9 * 132 <= blocks <= 132 * resident  # every SM busy in one wave; unsplit, 32 blocks for 132 SMs
    assert "16x8192x1024" in found.basis or "32x4096x2048" in found.basis


def test_a_large_untuned_shape_keeps_the_big_tile_unsplit():
    found = model.predict((4096, 4224, 4096), "float32", H200, ROWS)  # 32 x 33 tiles: 8 whole waves
    assert (found.family, found.config) == ("vector", BIG)


def test_a_tiny_product_is_not_split_where_zeroing_c_costs_more_than_the_steps_saved():
    """Split-K zeroes C in a launch of its own (SPLIT_LAUNCH_MS): for a product of a few short
    k-steps that costs more than the steps a split saves, though the split makes more blocks."""
    fast = [timed(THIN, (16, 8192, 1024), 5e-5), timed(THIN, (32, 4096, 2048), 5e-5)]
    found = model.predict((16, 128, 128), "float32", H200, fast)
    assert (found.family, found.config) == ("vector", THIN)
    assert model.predict((16, 4096, 16384), "float32", H200, fast).family == "splitk"  # long K still splits


def test_deterministic_predictions_never_split_k():
    found = model.predict((16, 4096, 16384), "float32", H200, ROWS, deterministic=True)
    assert found.family == "vector" and "splits" not in found.config


def test_leave_one_out_predicts_each_shape_from_the_other_shapes_only():
    lonely = timed({**BIG, "bk": 8}, (1024, 1024, 1024), 0.003)  # the only row of its tile, and slower
    results = model.leave_one_out(ROWS + [lonely], H200)
    assert [(r["m"], r["n"], r["k"]) for r in results] == [r.shape for r in ROWS + [lonely]]
    assert results[-1]["predicted_params"] != lonely.params  # its own row was left out
    assert results[0]["predicted_params"] == BIG and results[0]["predicted_ms"] == pytest.approx(ROWS[0].median_ms)


def test_a_nearest_row_serves_only_where_it_loads_the_gpu_alike():
    assert model.similar_load(ROWS[0], (4000, 4000, 4000), H200)
    assert not model.similar_load(ROWS[0], (1024, 4096, 4096), H200)  # a quarter of the blocks


DMMA_ROWS16 = {**DMMA, "bm": 16, "bn": 128, "bk": 16, "warps_m": 1, "warps_n": 4, "splits": 8}
DMMA_COLS32 = {**DMMA, "bm": 128, "bn": 32, "bk": 16, "warps_m": 4, "warps_n": 1, "splits": 8}


def test_a_tile_must_span_a_skinny_c_short_side_in_one_block():
    """A 16-row tile at a C of 64 rows would read the long B four times over; a C that is not skinny,
    or a tile as wide as C's short side, passes, and so does a C of fewer rows than the shape rules'
    smallest tile (gemv's, a block a row) and a small C, whose sides are both short."""
    covers = lambda params, shape, family="dmma": model.covers_short_side(family, params, "float64", shape)
    assert covers(DMMA_ROWS16, (16, 8192, 8192)) and covers(DMMA_ROWS16, (9, 8192, 8192))
    assert not covers(DMMA_ROWS16, (17, 8192, 8192)) and not covers(DMMA_ROWS16, (64, 8192, 2048))
    assert covers(DMMA_ROWS16, (65, 8192, 2048)) and covers(DMMA_ROWS16, (8192, 16, 8192))  # N's the short side
    assert covers(DMMA_COLS32, (8192, 32, 8192)) and not covers(DMMA_COLS32, (8192, 35, 8192))
    assert covers({"rows": 1, "cols": 64, "threads": 256, "unroll": 4, "splits": 8}, (2, 4096, 4096), "gemv")
    assert covers(DMMA_ROWS16, (64, 64, 4096)) and not covers(DMMA_ROWS16, (64, 65, 4096))  # 64x64 small, 64x65 skinny


def test_the_model_serves_no_skinny_c_a_tile_narrower_than_its_short_side():
    """Step 61: the 16-row tile, cheap per step at its own 16-row shape, priced cheapest at 64 rows too,
    where its four blocks a column of tiles read B four times; the 64-row tile serves there instead, and
    the narrow one only where no tile spans 64 rows."""
    rows = [timed(DMMA_ROWS16, (16, 8192, 8192), 5e-5, "dmma", "float64"),
            timed({**DMMA_MID, "splits": 2}, (256, 8192, 2048), 4e-4, "dmma", "float64")]
    fitted = model.Model(rows, 132, "9.0")
    assert fitted.predict((16, 8192, 4096), "float64").config["bm"] == 16
    thin = next(c for c in fitted.candidates("float64", False) if c.config.params == DMMA_ROWS16)
    mid = min(fitted.candidates("float64", False), key=lambda c: fitted.cost(c, "float64", (64, 8192, 2048))
              if c.config.params["bm"] == 64 else float("inf"))
    assert fitted.cost(thin, "float64", (64, 8192, 2048)) < fitted.cost(mid, "float64", (64, 8192, 2048))
    assert fitted.predict((64, 8192, 2048), "float64").config["bm"] == 64
    alone = model.Model(rows[:1], 132, "9.0")  # nothing spans 64 rows: the narrow tile, not no answer
    assert alone.predict((64, 8192, 2048), "float64").config["bm"] == 16


def test_a_gemv_row_is_priced_and_not_picked_for_a_product_of_many_rows():
    """A tuned product of one row may have gemv's rows x cols tile: the model prices it like any
    row, and its tile, a block per row of C, loses at a product of many rows."""
    gemv = timed({"rows": 1, "cols": 64, "threads": 256, "unroll": 4, "splits": 8}, (1, 4096, 4096), 1e-5, "gemv")
    assert model.geometry("gemv", gemv.params, "float32", "9.0").tile == (1, 64)
    assert model.predict((4096, 4096, 4096), "float32", H200, ROWS + [gemv]).family == "vector"
    assert model.similar_load(gemv, (2, 4096, 4096), H200) and not model.similar_load(gemv, (64, 4096, 4096), H200)


# --- through lookup ---

@pytest.fixture
def shipped(monkeypatch):
    monkeypatch.setenv("MMTUNE_PRETEND_GPU", "NVIDIA H200;9.0;132")
    monkeypatch.setattr(autotune.store.records, "shipped_rows", lambda device=None, dtype=None: [
        r for r in ROWS + [timed({**THIN, "splits": 4}, (16, 2048, 8192), TAU["thin"], "splitk")]
        if dtype in (None, r.dtype)])
    monkeypatch.setattr(autotune.store.records, "measured_tables", lambda: [])  # the model's turn comes without one
    memos.clear()
    yield
    memos.clear()



def test_lookup_takes_the_model_where_no_near_row_loads_the_gpu_alike(shipped):
    near = autotune.lookup(4000, 4000, 4000)
    assert (near.source, near.tuned_shape) == ("nearest", (4096, 4096, 4096))
    alike = autotune.lookup(16, 4096, 16384)  # twice the blocks of the splitk row at 16x2048x8192
    assert (alike.source, alike.tuned_shape) == ("nearest", (16, 2048, 8192))
    far = autotune.lookup(48, 512, 65536)
    assert far.source == "model" and far.family == "splitk" and far.basis.startswith("cost model")
    assert autotune.lookup(1024, 4096, 4096).tuned_shape == (2048, 2048, 2048)  # as many blocks
    assert autotune.lookup(1024, 1024, 4096).source == "model"  # near 2048^3, but a quarter of its blocks


def test_no_nearest_row_serves_a_skinny_c_a_tile_narrower_than_its_short_side(shipped):
    """The nearest row, 16x8192x1024's, has a 16-row tile: too narrow for 24 rows."""
    wider = autotune.lookup(24, 8192, 1024)
    assert wider.source == "model" and wider.config["bm"] >= 24


def test_deterministic_lookups_skip_rows_that_split_k(shipped):
    assert autotune.lookup(16, 2048, 8192).family == "splitk"  # the exact row
    exact_skipped = autotune.lookup(16, 2048, 8192, deterministic=True)
    assert exact_skipped.family == "vector" and exact_skipped.source in ("nearest", "model")


def test_deterministic_matmul_gives_the_same_bits_twice(shipped):
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((16, 40)).astype(np.float32), rng.standard_normal((40, 24)).astype(np.float32)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    first = autotune.matmul(dA, dB, deterministic=True).copy_to_host()
    second = autotune.matmul(dA, dB, deterministic=True).copy_to_host()
    assert first.tobytes() == second.tobytes()
    np.testing.assert_allclose(first, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def test_dmma_rows_are_priced_per_split_and_never_split_when_deterministic():
    tile = {"mma": "m16n8k4", "bm": 64, "bn": 128, "bk": 16, "warps_m": 1, "warps_n": 4, "stages": 3, "min_blocks": 1,
            "stored": "mn", "stores": "elements"}
    geometry = model.geometry("dmma", {**tile, "splits": 2}, "float64", "9.0")
    assert (geometry.tile, geometry.bk, geometry.splits) == ((64, 128), 16, 2)
    assert model.tile_key("dmma", {**tile, "splits": 2}) == model.tile_key("dmma", {**tile, "splits": 1})
    rows = [Row(device=H200.name, family="dmma", params={**tile, "splits": 2}, dtype="float64", m=1024, n=1024, k=8192,
                median_ms=0.5, gflops=1.0)]
    fitted = model.Model(rows, 132, "9.0")
    splits = {c.config.params["splits"] for c in fitted.candidates("float64", deterministic=False)}
    assert splits == set(model.SPLITS)
    assert {c.config.params["splits"] for c in fitted.candidates("float64", deterministic=True)} == {1}


def test_tf32x3_rows_are_priced_per_split_for_float32_alone():
    tile = {"mma": "m16n8k8", "bm": 64, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 2, "stages": 3, "chunk": 2,
            "min_blocks": 1, "stored": "memory", "stores": "elements"}
    geometry = model.geometry("tf32x3", {**tile, "splits": 2}, "float32", "9.0")
    assert (geometry.tile, geometry.bk, geometry.splits) == ((64, 128), 16, 2)
    assert model.tile_key("tf32x3", {**tile, "splits": 2}) == model.tile_key("tf32x3", {**tile, "splits": 1})
    assert model.tile_key("tf32x3", tile) != model.tile_key("dmma", tile)
    rows = [Row(device=H200.name, family="tf32x3", params={**tile, "splits": 2}, dtype="float32", m=1024, n=1024,
                k=8192, median_ms=0.2, gflops=1.0)]
    fitted = model.Model(rows, 132, "9.0")
    candidates = list(fitted.candidates("float32", deterministic=False))
    assert {c.config.family for c in candidates} == {"tf32x3"}
    assert {c.config.params["splits"] for c in candidates} == set(model.SPLITS)
    assert {c.config.params["splits"] for c in fitted.candidates("float32", deterministic=True)} == {1}
    assert list(fitted.candidates("float64", deterministic=False)) == []  # TF32 makes float32 alone
