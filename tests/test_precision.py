"""The precision a caller asks for: "ieee" (the default) never gets a tensor-core float32 kernel,
"tf32x3" gets the faster of both; the cache keys rows by their kernel's precision, and caches,
records and studies written before precisions existed read as their family's."""

import json
import math
import sqlite3
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.errors import PrecisionError
from autotune import memos
import autotune
import autotune.store.records
import kernels
from kernels import Config
from autotune.space import precision
from autotune.store import shapes
from autotune.errors import RecordsError
from autotune.store.cache import Cache
from autotune.store.rows import validate_records
from autotune.space.problem import Problem
from autotune.cli import app
from autotune.tune.study import study_name
from autotune.tune.tuner import TuneError, TuneRequest
from autotune.store.rows import Row

H200 = "NVIDIA H200"
# small tiles in the families' spaces, so that lookup serves them and the simulator runs them fast
TF32X3 = {**kernels.family("tf32x3").default, "bm": 32, "bn": 32, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 2,
          "chunk": 1, "mma": "m16n8k8"}
VECTOR = {**kernels.family("vector").default, "bm": 32, "bn": 16, "tm": 4, "tn": 4, "bk": 8}


@pytest.fixture(autouse=True)
def pretend_h200(monkeypatch):
    monkeypatch.setenv("MMTUNE_PRETEND_GPU", f"{H200};9.0;132")
    monkeypatch.setattr(autotune.store.records, "measured_tables", lambda: [])
    monkeypatch.setattr(autotune.store.records, "shipped_rows", lambda device=None, dtype=None: [])
    memos.clear()
    yield
    memos.clear()


def row(family: str, params: dict, gflops: float, shape=(32, 16, 256), **fields) -> Row:
    m, n, k = shape
    return Row(device=H200, cc="9.0", sm_count=132, dtype="float32", m=m, n=n, k=k, family=family, params=params,
                gflops=gflops, source_hash=kernels.source_hash(family), **fields)


def test_precisions_are_checked_in_any_case():
    assert precision.check("TF32x3") == "tf32x3" and precision.check("IEEE") == "ieee"
    with pytest.raises(PrecisionError, match="unknown precision 'fp16'; known: ieee, tf32x3"):
        precision.check("fp16")
    assert precision.resolve(None, "float32", "9.0") == "ieee"  # until tf32x3 holds subnormals as IEEE does
    assert precision.allows("tf32x3", "ieee") and not precision.allows("ieee", "tf32x3")


def test_an_ieee_lookup_never_serves_a_tensor_core_row_and_tf32x3_takes_the_faster():
    Cache().record(row("tf32x3", TF32X3, 900.0))
    Cache().record(row("vector", VECTOR, 500.0))
    memos.clear()
    assert autotune.lookup(32, 16, 256).family == "vector"
    faster = autotune.lookup(32, 16, 256, precision="tf32x3")
    assert (faster.family, faster.precision, faster.source) == ("tf32x3", "tf32x3", "exact")
    Cache().record(row("vector", VECTOR, 1000.0))
    memos.clear()
    assert autotune.lookup(32, 16, 256, precision="tf32x3").family == "vector"
    assert {(r.family, r.precision) for r in Cache().rows()} == {("tf32x3", "tf32x3"), ("vector", "ieee")}


def test_a_short_k_takes_the_ieee_kernels_in_any_precision():
    """Below precision.MIN_K terms the tensor cores' float32 errs more than cuBLAS's (docs/performance.md,
    step 55): neither lookup nor a tune offers them there, a row of them included, and a tune
    that names them is refused."""
    k = precision.MIN_K["tf32x3"]
    Cache().record(row("tf32x3", TF32X3, 900.0, shape=(32, 16, k - 1)))
    memos.clear()
    assert autotune.lookup(32, 16, k - 1, precision="tf32x3").precision == "ieee"
    assert not precision.allows("tf32x3", "tf32x3", k - 1) and precision.allows("tf32x3", "tf32x3", k)
    assert precision.allows("tf32x3", "ieee", 1)
    assert not {"wgmma", "tf32x3"} & set(TuneRequest(64, 64, k - 1, precision="tf32x3").families_on("9.0"))
    with pytest.raises(TuneError, match=f"wgmma kernels serve products of at least {k} terms, not K = {k - 1}"):
        TuneRequest(64, 64, k - 1, precision="tf32x3", families=["wgmma"]).families_on("9.0")


