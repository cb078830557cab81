import time

import optuna
import pytest

import kernels
from autotune.space.guesses import (
    FEW_ROWS_TILE, SHORT_K, SHORT_K_TILE, SMALL_C_TIER_BOUNDS, SMALL_C_WORK, SMALL_K, TIERS_MAX_K, TIERS_MAX_K_B_T, SMALL_K_COPIED_TILE, SMALL_K_TILE, STREAM_WORKERS, few_rows_guess, small_c_guess, small_k_guess, fit_tile, policy_splits, shape_guesses, stream_twin,
)
from kernels.dmma import FIRST_TILE as DMMA_TILE
from kernels.gemv import FEW_ROWS_TILES as GEMV_TILES
from kernels.tf32x3 import FIRST_TILE as TF32X3_TILE
from kernels.wgmma_space import FIRST_TILE as WGMMA_TILE
from autotune.space.configs import (
    DeviceLimits, GpuLimits, default_config, families_for, feasible_configs, feasible_count, infeasibility, sample_configs,
)
from autotune.space.encoding import suggest, trial_params
from kernels import dmma, mma_space
from kernels.base import Config
from kernels.resources import parse_report
from conftest import on

LIMITS = DeviceLimits()
REG = dict(kernels.family("register").default)


@pytest.mark.parametrize("dtype", list(kernels.DTYPES))
@pytest.mark.parametrize("family", list(kernels.FAMILIES))
def test_defaults_are_feasible_everywhere_for_the_dtypes_the_family_takes(family, dtype):
    reason = infeasibility(family, default_config(family), dtype, LIMITS)
    if family == "dmma" and dtype != "float64":  # the FP64 tensor cores
        assert reason == "the FP64 tensor cores multiply float64 only" and family not in families_for(dtype)
    elif family in ("tf32x3", "wgmma") and dtype != "float32":  # float32 as three TF32 products
        assert reason == "three TF32 products make float32 only" and family not in families_for(dtype)
    elif family == "wgmma":  # its tiles take more than 48 KB of shared memory, which Hopper has
        assert "bytes of shared memory > 49152" in reason and family in families_for(dtype)
        assert infeasibility(family, default_config(family), dtype, GpuLimits.for_cc("9.0")) is None
    else:
        assert reason is None and family in families_for(dtype)


@pytest.mark.parametrize(
    "family,change,dtype,reason",
    [
        ("naive", {"block_x": 256, "block_y": 8}, "float32", "2048 threads per block > 1024"),
        ("shared", {"tpb": 64}, "float32", "64 is not one of"),
        ("register", {"bm": 16, "tm": 4, "bn": 16, "tn": 4}, "float32", "16 threads per block is less than one warp"),
        ("register", {"bm": 64, "tm": 16, "tn": 16}, "float32", "256 elements per thread > 128"),
        ("register", {"bm": 256, "bn": 256, "bk": 32, "tm": 8, "tn": 8}, "float32", "bytes of shared memory > 49152"),
        ("register", {"bm": 256, "bn": 256, "bk": 8, "tm": 8, "tn": 8}, "float64", "a block of 1024 threads leaves 64"),
        ("register", {"colour": "red"}, "float32", "parameters ['colour'] do not match"),
        ("vector", {"async_copy": True, "stages": 1}, "float32", "need a second shared tile"),
        ("vector", {"stages": 3}, "float32", "more than 2 shared tiles would sit idle"),
        ("vector", {"async_copy": True, "stages": 4, "bm": 256, "tm": 16}, "float32", "50176 bytes of shared memory"),
    ],
)
def test_infeasible_configs_say_why(family, change, dtype, reason):
    config = {**default_config(family), **change}
    assert reason in infeasibility(family, config, dtype, LIMITS)


def test_two_blocks_per_sm_must_fit_its_threads_and_registers():
    vector = {**kernels.family("vector").default, "min_blocks": 2}
    assert infeasibility("vector", vector, "float32", LIMITS) is None  # 2 x 256 threads, ~128 registers each
    assert "2 blocks of 256 threads > 384 threads per SM" in infeasibility(
        "vector", vector, "float32", DeviceLimits(max_threads_per_sm=384))
    wide = {**vector, "bm": 256}  # 512 threads: two blocks leave 64 registers each
    assert "2 blocks of 512 threads leaves 64" in infeasibility("vector", wide, "float32", LIMITS)


def test_register_tile_must_divide_the_block_tile():
    config = {**REG, "bm": 24, "tm": 16}  # bm outside SPACE: the restriction alone must catch it
    assert "register tile 16x4 does not divide block tile 24x64" in kernels.register.restrict(config, "float32", LIMITS)


def test_limits_cut_the_space():
    small = DeviceLimits(max_threads_per_block=256, max_shared_per_block=8 * 1024)
    full = feasible_configs("register", "float32", LIMITS)
    cut = feasible_configs("register", "float32", small)
    assert 0 < len(cut) < len(full)
    assert all(infeasibility("register", c, "float32", small) is None for c in cut)
    assert {"tpb": 32, "pad": 0} not in feasible_configs("shared", "float32", small)


def test_a_tunes_goal_counts_feasible_configs_only_as_far_as_its_trials():
    small = DeviceLimits(max_threads_per_block=256, max_shared_per_block=8 * 1024)
    every = len(feasible_configs("shared", "float32", small)) + len(feasible_configs("register", "float32", small))
    assert feasible_count(["shared", "register"], "float32", small, 10**9) == every
    assert feasible_count(["shared", "register"], "float32", small, 5) == 5
    started = time.perf_counter()
    assert feasible_count(["vector", "splitk"], "float32", LIMITS, 40) == 40
    assert time.perf_counter() - started < 5  # the vector space alone takes seconds to enumerate


def test_float64_space_is_smaller_than_float32():
    assert len(feasible_configs("register", "float64", LIMITS)) < len(feasible_configs("register", "float32", LIMITS))


def test_sample_configs_are_distinct_feasible_and_start_with_the_default():
    sample = sample_configs("register", "float32", LIMITS, 20, seed=3)
    assert sample[0] == REG
    assert len({tuple(sorted(c.items())) for c in sample}) == 20
    assert sample == sample_configs("register", "float32", LIMITS, 20, seed=3)


