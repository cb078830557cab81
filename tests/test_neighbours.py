"""Shapes nobody tuned take the candidate their nearest measured shapes rate best (autotune.select.neighbours)."""

import math

import pytest

import autotune
import autotune.store.records
import kernels
from autotune import memos
from autotune.backends import Device
from autotune.select import neighbours
from autotune.space.configs import DeviceLimits, GpuLimits, infeasibility
from autotune.space.guesses import STREAM_WORKERS, fit_tile, wave_splits
from autotune.space.precision import allows
from autotune.store import records
from autotune.store.records import measured_tables
from autotune.store.rows import Row
from kernels.rules import adds_into_c

SMALL = {"bm": 64, "bn": 64, "bk": 16, "tm": 8, "tn": 4, "pad": 4, "stages": 3, "unroll": True, "fragments": 1,
         "wide_fetch": True, "async_copy": True, "min_blocks": 1}
BIG = {**SMALL, "bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "stages": 1, "async_copy": False}


def table(*shapes):
    return {"device": "NVIDIA H200", "cc": "9.0", "sm_count": 132, "dtype": "float32", "layout": "NN",
            "tiles": [SMALL, BIG], "shapes": [{"m": m, "n": n, "k": k, "cublas_gflops": 100.0, "gflops": speeds}
                                              for (m, n, k), speeds in shapes]}


def test_the_nearest_shapes_vote_and_the_split_follows_the_shape_asked(monkeypatch):
    monkeypatch.setattr(neighbours, "NEIGHBOURS", 3)  # so the far fourth shape has no vote
    found = table(((4096, 4096, 4096), {"0:whole": 50.0, "1:whole": 90.0}),
                  ((2048, 2048, 2048), {"0:whole": 60.0, "1:whole": 80.0}),
                  ((4096, 2048, 4096), {"0:whole": 40.0, "1:whole": 95.0}),
                  ((64, 64, 8192), {"0:whole": 10.0, "0:split": 90.0, "1:whole": 5.0}))
    pick = neighbours.choose(found, (3000, 3000, 3000), 132)
    assert (pick.family, pick.config, pick.name) == ("vector", BIG, "1:whole")
    assert "at the 3 nearest of 4 measured shapes" in pick.basis and "4096x4096x4096 1.00" in pick.basis
    far = neighbours.choose(table(((64, 64, 8192), {"0:whole": 10.0, "0:split": 90.0})), (100, 100, 16384), 132)
    assert (far.family, far.config["splits"]) == ("splitk", wave_splits((100, 100, 16384), SMALL, 132))
    assert far.config["splits"] == 128 and "K split 128 ways" in far.basis
    # split as the shape asked needs: a shape with blocks for two waves is not split at all
    whole = neighbours.choose(table(((64, 64, 8192), {"0:split": 90.0})), (8192, 8192, 8192), 132)
    assert (whole.family, whole.config) == ("vector", SMALL)


def test_a_candidate_is_fitted_to_the_shape_and_split_as_its_policy_says():
    # a 16-row product takes a 16-row tile, keeping its 16 columns of threads
    family, params = neighbours.config_for(BIG, "whole", (16, 4096, 4096), 132, "9.0")
    assert (family, params["bm"], params["tm"], params["bn"], params["tn"]) == ("vector", 16, 4, 128, 8)
    split = neighbours.config_for(SMALL, "split", (100, 100, 4096), 132, "9.0")[1]["splits"]
    deep = neighbours.config_for(SMALL, "deep", (100, 100, 4096), 132, "9.0")[1]["splits"]
    assert (split, deep) == (64, 128)
    assert neighbours.config_for(SMALL, "deep", (4096, 4096, 4096), 132, "9.0") == ("vector", SMALL)
    found = table(((64, 64, 8192), {"0:whole": 10.0, "0:split": 50.0, "0:deep": 90.0}))
    assert neighbours.choose(found, (64, 64, 8192), 132).name == "0:deep"


def WHOLE(family, params):
    """What a deterministic lookup admits (autotune.select.lookup): configs that do not add into C."""
    return not adds_into_c(params)


def test_deterministic_takes_whole_candidates_and_unmeasured_ones_count_low():
    found = table(((64, 64, 8192), {"0:whole": 10.0, "0:split": 90.0, "1:whole": 20.0}))
    pick = neighbours.choose(found, (64, 64, 8192), 132, WHOLE)
    assert (pick.name, pick.family, pick.config) == ("1:whole", "vector", fit_tile(BIG, 64, 64, 8192))
    # tile 1 was not measured at the second shape: it counts as UNMEASURED of that shape's best
    found = table(((256, 256, 256), {"0:whole": 50.0, "1:whole": 60.0}), ((512, 512, 512), {"0:whole": 50.0}))
    shares = {index: [neighbours._speed(s, f"{index}:whole", max(s["gflops"].values())) / max(s["gflops"].values())
                      for s in found["shapes"]]
              for index in (0, 1)}
    assert shares == {0: [50 / 60, 1.0], 1: [1.0, neighbours.UNMEASURED]}
    assert neighbours.choose(found, (300, 300, 300), 132).config == SMALL
    assert neighbours.choose(found, (300, 300, 300), 132, feasible=lambda family, params: params != SMALL).config == BIG
    assert neighbours.choose({**found, "shapes": []}, (300, 300, 300), 132) is None


def test_a_streamed_candidate_shares_the_tiles_k_steps_and_deterministic_passes_it_over():
    family, params = neighbours.config_for(BIG, "stream", (1000, 1000, 1000), 132, "9.0")
    assert (family, params) == ("streamk", {**BIG, "workers_per_sm": STREAM_WORKERS})
    found = table(((1000, 1000, 1000), {"1:stream": 90.0, "1:whole": 80.0, "0:split": 85.0}))
    pick = neighbours.choose(found, (1000, 1000, 1000), 132)
    assert pick.family == "streamk" and f"stream-K on {STREAM_WORKERS} blocks per SM" in pick.basis
    assert neighbours.choose(found, (1000, 1000, 1000), 132, WHOLE).name == "1:whole"


WGMMA = {"family": "wgmma", "bm": 128, "bn": 128, "stages": 4, "min_blocks": 1, "producer": 1}


def test_a_tile_of_a_family_with_its_own_schedules_fits_the_familys_sizes_and_k_step():
    assert neighbours.config_for(WGMMA, "whole", (4096, 4096, 4096), 132, "9.0") == (
        "wgmma", {"bm": 128, "bn": 128, "stages": 4, "min_blocks": 1, "producer": 1, "splits": 1})
    family, params = neighbours.config_for(WGMMA, "deep", (40, 100, 8192), 132, "9.0")
    assert (family, params["bm"], params["bn"]) == ("wgmma", 64, 128)  # 64 covers 40 rows; 100 columns need 128
    # two blocks of C, split for 8 waves with 2 steps of the family's K-step (32) each, as far as its space goes
    assert wave_splits((40, 100, 8192), {"bm": 64, "bn": 128, "bk": 32}, 132, 8, 2) == 128
    assert params["splits"] == max(kernels.family("wgmma").space["splits"]) == 64
    # 64 tiles of 128 x 128: 8 splits fill two waves of 132 SMs
    assert neighbours.config_for(WGMMA, "split", (1024, 1024, 4096), 132, "9.0")[1]["splits"] == 8
    with pytest.raises(ValueError, match="no stream-K"):
        neighbours.config_for(WGMMA, "stream", (4096, 4096, 4096), 132, "9.0")


def test_a_familys_own_tile_splits_k_to_fill_its_waves():
    assert neighbours.policies_for(WGMMA) == ("whole", neighbours.FILL)
    assert neighbours.policies_for(SMALL) == neighbours.POLICIES
    fill = {shape: neighbours.config_for(WGMMA, neighbours.FILL, shape, 132, "9.0")[1]["splits"]
            for shape in ((2048, 2048, 2048), (1000, 1000, 1000), (1792, 1792, 1792), (3000, 500, 2000),
                          (1000, 1000, 256))}
    # one 128 x 128 block an SM: 256 tiles fill two waves of 132 SMs to 97%; 64 tiles need 2 splits,
    # 196 tiles 2 (392 blocks of 396), 96 tiles 4 (384 of 396); a K of 256 keeps every split 4 steps
    assert fill == {(2048, 2048, 2048): 1, (1000, 1000, 1000): 2, (1792, 1792, 1792): 2, (3000, 500, 2000): 4,
                    (1000, 1000, 256): 2}


def test_a_candidate_is_rated_against_the_best_the_lookup_may_take():
    found = {**table(((4096, 4096, 4096), {"0:whole": 50.0, "1:whole": 40.0, "2:whole": 100.0}),
                     ((2048, 2048, 2048), {"0:whole": 40.0, "1:whole": 50.0, "2:whole": 100.0}),
                     ((3072, 3072, 3072), {"0:whole": 60.0, "2:whole": 100.0})),
             "tiles": [SMALL, BIG, WGMMA]}
    def ieee(family, params):
        return allows("ieee", kernels.family(family).precision)

    assert neighbours.choose(found, (3000, 3000, 3000), 132).family == "wgmma"
    pick = neighbours.choose(found, (3000, 3000, 3000), 132, ieee)
    assert pick.family == "vector" and "3072x3072x3072 1.00" in pick.basis  # of the best IEEE candidate there
    # BIG, not measured at 3072^3, counts as UNMEASURED of SMALL's speed there, not of wgmma's
    assert neighbours._speed(found["shapes"][2], "1:whole", 60.0) == neighbours.UNMEASURED * 60.0


def test_shapes_whose_rows_are_aligned_otherwise_stand_farther():
    aligned, unaligned = {"m": 1000, "n": 1000, "k": 1000}, {"m": 1000, "n": 1001, "k": 1000}
    nn = table()
    assert neighbours.distance((1000, 1000, 1000), "NN", aligned, nn) == 0
    assert neighbours.distance((1000, 1000, 1000), "NN", unaligned, nn) == pytest.approx(
        neighbours.ALIGNMENT_DISTANCE + autotune.store.rows.shape_distance((1000, 1000, 1000), (1000, 1001, 1000)))
    # in NT, B's rows run along K: a K of 1001 leaves them unaligned, an N of 1001 only C's
    assert neighbours.distance((1000, 1000, 1001), "NT", {"m": 1000, "n": 1000, "k": 1001}, nn) == 0
    # rows of 1002 float64 are 16-byte aligned, of 1002 float32 not
    assert neighbours.distance((1000, 1002, 1000), "NN", aligned, {**nn, "dtype": "float64"}) == pytest.approx(
        autotune.store.rows.shape_distance((1000, 1002, 1000), (1000, 1000, 1000)))
    found = table(((1000, 1000, 1000), {"0:whole": 100.0, "1:whole": 10.0}),
                  ((1024, 1001, 1024), {"0:whole": 10.0, "1:whole": 100.0}))
    assert neighbours.choose(found, (1024, 1003, 1024), 132).name == "1:whole"
    assert neighbours.choose(found, (1024, 1024, 1024), 132).name == "0:whole"


def test_table_of_gives_every_candidate_the_speed_of_the_job_it_came_to():
    measured = {"device": "NVIDIA H200", "kernels": {"vector": "abc"}, "tiles": [SMALL, BIG], "shapes": [
        {"shape": [100, 200, 300], "cublas_gflops": 99.94, "jobs": [
            {"family": "vector", "params": SMALL, "candidates": ["0:whole"], "gflops": 10.04},
            {"family": "splitk", "params": {**SMALL, "splits": 4}, "candidates": ["0:split", "0:deep"], "gflops": 20.0},
            {"family": "splitk", "params": {**SMALL, "splits": 2}, "candidates": [], "lookup": "measured",
             "gflops": 30.0},
            {"family": "vector", "params": BIG, "candidates": ["1:whole"], "gflops": None, "error": "wrong product"}]},
        {"shape": [1, 2, 3], "jobs": [{"family": "vector", "params": BIG, "candidates": ["1:whole"], "gflops": 5.0}]}]}
    found = neighbours.table_of(measured, "9.0", 132)
    assert found["tiles"] == [SMALL, BIG] and found["kernels"] == {"vector": "abc"}
    assert [(s["m"], s["gflops"], s["cublas_gflops"]) for s in found["shapes"]] == [
        (100, {"0:whole": 10.0, "0:split": 20.0, "0:deep": 20.0}, 99.9), (1, {"1:whole": 5.0}, 0)]
    import json

    assert json.loads(neighbours.dumps(found)) == found


def test_the_shipped_table_is_usable_and_its_picks_hold_up_leaving_each_shape_out():
    (shipped,) = [t for t in measured_tables() if t["device"] == "NVIDIA H200"]
    limits = DeviceLimits.for_cc(shipped["cc"])
    assert len(shipped["shapes"]) >= 100 and all(s["gflops"] for s in shipped["shapes"])
    for shape in shipped["shapes"]:  # every candidate measured comes to a config lookup can serve there
        for name in shape["gflops"]:
            family, params = neighbours.config_for(shipped["tiles"][neighbours.index_of(name)], name.split(":")[1],
                                                   (shape["m"], shape["n"], shape["k"]), shipped["sm_count"],
                                                   shipped["cc"])
            assert infeasibility(family, params, "float32", limits) is None, (shape, name)
    for precision in ("ieee", "tf32x3"):
        def feasible_at(shape, precision=precision):  # as lookup's: a precision at the shape's K
            return lambda family, params: allows(precision, kernels.family(family).precision, shape[2])

        found = neighbours.leave_one_out(shipped, shipped["sm_count"], feasible_at)
        of_best = math.exp(sum(math.log(r["of_best"]) for r in found) / len(found))
        assert of_best >= 0.88, (precision, of_best)  # docs/performance.md, steps 24 and 40: 0.929 and 0.918


@pytest.fixture
def pretend(monkeypatch):
    def to_be(gpu: str):
        monkeypatch.setenv("MMTUNE_PRETEND_GPU", gpu)
        memos.clear()

    yield to_be
    memos.clear()


def test_lookup_serves_the_measured_pick_to_shapes_without_an_exact_row(pretend):
    pretend("NVIDIA H100 80GB HBM3;9.0;132")  # K past the short-K rule (autotune.space.guesses.SHORT_K)
    choice = autotune.lookup(3001, 997, 177)
    assert (choice.source, choice.measured_on, choice.gpu_match) == ("measured", "NVIDIA H200", "same compute capability and SM count")
    assert choice.basis.startswith("measured: tile ")
    assert autotune.lookup(4096, 4096, 4096).source == "exact"  # a tuned row of the very shape goes first
    # tf32x3 at untuned shapes: the warpgroup family where its tiles won, rows 16-byte aligned or not
    # (docs/performance.md, step 48), FFMA where K is a few steps
    for shape in ((3000, 3000, 3000), (2500, 2048, 1536), (6160, 656, 3872), (3001, 3001, 3001), (5003, 2999, 1501)):
        assert autotune.lookup(*shape, precision="tf32x3").family == "wgmma", shape
        assert kernels.family(autotune.lookup(*shape).family).precision == "ieee", shape
    assert autotune.lookup(3001, 997, 177, precision="tf32x3").family != "wgmma"
    assert autotune.lookup(16, 8192, 8192 - 16, deterministic=True).family != "splitk"
    assert autotune.lookup(3001, 997, 177, dtype="float64").source != "measured"  # no float64 table ships
    pretend("NVIDIA A100-SXM4-80GB;8.0;108")  # neither rows nor a table of its architecture
    choice = autotune.lookup(3001, 997, 177)
    assert (choice.source, choice.measured_on, choice.gpu_match) == ("measured", "NVIDIA H200", "another architecture")


def test_a_gpu_of_another_architecture_gets_the_table_within_the_instructions_it_has(pretend):
    shapes = [(1024, 1024, 1024), (16, 8192, 8192), (64, 4096, 16384), (4096, 4096, 4096), (3001, 997, 77),
              (5000, 16, 3000), (1023, 1025, 999)]
    pretend("Tesla T4;7.5;40")  # no cp.async before sm_80
    t4 = GpuLimits.for_cc("7.5")
    for shape in shapes:
        choice = autotune.lookup(*shape)
        assert (choice.source, choice.gpu_match) == ("measured", "another architecture"), shape
        assert infeasibility(choice.family, choice.config, "float32", t4) is None and not choice.config["async_copy"]
        assert choice.family == "vector"  # float32 split-K adds 16 bytes at a time, from sm_90 on
    assert autotune.lookup(1024, 1024, 1024, dtype="float64").source == "default"  # no float64 table ships
    pretend("NVIDIA A100-SXM4-80GB;8.0;108")
    picks = [autotune.lookup(*shape) for shape in shapes]
    assert any(pick.config["async_copy"] for pick in picks) and all(pick.family == "vector" for pick in picks)
    pretend("NVIDIA H100 PCIe;9.0;114")  # its own architecture: split-K where the table votes for it
    assert "splitk" in {autotune.lookup(*shape).family for shape in shapes}


def test_rows_of_the_gpus_own_architecture_come_before_another_architectures_table(pretend, monkeypatch):
    row = Row(device="NVIDIA A100-SXM4-80GB", cc="8.0", sm_count=108, dtype="float32", m=1024, n=1024, k=1024,
              family="shared", params={"tpb": 16, "pad": 1}, gflops=9000.0, source_hash=kernels.source_hash("shared"))
    monkeypatch.setattr(autotune.store.records, "shipped_rows", lambda device=None, dtype=None: [row])
    pretend("NVIDIA A100-SXM4-80GB;8.0;108")
    assert autotune.lookup(1024, 1024, 1024).source == "exact"
    assert autotune.lookup(1000, 1000, 1000).family == "shared"  # its own row, nearest or by the model


def test_the_table_comes_from_the_closest_gpu_then_the_nearest_architecture():
    tables = [{"device": name, "cc": cc, "sm_count": sms, "dtype": "float32"}
              for name, cc, sms in (("NVIDIA H200", "9.0", 132), ("NVIDIA A100", "8.0", 108), ("RTX 4090", "8.9", 128))]

    def closest(device, cc, sms, dtype="float32"):
        found = records.closest_table(tables, dtype, Device(device, cc, sms))
        return found and (records.GPU_MATCHES[found[0]], found[1]["device"])

    assert closest("NVIDIA H200", "9.0", 132) == ("this GPU model", "NVIDIA H200")
    assert closest("NVIDIA H100 80GB HBM3", "9.0", 132) == ("same compute capability and SM count", "NVIDIA H200")
    assert closest("NVIDIA H100 PCIe", "9.0", 114) == ("same compute capability", "NVIDIA H200")
    assert closest("NVIDIA L4", "8.9", 58) == ("same compute capability", "RTX 4090")
    assert closest("NVIDIA A10", "8.6", 72) == ("another architecture", "RTX 4090")  # same major, nearest minor
    del tables[2]
    assert closest("NVIDIA A10", "8.6", 72) == ("another architecture", "NVIDIA A100")  # same major version first
    assert closest("Tesla T4", "7.5", 40) == ("another architecture", "NVIDIA A100")
    assert closest("B200", "10.0", 148) == ("another architecture", "NVIDIA H200")
    assert closest("simulator", "", 0) is None and closest("NVIDIA H200", "9.0", 132, "float64") is None