def test_no_ieee_row_at_the_shape_means_a_fallback_not_the_tensor_cores():
    Cache().record(row("tf32x3", TF32X3, 900.0))
    memos.clear()
    choice = autotune.lookup(32, 16, 256)
    assert choice.family != "tf32x3" and choice.source != "exact" and choice.precision == "ieee"


def test_a_cache_of_an_older_mmtune_reads_its_rows_as_their_family_computes(isolated_cache):
    isolated_cache.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(isolated_cache)
    db.execute("CREATE TABLE best (device TEXT, dtype TEXT, m INTEGER, n INTEGER, k INTEGER, family TEXT, params TEXT,"
               " gflops FLOAT, layout TEXT NOT NULL DEFAULT 'NN', PRIMARY KEY (device, dtype, m, n, k, layout))")
    for family, params in (("tf32x3", TF32X3), ("vector", VECTOR)):
        db.execute("INSERT INTO best VALUES (?, 'float32', 32, 16, ?, ?, ?, 1.0, 'NN')",
                   [H200, 24 if family == "vector" else 48, family, json.dumps(params)])
    db.commit()
    db.close()
    assert {(r.family, r.precision) for r in Cache().rows()} == {("tf32x3", "tf32x3"), ("vector", "ieee")}
    Cache().record(row("vector", VECTOR, 2.0, shape=(32, 16, 48)))  # beside the tf32x3 row, not over it
    assert len(Cache().rows(shape=(32, 16, 48))) == 2


def test_records_without_a_precision_are_their_familys_and_a_wrong_one_is_refused():
    rows = [{**row(family, params, 1.0).as_dict(), "precision": None} for family, params in (("tf32x3", TF32X3), ("vector", VECTOR))]
    assert [r.precision for r in validate_records(rows)] == ["tf32x3", "ieee"]
    with pytest.raises(RecordsError, match="row 0: precision is invalid \\('tf32'\\)"):
        validate_records([{**rows[0], "precision": "tf32"}])


def test_the_simulator_gives_ieee_answers_through_tf32x3_as_a_user_would_meet_it():
    """The issue's reproduction: a tf32x3 row for a small shape, then matmul with Inf in A."""
    Cache().record(row("tf32x3", TF32X3, 900.0))
    memos.clear()
    rng = np.random.default_rng(5)
    A, B = rng.uniform(0.5, 1.5, (32, 24)).astype(np.float32), rng.uniform(0.5, 1.5, (24, 16)).astype(np.float32)
    A[1, 2], A[3, 4], A[5, 6] = math.inf, -math.inf, math.nan
    C = autotune.matmul(A, B, precision="tf32x3")
    assert autotune.lookup(32, 16, 256, precision="tf32x3").family == "tf32x3"
    assert np.isposinf(C[1]).all() and np.isneginf(C[3]).all() and np.isnan(C[5]).all()
    assert np.isfinite(np.delete(C, [1, 3, 5], axis=0)).all()


def test_a_tune_searches_the_families_its_precision_allows_and_names_its_study_so():
    assert "tf32x3" not in TuneRequest(64, 64, 256).families_on("9.0")
    assert TuneRequest(64, 64, 256, precision="tf32x3").families_on("9.0")[:2] == ["wgmma", "tf32x3"]
    assert TuneRequest(64, 64, 256).study_precision("9.0") == "ieee"  # it leaves tf32x3 out
    assert TuneRequest(64, 64, 256, precision="tf32x3").study_precision("9.0") is None  # names as before
    assert TuneRequest(64, 64, 256, dtype="float64").study_precision("9.0") is None  # IEEE either way
    assert TuneRequest(64, 64, 256).study_precision("7.5") is None  # no tensor cores to leave out
    short = precision.MIN_K["tf32x3"] - 1  # tf32x3 searches the IEEE families there, in ieee's study
    assert TuneRequest(64, 64, short, precision="tf32x3").study_precision("9.0") == "ieee"
    assert study_name(Problem(H200, "float32", 1, 2, 3, "TN", "ieee"), narrowed=True).startswith(f"mmtune:{H200}:float32:1x2x3:TN:ieee:space-")
    with pytest.raises(TuneError, match="unknown precision 'fast'"):
        TuneRequest(64, 64, 256, precision="fast").check()
    with pytest.raises(TuneError, match="tf32x3 kernels do not multiply float64"):
        TuneRequest(64, 64, 256, dtype="float64", families=["tf32x3"]).check()