def test_a_large_space_is_sampled_without_enumerating_it():
    started = time.perf_counter()
    sample = sample_configs("vector", "float32", LIMITS, 30, seed=5, accept=lambda c: c["bm"] <= 32)
    assert time.perf_counter() - started < 5  # enumerating the space takes seconds, drawing from it not
    assert len({tuple(sorted(c.items())) for c in sample}) == 30
    assert all(infeasibility("vector", c, "float32", LIMITS) is None and c["bm"] <= 32 for c in sample)
    assert sample == sample_configs("vector", "float32", LIMITS, 30, seed=5, accept=lambda c: c["bm"] <= 32)


def test_suggest_reads_back_an_enqueued_config():
    study = optuna.create_study(direction="maximize")
    config = {**REG, "bk": 16, "mapping": "contiguous"}
    study.enqueue_trial(trial_params(Config.of("register", config)))
    trial = study.ask()
    assert suggest(trial, ["naive", "register"], "float32") == Config.of("register", config)


def test_suggest_draws_from_the_families_given():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    families = {suggest(study.ask(), ["shared"], "float32").family for _ in range(5)}
    assert families == {"shared"}


REPORT = """
ptxas info    : Compiling entry function '_Z6kernel' for 'sm_90'
ptxas info    : Function properties for _Z6kernel
ptxas         .     8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 8 bytes cumulative stack size
info    : used 168 registers, used 1 barriers, 8 stack, 9472 bytes smem, 744 bytes cmem[0], 0 bytes lmem
"""


def test_parse_report_reads_the_assembler_lines():
    res = parse_report(REPORT)
    assert (res.registers, res.spill_stores, res.spill_loads, res.stack_bytes) == (168, 12, 16, 8)
    assert res.shared_bytes == 9472  # a link-time optimized build reports the kernel's own, no reserve
    assert res.problem(256, LIMITS) is None
    assert res.problem(512, LIMITS) == "168 registers x 512 threads > 65536"
    # the link-time optimized report leaves out smem and lmem when the kernel has none
    bare = parse_report(REPORT.replace(", 9472 bytes smem", "").replace(", 0 bytes lmem", ""))
    assert (bare.registers, bare.shared_bytes, bare.local_bytes) == (168, 0, 0)


def test_parse_report_refuses_a_log_without_the_numbers():
    with pytest.raises(ValueError, match="in the assembler's report"):
        parse_report("ptxas fatal: something else")


def test_fit_tile_shrinks_the_sides_longer_than_the_product_keeping_threads_where_it_can():
    tile = {"bm": 128, "bn": 128, "bk": 32, "tm": 8, "tn": 8}
    assert fit_tile(tile, 4096, 4096, 4096) == tile
    assert fit_tile(tile, 25, 3000, 5000) == {**tile, "bm": 32, "tm": 4}  # 8 rows of threads of 4
    assert fit_tile(tile, 3000, 1, 5000) == {**tile, "bn": 16, "tn": 4}
    assert fit_tile(tile, 49, 60, 20) == {"bm": 64, "bn": 64, "bk": 32, "tm": 4, "tn": 4}
    assert fit_tile(tile, 100, 100, 5)["bk"] == 8
    hopper = DeviceLimits.for_cc("9.0")
    for shape in ((1, 1, 1), (3, 5000, 7), (17, 33, 65), (5000, 60, 3)):
        fitted = fit_tile({**tile, "pad": 4, "stages": 2, "unroll": True, "fragments": 1, "wide_fetch": True,
                           "async_copy": True, "min_blocks": 1}, *shape)
        assert infeasibility("vector", fitted, "float32", hopper) is None, shape


def test_split_policies_split_for_their_waves():
    tile = {"bm": 64, "bn": 64, "bk": 32}
    assert policy_splits("whole", (64, 64, 4096), tile, 132) == 1
    assert policy_splits("split", (64, 64, 4096), tile, 132) == 32  # 4 steps of 32 each
    assert policy_splits("deep", (64, 64, 4096), tile, 132) == 64  # 2 steps each
    assert policy_splits("deep", (64, 64, 1 << 20), tile, 132) == 128  # as many as MAX_SPLITS
    assert policy_splits("deep", (4096, 4096, 8192), tile, 132) == 1  # 4096 blocks fill 8 waves whole


def test_shape_guesses_fit_skinny_and_few_tile_shapes():
    """Skinny: the short side in one tile of the next power of 2 and K split for two waves of
    blocks; few tiles: 64x64 tiles; big squares: nothing (the tuned records serve them)."""
    hopper = DeviceLimits.for_cc("9.0")
    split, plain = shape_guesses((16, 8192, 8192), "float32", on(hopper, 132))
    assert (split.family, plain.family) == ("splitk", "vector")
    assert (split.params["bm"], split.params["bn"]) == (16, 128)
    assert 8192 // 128 * split.params["splits"] >= 2 * 132 > 8192 // 128 * split.params["splits"] // 2
    tall = shape_guesses((8192, 48, 8192), "float32", on(hopper, 132))[0]
    assert (tall.params["bm"], tall.params["bn"]) == (128, 64)
    few = shape_guesses((1000, 1000, 100), "float32", on(hopper, 132))
    assert [c.family for c in few] == ["vector"] and few[0].params["bm"] == 64  # K too short to split
    assert shape_guesses((4096, 4096, 4096), "float32", on(hopper, 132)) == []
    for config in shape_guesses((20, 30, 5000), "float32", on(hopper, 132)):
        assert infeasibility(config.family, config.params, "float32", hopper) is None


def test_float64_takes_the_fp64_tensor_cores_by_compute_capability():
    hopper = DeviceLimits.for_cc("9.0")
    guesses = shape_guesses((4096, 4096, 4096), "float64", on(hopper, 132, "9.0"))
    assert guesses[0].family == "dmma" and guesses[0].params == {
        **DMMA_TILE, "mma": "m16n8k8", "bm": 128, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 4, "stages": 4,
        "stored": "memory", "stores": "pairs", "splits": 1}
    split, whole = shape_guesses((512, 512, 16384), "float64", on(hopper, 132, "9.0"))[:2]  # 16 tiles: 2 waves split
    assert (split.params["splits"], whole.params["splits"]) == (32, 1)
    assert shape_guesses((4096, 4096, 4096), "float64", on(DeviceLimits.for_cc("8.0"), 108, "8.0"))[0].params["mma"] == "m8n8k4"
    for dtype, cc in (("float64", "7.5"), ("float64", "8.6"), ("float64", None), ("float32", "9.0")):
        assert all(g.family != "dmma" for g in shape_guesses((4096, 4096, 4096), dtype, on(hopper, 132, cc)))
    assert families_for("float64")[0] == "dmma" and "dmma" not in families_for("float32")


def test_float64_also_tries_its_few_tile_where_the_first_tile_leaves_sms_short():
    """1024^3 in sm_90's 128x128 tiles is 64 blocks on 132 SMs, 2048^3 256: fewer than two an SM, so the
    64x64 tile (2 x 2 warps, 3 stages) joins the first guesses, split for two waves and whole; 4096^3
    (1024 blocks) and an sm_80 GPU (its 64x128 tile, no 16 x 8 x 8 float64) keep one tile."""
    hopper = DeviceLimits.for_cc("9.0")
    tiles = lambda shape, gpu: [(c.params["bm"], c.params["bn"], c.params["splits"]) for c in shape_guesses(
        shape, "float64", gpu) if c.family == "dmma"]
    assert tiles((1024, 1024, 1024), on(hopper, 132, "9.0")) == [(128, 128, 8), (128, 128, 1), (64, 64, 2), (64, 64, 1)]
    few = shape_guesses((1024, 1024, 1024), "float64", on(hopper, 132, "9.0"))[3]
    assert few.params == {"mma": "m16n8k8", "bm": 64, "bn": 64, "bk": 16, "warps_m": 2, "warps_n": 2, "stages": 3,
                          "min_blocks": 1, "stored": "memory", "stores": "pairs", "splits": 1}
    assert tiles((2048, 2048, 2048), on(hopper, 132, "9.0")) == [(128, 128, 2), (128, 128, 1), (64, 64, 1)]
    assert tiles((4096, 4096, 4096), on(hopper, 132, "9.0")) == [(128, 128, 1)]
    assert tiles((1024, 1024, 1024), on(DeviceLimits.for_cc("8.0"), 108, "8.0")) == [(64, 128, 2), (64, 128, 1)]


def test_float64_tries_a_tile_fitted_to_a_skinny_c_first():
    """A C of at most SKINNY rows (columns), and more columns (rows), gets sm_90's first tile with its short side
    the power of 2 that covers C's (16 at least) and its long side 128 over 4 warps, first, split for two waves
    and whole: one block spans C's short side. A warp takes at most 64 rows and 32 columns of it. A small C,
    short both ways, keeps the first and few tiles."""
    hopper = DeviceLimits.for_cc("9.0")
    tiles = lambda shape: [
        (c.params["bm"], c.params["bn"], c.params["warps_m"], c.params["warps_n"], c.params["splits"])
        for c in shape_guesses(shape, "float64", on(hopper, 132, "9.0")) if c.family == "dmma"]
    assert tiles((16, 8192, 8192))[:2] == [(16, 128, 1, 4, 8), (16, 128, 1, 4, 1)]  # 64 blocks: 8 splits fill 2 waves
    assert tiles((8192, 9, 8192))[:2] == [(128, 16, 4, 1, 8), (128, 16, 4, 1, 1)]
    assert tiles((33, 4096, 16384))[0] == (64, 128, 1, 4, 16)
    assert tiles((16384, 64, 16384))[0] == (128, 64, 4, 2, 4)
    first = shape_guesses((8192, 16, 8192), "float64", on(hopper, 132, "9.0"))[0].params
    assert {key: first[key] for key in ("mma", "bk", "stages", "stored")} == {
        "mma": "m16n8k8", "bk": 16, "stages": 4, "stored": "memory"}
    assert tiles((65, 8192, 8192))[0][:2] == (128, 128)  # not skinny: the first tile leads
    assert tiles((16, 8192, 8192))[2:] == [
        (128, 128, 2, 4, 8), (128, 128, 2, 4, 1), (64, 64, 2, 2, 4), (64, 64, 2, 2, 1)]
    assert [tile[:2] for tile in tiles((64, 64, 4096))] == [(128, 128), (128, 128), (64, 64), (64, 64)]
    for shape in ((16, 8192, 8192), (8192, 9, 8192), (41, 48, 68), (3, 4096, 4096)):
        for config in shape_guesses(shape, "float64", on(hopper, 132, "9.0")):
            assert infeasibility(config.family, config.params, "float64", hopper) is None


def test_a_small_float64_c_of_little_work_gets_dmmas_small_tile_split_for_two_waves():
    """A C of at most two 32x16 tiles an SM and at most 2**26 multiply-adds, both sides 16 or more: dmma's
    first small tile on sm_90, K split for two waves (35x41: 6 tiles, 64 splits of 4 steps and more), whole
    where deterministic, and as far as dmma's splits go (64); not float32, not sm_80 (its instruction was not
    measured), not fewer rows or more work."""
    hopper = on(DeviceLimits.for_cc("9.0"), 132, "9.0")
    guess = small_c_guess((41, 48, 68), "float64", hopper)
    first = {**mma_space.SMALL_PIPELINE, **mma_space.SMALL_TIERS[0][0], "mma": "m16n8k8"}
    assert guess.family == "dmma" and guess.params == {**first, "splits": 1}
    assert small_c_guess((35, 41, 4525), "float64", hopper).params["splits"] == 64
    assert small_c_guess((35, 41, 4525), "float64", hopper, deterministic=True).params["splits"] == 1
    assert small_c_guess((2996, 29, 81), "float64", hopper).params == {**first, "splits": 1}  # 188 tiles
    assert small_c_guess((16, 16, 262144), "float64", hopper).params["splits"] == 64  # two waves would take 128
    for shape, dtype, gpu in (((41, 48, 68), "float32", hopper), ((41, 48, 68), "float64", on(DeviceLimits.for_cc(
            "8.0"), 108, "8.0")), ((15, 48, 68), "float64", hopper), ((64, 256, 65537), "float64", hopper),
            ((41, 48, 68), "float64", on(hopper, 0, "9.0"))):
        assert small_c_guess(shape, dtype, gpu) is None, (shape, dtype)