def test_a_tf32x3_tune_of_a_short_k_searches_in_ieees_study(monkeypatch):
    """At a K under MIN_K a tf32x3 tune searches the IEEE families, so it resumes ieee's study."""
    from autotune.tune.replay import Replay
    from autotune.tune.tuner import tune

    monkeypatch.setenv("MMTUNE_PRETEND_GPU", f"{H200};9.0;132")
    memos.clear()
    k = precision.MIN_K["tf32x3"] - 1
    result = tune(TuneRequest(16, 16, k, trials=2, jobs=1, families=["vector"], precision="tf32x3"),
                  Replay(default=1.0), show_progress=False)
    assert result.study_name == study_name(Problem(H200, "float32", 16, 16, k, precision="ieee"), narrowed=True)


def test_the_fleet_reads_study_names_of_a_precision():
    from autotune.tune.fleet import parse_study_name

    name = study_name(Problem(H200, "float32", 8, 9, 10, "TN", "ieee"), narrowed=True)
    assert parse_study_name(name) == (H200, "float32", (8, 9, 10), "TN")
    plain = study_name(Problem(H200, "float32", 8, 9, 10, precision="ieee"), narrowed=True)
    assert parse_study_name(plain) == (H200, "float32", (8, 9, 10), "NN")


def test_the_kernel_store_remembers_each_precisions_choice(tmp_path):
    ieee, tensor = row("vector", VECTOR, 500.0), row("tf32x3", TF32X3, 900.0, precision="tf32x3")
    shapes.remember_preferred([ieee, tensor], tmp_path)
    asked = Problem(H200, "float32", 32, 16, 256)
    assert shapes.recall(asked, tmp_path) == Config.of("vector", VECTOR)
    assert shapes.recall(replace(asked, precision="tf32x3"), tmp_path) == Config.of("tf32x3", TF32X3)
    shapes.remember_preferred([tensor], tmp_path / "other")
    assert shapes.recall(asked, tmp_path / "other") is None


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_cli_takes_a_precision_in_any_case_and_refuses_others_in_one_line():
    Cache().record(row("tf32x3", TF32X3, 900.0))
    Cache().record(row("vector", VECTOR, 500.0))
    found = invoke("lookup", "--m", 32, "--n", 16, "--k", 256, "--precision", "TF32X3")
    assert found.exit_code == 0 and found.stdout.startswith("exact: tf32x3 {") and "(tf32x3)" in found.stdout
    assert invoke("lookup", "--m", 32, "--n", 16, "--k", 256).stdout.startswith("exact: vector {")
    listed = json.loads(invoke("best", "--json", "--precision", "tf32x3").stdout)
    assert [r["family"] for r in listed] == ["tf32x3"]
    for command in (("lookup", "--m", 4, "--n", 4, "--k", 4), ("best",), ("bench", "--shapes", "4x4x4", "--simulate"),
                    ("tune", "--m", 4, "--n", 4, "--k", 4, "--simulate")):
        result = invoke(*command, "--precision", "fp16")
        assert (result.exit_code, result.stderr) == (2, "error: unknown precision 'fp16'; known: ieee, tf32x3\n")
    refused = invoke("tune", "--m", 4, "--n", 4, "--k", 4, "--family", "tf32x3", "--simulate")
    assert refused.exit_code == 2
    assert refused.stderr == ("error: tf32x3 kernels compute in tf32x3 precision, which --precision ieee does not "
                              "allow\n")