def test_a_small_float64_c_of_more_tiles_gets_the_larger_small_tile_that_pads_it_least_whole():
    """Past two 32x16 tiles an SM the second tier serves whole, its tile the one padding C least (32x32
    first on a tie), however much more than 32x16 it pads; past eight, 64x64 unless it pads C more than
    SMALL_C_PAD_SLACK over the second tier's; every tile of the tiers runs on sm_90 whole and split."""
    hopper = on(DeviceLimits.for_cc("9.0"), 132, "9.0")

    def tile(shape):
        params = small_c_guess(shape, "float64", hopper).params
        return params["bm"], params["bn"], params["splits"], params["stores"]

    assert tile((34, 2221, 91)) == (16, 64, 1, "pairs")  # 278 32x16 tiles; 48 rows against 64
    assert tile((4991, 40, 79)) == (64, 16, 1, "pairs")
    assert tile((400, 400, 400)) == (32, 32, 1, "pairs")
    assert tile((52, 2259, 19)) == (32, 32, 1, "pairs")  # 64 x 16 pads as much
    assert tile((1000, 1000, 60)) == (64, 64, 1, "pairs")  # 2016 32x16 tiles; 64x64 pads C 1.6% more
    assert tile((272, 6569, 21)) == (16, 64, 1, "pairs")  # 64x64 would pad C 18% more
    assert tile((608, 304, 64)) == (32, 32, 1, "pairs")  # the second tier whatever it pads
    assert tile((384, 352, 64)) == (32, 16, 1, "pairs")  # 264 tiles: two an SM, two waves whole
    assert len(mma_space.SMALL_TIERS) == len(SMALL_C_TIER_BOUNDS) + 1
    for tier in mma_space.small_tiles("float64", "9.0"):
        assert len({t["bm"] * t["bn"] for t in tier}) == 1
        assert tier[0] == min(tier, key=lambda t: max(t["bm"], t["bn"]) / min(t["bm"], t["bn"]))  # squarest first
        for t in tier:
            for splits in (1, 64):
                assert infeasibility("dmma", {**t, "splits": splits}, "float64", hopper) is None
    assert mma_space.small_tiles("float32", "9.0") == () and mma_space.small_tiles("float64", "8.0") == ()


def test_more_work_on_a_c_of_more_tiles_over_a_short_k_gets_its_tiers_squarest_tile_whole():
    """Past SMALL_C_WORK, a C of more than two 32x16 tiles an SM over a K of at most TIERS_MAX_K
    (TIERS_MAX_K_B_T where B is passed transposed): up to eight an SM, the second tier's 32x32 whatever
    16x64 or 64x16 would pad; past eight, 64x64 whatever it pads; whole, deterministic or not; not over a
    longer K, nor where C's short side is shorter than the tile's."""
    hopper = on(DeviceLimits.for_cc("9.0"), 132, "9.0")

    def tile(shape, deterministic=False, layout="NN"):
        params = small_c_guess(shape, "float64", hopper, deterministic, layout).params
        return params["bm"], params["bn"], params["splits"], params["stores"]

    assert tile((3144, 123, 175)) == (32, 32, 1, "pairs")  # 792 tiles; 16x64 would pad C least
    assert tile((271, 1343, 188)) == (32, 32, 1, "pairs")
    assert tile((1056, 512, 200)) == (32, 32, 1, "pairs")  # 8 an SM exactly
    assert tile((1057, 512, 200)) == (64, 64, 1, "pairs")
    assert tile((5000, 300, 150)) == (64, 64, 1, "pairs")  # pads C 5.3% more than 64x16
    assert tile((4096, 4096, TIERS_MAX_K), deterministic=True) == (64, 64, 1, "pairs")
    assert tile((4096, 4096, TIERS_MAX_K), layout="TN") == tile((4096, 4096, TIERS_MAX_K_B_T), layout="NT")
    assert tile((4096, 4096, TIERS_MAX_K_B_T), layout="TT") == (64, 64, 1, "pairs")
    assert 3144 * 123 * 175 > SMALL_C_WORK
    assert tile((64, 17000, 256)) == (64, 64, 1, "pairs") and tile((32, 16000, 256)) == (32, 32, 1, "pairs")
    for shape, layout in (((4096, 4096, TIERS_MAX_K + 1), "NN"), ((4096, 4096, TIERS_MAX_K_B_T + 1), "NT"),
                          ((4096, 4096, TIERS_MAX_K_B_T + 1), "TT"), ((1000, 1000, 600), "NN"),
                          ((63, 17000, 256), "NN"), ((31, 16000, 256), "NN")):  # C's short side under the tile's
        assert small_c_guess(shape, "float64", hopper, layout=layout) is None, (shape, layout)
    assert small_c_guess((4096, 4096, 64), "float32", hopper) is None


def test_a_skinny_float64_c_of_few_tiles_over_a_long_k_gets_the_long_k_tile_split_for_two_waves():
    """Past 2**26 multiply-adds and up to 2**30, a C of at most two 32x16 tiles an SM whose short side is
    at most 96 and whose long side spans the tile: dmma's 64x32 tile along a tall (or square) C, 32x64 along
    a wide one, K split for two waves; not where deterministic, nor for a longer short side, more tiles,
    more work, a C within the tile's long side, or float32."""
    hopper = on(DeviceLimits.for_cc("9.0"), 132, "9.0")
    tall = small_c_guess((3036, 30, 4386), "float64", hopper).params
    assert tall == {**mma_space.SMALL_PIPELINE, **mma_space.LONG_K_TILE, "mma": "m16n8k8", "splits": 8}
    wide = small_c_guess((20, 2276, 3933), "float64", hopper).params
    assert (wide["bm"], wide["bn"], wide["warps_m"], wide["warps_n"], wide["splits"]) == (32, 64, 1, 2, 8)
    square = small_c_guess((96, 96, 32768), "float64", hopper).params
    assert (square["bm"], square["bn"], square["warps_m"], square["splits"]) == (64, 32, 2, 64)  # capped at 64
    for shape in ((64, 256, 1 << 16), (96, 1400, 1000), (32, 4224, 1000)):  # 2**30; a short side of 96; 264 tiles
        assert small_c_guess(shape, "float64", hopper).params["bn"] == 64, shape
    for shape, dtype, deterministic in (((3036, 30, 4386), "float64", True), ((97, 200, 20000), "float64", False),
                                        ((32, 4225, 1000), "float64", False), ((64, 256, 65537), "float64", False),
                                        ((16, 16, 262145), "float64", False), ((3036, 30, 4386), "float32", False)):
        assert small_c_guess(shape, dtype, hopper, deterministic) is None, shape
    assert mma_space.long_k_tile("float64", "8.0", 3036, 30) is None


def test_a_family_with_small_tiles_but_no_long_k_tile_serves_no_long_k(monkeypatch):
    import dataclasses

    hopper = on(DeviceLimits.for_cc("9.0"), 132, "9.0")
    monkeypatch.setitem(kernels.FAMILIES, "dmma", dataclasses.replace(kernels.FAMILIES["dmma"], long_k_tile=None))
    assert small_c_guess((3036, 30, 4386), "float64", hopper) is None
    assert small_c_guess((41, 48, 68), "float64", hopper) is not None


def test_float32_takes_three_tf32_products_on_data_center_gpus_from_sm80_on():
    hopper = DeviceLimits.for_cc("9.0")
    guesses = shape_guesses((4096, 4096, 4096), "float32", on(hopper, 132, "9.0"))
    assert guesses[0].family == "wgmma" and guesses[0].params == {**WGMMA_TILE, "splits": 1}  # sm_90a's own
    assert guesses[1].family == "tf32x3" and guesses[1].params == {**TF32X3_TILE, "mma": "m16n8k8", "splits": 1}
    skinny = shape_guesses((512, 512, 16384), "float32", on(hopper, 132, "9.0"))
    assert [g.params["splits"] for g in skinny[:2]] == [32, 1] and skinny[0].family == "wgmma"  # 16 tiles of 32-K steps
    split, whole = skinny[2:4]  # 32 tiles: split for 2 waves
    assert (split.family, whole.family) == ("tf32x3", "tf32x3")
    assert (split.params["splits"], whole.params["splits"]) == (16, 1)
    ampere = shape_guesses((4096, 4096, 4096), "float32", on(DeviceLimits.for_cc("8.0"), 108, "8.0"))[0]
    assert (ampere.family, ampere.params["mma"]) == ("tf32x3", "m16n8k8")
    for dtype, cc in (("float32", "7.0"), ("float32", "7.5"), ("float32", "8.6"), ("float32", "8.9"), ("float32", None),
                      ("float64", "9.0"), ("int32", "9.0")):
        assert all(g.family not in ("tf32x3", "wgmma") for g in shape_guesses((4096, 4096, 4096), dtype, on(hopper, 132, cc)))
    assert families_for("float32")[:2] == ["wgmma", "tf32x3"] and "dmma" not in families_for("float32")
    assert "tf32x3" not in families_for("float64") and "tf32x3" not in families_for("int32")


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"mma": "m8n8k4"}, "mma='m8n8k4' is not one of ['m16n8k4', 'm16n8k8']"),
        ({"mma": "m16n8k16"}, "mma='m16n8k16' is not one of ['m16n8k4', 'm16n8k8']"),
        ({"bk": 8, "chunk": 2}, "bk=8 is not a multiple of 2 steps of the instruction's K=8"),
        ({"mma": "m16n8k4", "bk": 8, "chunk": 4}, "bk=8 is not a multiple of 4 steps of the instruction's K=4"),
    ],
)
def test_tf32x3_configs_need_a_tf32_shape_and_whole_chunks(change, reason):
    config = {**default_config("tf32x3"), **change}
    assert infeasibility("tf32x3", config, "float32", LIMITS) == reason
    assert infeasibility("tf32x3", {**config, **default_config("tf32x3")}, "float32", LIMITS) is None


def test_the_tensor_core_fit_checks_the_instruction_against_the_dtype():
    """kernels.dmma.fits, which both tensor-core families' restrictions end in: f64's shapes are
    not all TF32 instructions."""
    assert dmma.fits({**default_config("tf32x3"), "mma": "m8n8k4"}, "float32", LIMITS) == "no tf32 mma of shape m8n8k4"
    assert dmma.fits({**default_config("dmma"), "mma": "m16n8k16", "bk": 16, "stages": 2}, "float64", LIMITS) is None
    assert dmma.fits({**default_config("tf32x3"), "mma": "m16n8k16"}, "float32", LIMITS) == "no tf32 mma of shape m16n8k16"


def test_tiles_with_a_lanes_k_adjacent_are_padded_onto_distinct_banks():
    """TF32's split parts read a lane's k's of a K-major row two a load (`paired`): a lane holds one k of a
    row in a 4-deep instruction, so `stored` other than "mn" needs 8. float64 reads one element a load,
    its k's 4 apart, from tiles of any layout and instruction. Each padding is the fewest elements that
    keep rows 16-byte aligned and a phase's loads (8 bytes a lane along K of float32, 8 bytes of float64
    or 4 of float32 down a column or along a row) on distinct banks, and the shared memory counts it, in
    the layout that needs the most."""
    tile = {**default_config("tf32x3"), "mma": "m16n8k4", "stored": "k"}
    assert infeasibility("tf32x3", tile, "float32", LIMITS) == (
        "stored='k' needs an instruction whose K is 8 or more, not 4")
    wide = {**default_config("dmma"), "mma": "m16n8k16", "stored": "memory", "bk": 16, "stages": 2}
    assert infeasibility("dmma", wide, "float64", LIMITS) is None
    assert infeasibility("dmma", {**wide, "mma": "m16n8k4", "stored": "k"}, "float64", LIMITS) is None
    tile = {**default_config("dmma"), "mma": "m16n8k8", "stored": "k", "bk": 16, "stages": 2}
    assert infeasibility("dmma", tile, "float64", LIMITS) is None
    assert [mma_space.k_major_pad(bk, "float32", 2) for bk in (8, 16, 32)] == [0, 8, 8]
    assert [mma_space.mn_pad(side, "float32", 2) for side in (32, 64, 128)] == [4, 4, 4]
    assert [mma_space.spread_pad(bk, "float64") for bk in (8, 16, 32)] == [4, 4, 4]
    for pad in (0, 2, 4):  # float64 K-major rows 128, 144 or 160 bytes apart share banks for 16-byte loads
        row = (16 + pad) * 8
        assert not mma_space.distinct_banks([(lane // 4) * row + (lane % 4) * 16 for lane in range(8)], 16)
    # a lane's k's adjacent (2 t + v) one a load share banks in some row however the rows are padded
    with pytest.raises(ValueError, match="distinct banks"):
        mma_space.fewest_pad(16, 8, 1, lambda row: [[(lane // 4) * row + ((lane % 4) * 2 + v) * 8
                                                     for lane in range(32)] for v in range(2)])
    tile = {**tile, "bm": 128, "bn": 64, "stages": 3}
    assert dmma.shared_bytes(tile, "float64") == 3 * (128 + 64) * (16 + 4) * 8
    memory = {**tile, "stored": "memory"}
    assert dmma.shared_bytes(memory, "float64", "NN") == 3 * (128 * (16 + 4) + 16 * (64 + 4)) * 8
    assert dmma.shared_bytes(memory, "float64", "TN") == 3 * 16 * (128 + 4 + 64 + 4) * 8
    assert dmma.shared_bytes(memory, "float64") == dmma.shared_bytes(memory, "float64", "NT")
    split = {**default_config("tf32x3"), "mma": "m16n8k8", "bm": 128, "bn": 64, "bk": 16, "stages": 3,
             "stored": "memory"}
    assert kernels.family("tf32x3").shared_bytes(split, "float32", "NN") == 3 * (128 * (16 + 8) + 16 * (64 + 4)) * 4


def test_configs_use_only_the_instructions_their_gpu_has():
    t4, a100, h200 = (GpuLimits.for_cc(cc) for cc in ("7.5", "8.0", "9.0"))
    assert GpuLimits.for_cc((9, 0)) == h200 and h200.cc == "9.0"
    assert h200.max_dynamic_shared_per_block == DeviceLimits.for_cc("9.0").max_dynamic_shared_per_block
    piped = {**default_config("vector"), "async_copy": True, "stages": 3}
    assert "cp.async needs compute capability 8.0" in infeasibility("vector", piped, "float32", t4)
    assert infeasibility("vector", piped, "float32", a100) is None
    assert infeasibility("vector", piped, "float32", DeviceLimits.for_cc("7.5")) is None  # no architecture known
    sixteen_rows = {**DMMA_TILE, "mma": "m16n8k4", "splits": 1}
    assert "mma.sync m16n8k4 needs compute capability 9.0" in infeasibility("dmma", sixteen_rows, "float64", a100)
    assert infeasibility("dmma", sixteen_rows, "float64", h200) is None
    assert infeasibility("dmma", {**sixteen_rows, "mma": "m8n8k4"}, "float64", a100) is None
    tf32 = {**default_config("tf32x3")}
    assert "needs compute capability 8.0" in infeasibility("tf32x3", tf32, "float32", t4)
    assert infeasibility("tf32x3", tf32, "float32", a100) is None
    assert feasible_configs("vector", "float32", t4)
    assert not [c for c in feasible_configs("vector", "float32", t4) if c["async_copy"]]
    assert [c for c in feasible_configs("vector", "float32", a100) if c["async_copy"]]
    split = default_config("splitk")
    needs_sm90 = "red.global.add.v4.f32 (16-byte adds into C) needs compute capability 9.0"
    assert needs_sm90 in infeasibility("splitk", split, "float32", a100)
    assert needs_sm90 in infeasibility("streamk", default_config("streamk"), "float32", a100)
    assert infeasibility("splitk", split, "float32", h200) is None
    assert infeasibility("splitk", split, "float64", a100) is None  # float64 adds one element at a time
    assert families_for("float32", "7.5") == [f for f in families_for("float32")
                                              if f not in ("wgmma", "tf32x3", "splitk", "streamk")]
    wgmma = default_config("wgmma")  # sm_90a's instructions: an H100 or H200, and no GPU before or after
    assert infeasibility("wgmma", wgmma, "float32", h200) is None
    for other in (a100, GpuLimits.for_cc("10.0")):
        assert "wgmma.mma_async (sm_90a) needs compute capability 9.0a" in infeasibility("wgmma", wgmma, "float32", other)
    assert "streamk" in families_for("float64", "8.0")
    assert families_for("float64", "8.0") == families_for("float64")


def test_the_shape_rule_pipelines_through_registers_where_cp_async_is_missing():
    t4 = GpuLimits.for_cc("7.5")
    for shape in ((16, 8192, 8192), (512, 512, 4096), (8192, 16, 8192)):  # skinny, few tiles, skinny
        guesses = shape_guesses(shape, "float32", on(t4, 40, "7.5"))
        assert guesses and all(infeasibility(g.family, g.params, "float32", t4) is None for g in guesses)
        assert all(g.family == "vector" and g.params["stages"] == 2 and not g.params["async_copy"] for g in guesses)
    on_h200 = shape_guesses((16, 8192, 8192), "float32", on(GpuLimits.for_cc("9.0"), 132, "9.0"))
    assert any(g.params.get("async_copy") and g.params["stages"] == 4 for g in on_h200)



def test_stream_k_workers_must_fit_on_an_sm_together():
    """Workers that cannot share an SM would wait for one another: a wave of their own."""
    small = {**default_config("streamk"), "bm": 64, "bn": 64, "tm": 8, "tn": 4, "workers_per_sm": 4}  # 128 threads
    assert infeasibility("streamk", small, "float32", DeviceLimits()) is None
    big = {**default_config("streamk"), "workers_per_sm": 4}  # 256 threads of ~200 registers each
    assert "4 blocks" in infeasibility("streamk", big, "float32", DeviceLimits())
    deep = {**default_config("streamk"), "bk": 32, "tm": 8, "tn": 8, "async_copy": True, "stages": 4}  # 135 KB
    hopper = DeviceLimits.for_cc("9.0")
    assert infeasibility("streamk", {**deep, "workers_per_sm": 1}, "float32", hopper) is None
    assert "shared memory > the 232448 an SM holds" in infeasibility("streamk", {**deep, "workers_per_sm": 2},
                                                                    "float32", hopper)


def test_a_tile_families_config_has_a_stream_k_twin():
    split = Config.of("splitk", default_config("splitk"))
    twin = stream_twin(split)
    assert twin.family == "streamk" and twin.params == {**default_config("vector"), "workers_per_sm": STREAM_WORKERS}
    assert stream_twin(Config.of("vector", default_config("vector"))) == twin
    assert stream_twin(Config.of("tf32x3", default_config("tf32x3"))) is None


def test_products_of_a_few_rows_get_the_16_row_tile_with_k_split_for_three_waves():
    limits = GpuLimits.for_cc("9.0")
    guess = few_rows_guess((9, 5003, 1031), "float32", on(limits, 132))
    assert guess == Config.of("splitk", {**FEW_ROWS_TILE, "splits": 16})  # 40 tiles x 16 >= 3 waves of 132
    assert few_rows_guess((8, 1024, 4096), "float32", on(limits, 132)).params["splits"] == 64
    assert few_rows_guess((9, 1555, 333), "float32", on(limits, 132)).params["splits"] == 8  # 2 k-steps a split
    assert few_rows_guess((9, 5003, 1031), "float32", on(limits, 132), deterministic=True) == Config.of("vector", FEW_ROWS_TILE)
    assert few_rows_guess((15, 64, 40), "float32", on(limits, 132)) == Config.of("vector", FEW_ROWS_TILE)  # K too short to split
    assert few_rows_guess((1, 5003, 1031), "int32", on(limits, 132)).family == "splitk"  # gemv's rule: floats
    assert few_rows_guess((16, 5003, 1031), "float32", on(limits, 132)) is None  # a whole 16-row tile: lookup's other steps
    assert few_rows_guess((9, 5003, 1031), "float32", on(limits, 0)) is None  # SM count unknown
    assert few_rows_guess((9, 5003, 1031), "float32", on(GpuLimits.for_cc("8.0"), 108)) is None  # no 16-byte float32 adds


def test_products_of_up_to_4_rows_stream_b_once_with_k_split_by_the_rule():
    limits = GpuLimits.for_cc("9.0")
    # B's rows in memory: 64 columns a block; K split while 128 k's a split and 8 blocks per SM remain
    assert few_rows_guess((1, 4096, 1024), "float32", on(limits, 132)) == Config.of(
        "gemv", {**GEMV_TILES["N"], "rows": 1, "splits": 8, "streamed": False, "a_vectors": False})
    assert few_rows_guess((1, 16384, 4096), "float32", on(limits, 132)).params["splits"] == 4  # 256 tiles x 4 <= 8 x 132
    assert few_rows_guess((3, 5000, 1000), "float32", on(limits, 132)).params == {
        **GEMV_TILES["N"], "rows": 4, "splits": 4, "streamed": False, "a_vectors": False}
    # B's columns in memory (x @ W.T): 16 columns a block, 1024 k's a split at least
    assert few_rows_guess((1, 4096, 1024), "float32", on(limits, 132), layout="NT") == Config.of(
        "gemv", {**GEMV_TILES["T"], "rows": 1, "splits": 1, "streamed": False, "a_vectors": False})
    assert few_rows_guess((2, 2048, 2048), "float32", on(limits, 132), layout="TT").params["splits"] == 2
    assert few_rows_guess((1, 8192, 8192), "float32", on(limits, 132), layout="NT").params["splits"] == 2  # 512 tiles
    assert few_rows_guess((1, 4096, 1024), "float32", on(limits, 132), deterministic=True).params["splits"] == 1
    # adds one element at a time, which every architecture has
    assert few_rows_guess((1, 4096, 1024), "float32", on(GpuLimits.for_cc("8.0"), 108)).family == "gemv"
    assert few_rows_guess((5, 4096, 1024), "float32", on(limits, 132)).family == "splitk"
    # float64: the same tiles, K split while 64 k's a split remain along B's rows, 256 along its columns
    assert few_rows_guess((1, 4096, 1024), "float64", on(limits, 132)).params == {**GEMV_TILES["N"], "rows": 1,
                                                                                  "splits": 16, "streamed": False,
                                                                                  "a_vectors": False}
    assert few_rows_guess((1, 4096, 1024), "float64", on(limits, 132), layout="NT").params["splits"] == 4
    # where the waves leave room, the shares of K decide: 16 x 64 and 4 x 256 k's (float32: 8 x 128, 1 x 1024)
    assert few_rows_guess((1, 1024, 1024), "float64", on(limits, 132)).params["splits"] == 16
    assert few_rows_guess((1, 1024, 1024), "float64", on(limits, 132), layout="NT").params["splits"] == 4
    assert few_rows_guess((1, 1024, 1024), "float32", on(limits, 132)).params["splits"] == 8


def test_the_few_rows_rule_streams_a_b_that_l2_cannot_hold():
    limits = GpuLimits.for_cc("9.0")
    streamed = [few_rows_guess(shape, dtype, on(limits, 132), layout=layout).params["streamed"]
                for shape, dtype, layout in [((4, 4096, 4096), "float32", "NT"), ((1, 4096, 3199), "float32", "NN"),
                                             ((1, 4096, 1599), "float64", "TT"), ((2, 4096, 4096), "float64", "TN")]]
    assert streamed == [True, False, False, True]  # 64 MiB, 50 MiB less a row of B twice, 128 MiB
    assert few_rows_guess((1, 4096, 3200), "float32", on(limits, 132)).params["streamed"]  # 50 MiB


def test_the_few_rows_rule_reads_a_as_vectors_where_b_columns_lie_in_memory():
    limits = GpuLimits.for_cc("9.0")
    tiles = {(m, dtype, layout): few_rows_guess((m, 4096, 4096), dtype, on(limits, 132), layout=layout).params
             for m in (1, 2, 4) for dtype in ("float32", "float64") for layout in ("NT", "TT", "NN")}
    assert [tiles[m, "float32", "NT"]["unroll"] for m in (1, 2, 4)] == [4, 1, 1]
    assert [tiles[m, "float64", "TT"]["unroll"] for m in (1, 2, 4)] == [4, 4, 1]
    assert [tiles[m, "float32", "NT"]["a_vectors"] for m in (1, 2, 4)] == [False, True, True]  # one row: scalars
    assert not any(tiles[m, dtype, "NN"]["a_vectors"] for m in (1, 2, 4) for dtype in ("float32", "float64"))
    assert all(tiles[m, dtype, "NN"]["unroll"] == 4 for m in (1, 2, 4) for dtype in ("float32", "float64"))


def test_short_k_gets_small_tiles_with_the_k_step_that_pads_k_least():
    """A C of a few 32x64 tiles an SM gets that tile up to SHORT_K (past SMALL_K only for at least
    SHORT_K_MIN_TILES_PER_SM of them an SM), BK 16 or 8 by padding (16 on a tie), skinny or not."""
    gpu = on(GpuLimits.for_cc("9.0"), 132)
    assert small_k_guess((459, 669, 58), "float32", gpu) == Config.of("vector", {**SHORT_K_TILE, "bk": 16})  # a tie
    assert small_k_guess((2299, 124, 102), "float32", gpu).params["bk"] == 8  # 144 tiles: 1.1 an SM
    assert small_k_guess((34, 2745, 85), "float32", gpu).params["bm"] == 32  # skinny
    assert small_k_guess((2299, 124, SHORT_K + 1), "float32", gpu) is None  # longer K: split by the table
    assert small_k_guess((179, 59, 135), "float32", gpu) is None  # 6 tiles: K split by the table
    assert small_k_guess((179, 59, SMALL_K), "float32", gpu).params["bm"] == 32  # unsplit up to SMALL_K
    assert small_k_guess((16, 4096, 32), "float32", gpu).params["bm"] == 32  # the smallest fitted side
    assert small_k_guess((15, 4096, 32), "float32", gpu) is None  # a few rows: lookup's few-rows rule
    assert small_k_guess((6528, 4288, 32), "float32", on(GpuLimits.for_cc("9.0"), 0)) is None  # SM count unknown
    assert small_k_guess((64, 16384, 32), "float32", gpu) is None  # skinny, 3.9 32x64 tiles an SM
    assert small_k_guess((1024, 1024, 32), "float64", gpu) is None  # measured in float32 only


def test_a_larger_c_of_a_short_k_gets_the_64x64_tile_through_registers_where_b_is_aligned_and_c_is_big():
    """Past the 32x64 tile's C, the 64x64 tile serves every C of a K up to SMALL_K and a C of up
    to SMALL_K_TILES_PER_SM of its tiles an SM up to SHORT_K. It fetches through registers only
    where B's rows in memory are 16-byte aligned and C makes at least REGISTER_MIN_TILES_PER_SM
    of its tiles an SM; else it copies asynchronously."""
    gpu = on(GpuLimits.for_cc("9.0"), 132)
    assert small_k_guess((4000, 3000, 64), "float32", gpu) == Config.of("vector", SMALL_K_TILE)  # 22 tiles an SM
    assert small_k_guess((6528, 4288, 32), "float32", gpu) == Config.of("vector", SMALL_K_TILE)  # 52: any C
    assert small_k_guess((2896, 1712, 96), "float32", gpu) == Config.of("vector", SMALL_K_TILE)  # 9.4 an SM
    assert small_k_guess((2896, 1713, 96), "float32", gpu) == Config.of("vector", SMALL_K_COPIED_TILE)  # B unaligned
    assert small_k_guess((2896, 1713, 96), "float32", gpu, "NT") == Config.of("vector", SMALL_K_TILE)  # rows of K
    assert small_k_guess((2896, 1712, 97), "float32", gpu, "NT") == Config.of("vector", SMALL_K_COPIED_TILE)
    assert small_k_guess((2008, 944, 60), "float32", gpu) == Config.of("vector", SMALL_K_COPIED_TILE)  # 3.6 an SM
    assert small_k_guess((1024, 1024, SMALL_K + 1), "float32", gpu) == Config.of("vector", SMALL_K_COPIED_TILE)
    assert small_k_guess((4512, 4624, 96), "float32", gpu) is None  # 39 tiles an SM: the measured table
    assert small_k_guess((2896, 1712, SHORT_K + 1), "float32", gpu) is None
    assert small_k_guess((89, 234, 142), "float32", gpu) is None  # 0.09 32x64 tiles an SM: the table's K-splits
    assert small_k_guess((100, 8131, 25), "float32", gpu).params["bm"] == 64  # both sides over SKINNY
    assert small_k_guess((16384, 64, 25), "float32", gpu) is None  # skinny: 3.9 32x64 tiles an SM
    t4 = on(GpuLimits.for_cc("7.5"), 40)  # no asynchronous copies before sm_80
    assert small_k_guess((2896, 1713, 96), "float32", t4) is None  # 31 64x64 tiles an SM: past the cap
    assert small_k_guess((1000, 1001, 64), "float32", t4) == Config.of("vector", SMALL_K_TILE)  # B unaligned: no copies
    assert small_k_guess((34, 2745, 85), "float32", t4) is None  # the 32x64 tile copies asynchronously


def test_row_families_are_searched_only_for_a_few_rows():
    assert "gemv" in families_for("float32", "9.0", 16) and "gemv" in families_for("float32")
    assert "gemv" not in families_for("float32", "9.0", 17)
