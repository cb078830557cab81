"""The peers bench's pure parts and its orchestration, with fake peers computing on NumPy (the
real peers need PyTorch and a GPU; studies/gpu_peers.sh runs them)."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ON_GPU

from autotune import lookup
from autotune.bench import accuracy, peers, report
from autotune.bench.accuracy import Operands, checked_rows, exact_on_host
from autotune.bench.peers import Lineup, Peer, bench_peers, category, geomeans, seeded_shapes, summary
from autotune.bench.suite import parse_shapes
from autotune.measure.measurement import error_bound, reference
from autotune.store.records import shipped_rows, suites

SUITES = suites()


@pytest.mark.parametrize(
    "shape,expected",
    [
        ((64, 8192, 8192), "skinny"), ((8192, 64, 8192), "skinny"), ((65, 65, 65), "odd"),
        ((64, 4096, 17), "skinny"),  # skinny comes before odd
        ((80, 80, 8), "odd"), ((1023, 1024, 1024), "odd"), ((1024, 1024, 1000), "odd"), ((1000, 1000, 1000), "odd"),
        ((2048, 2048, 2048), "large"), ((4096, 2048, 1024), "large"), ((2048, 2048, 2032), "mid"),
        ((700, 700, 700), "odd"),  # 700 is not a multiple of 16
        ((704, 704, 704), "mid"), ((688, 688, 688), None), ((80, 80, 80), None), ((256, 256, 256), None),
    ],
)
def test_categories_follow_the_rule_at_its_boundaries(shape, expected):
    assert category(*shape) == expected


def test_the_wide_suite_spans_the_four_categories():
    counts = {}
    for shape in parse_shapes("wide"):
        counts[category(*shape)] = counts.get(category(*shape), 0) + 1
    assert counts == {"mid": 4, "skinny": 4, "odd": 5, "large": 5}  # 1000^3 is odd by the rule


def test_seeded_shapes_are_reproducible_and_cover_every_category():
    shapes = seeded_shapes()
    assert shapes == seeded_shapes(peers.SEED, 20) and shapes != seeded_shapes(peers.SEED + 1, 20)
    assert [category(*s) for s in shapes] == list(peers.CATEGORIES) * 5
    assert len(set(shapes)) == 20 and all(16 <= size <= 8192 for s in shapes for size in s)


def test_the_committed_seeded_suite_is_the_generators_output_and_was_never_tuned():
    committed = parse_shapes("seeded")
    assert committed == seeded_shapes(peers.SEED, 20)
    tuned = {r.shape for r in shipped_rows("NVIDIA H200", "float32")}
    assert tuned and not tuned & set(committed)


def test_summary_is_the_median_and_the_interquartile_spread():
    assert summary([4.0, 1.0, 2.0, 3.0, 100.0]) == (3.0, pytest.approx((4.0 - 2.0) / 3.0))
    assert summary([2.0]) == (2.0, 0.0)


def row(shape, vs_cublas, vs_triton=None, call_vs_cublas=None):
    return {"m": shape[0], "n": shape[1], "k": shape[2], "category": category(*shape), "vs_cublas": vs_cublas,
            "vs_triton": vs_triton, "call_vs_cublas": call_vs_cublas, "call_vs_triton": None}


def test_geomeans_per_category_over_shapes_measured_on_both_sides():
    rows = [row((1024, 1024, 1024), 0.81, 1.2), row((2000, 2000, 2000), 1.0, None), row((1280, 1280, 1280), 0.9, 0.8),
            row((16, 8192, 8192), 2.0, 0.5, 1.5), row((8192, 16, 8192), 0.5, 2.0), row((256, 256, 256), 4.0)]
    means = geomeans(rows)
    assert means["mid"]["shapes"] == 3 and means["mid"]["vs_cublas"] == pytest.approx((0.81 * 1.0 * 0.9) ** (1 / 3))
    assert means["mid"]["vs_triton"] == pytest.approx(math.sqrt(1.2 * 0.8))  # 2000^3 had no Triton
    assert means["skinny"]["vs_cublas"] == pytest.approx(1.0) and means["skinny"]["vs_triton"] == pytest.approx(1.0)
    assert means["skinny"]["call_vs_cublas"] == pytest.approx(1.5)
    assert means["odd"] == {"shapes": 0, **{key: None for key in peers.RATIOS}}
    assert means["all"]["shapes"] == 6  # 256^3 counts in no category but in all
    assert means["all"]["vs_cublas"] == pytest.approx((0.81 * 0.9 * 4.0) ** (1 / 6))


class NumpyDevice:
    """Operands on the host, and wall-clock 'kernel' timing: enough to run the orchestration."""

    name = "numpy"

    def __init__(self):
        self.versions = {}

    def operands(self, m, n, k, seed):
        rng = np.random.default_rng(seed)
        A, B = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        rows = checked_rows(m, n, k, rng)
        return Operands(A=A, B=B, C=np.empty((m, n), np.float32), rows=rows, expected=reference(A[rows], B),
                        bound=error_bound("float32", k))

    def exact(self, m, n, k, draw, seed):
        return exact_on_host(m, n, k, draw, seed)

    def transposed(self, X):
        return np.ascontiguousarray(X.T).T

    def rows64(self, C, rows):
        return C[rows].astype(np.float64)

    def poison(self, C):
        C.fill(np.nan)

    def sync(self):
        pass

    def to_host(self, C):
        return C.copy()

    def kernel_timer(self, call, operands, calls):
        return WallTimer(call, calls)


class WallTimer:
    method = "loop"

    def __init__(self, call, calls):
        self.call, self.calls = call, calls

    def sample(self):
        started = time.perf_counter()
        for _ in range(self.calls):
            self.call()
        return (time.perf_counter() - started) / self.calls


def numpy_peer(name):
    return Peer(name, lambda A, B, C: lambda: np.matmul(A, B, out=C))


def test_bench_peers_writes_the_json_the_table_and_the_chart(tmp_path, monkeypatch):
    monkeypatch.setattr(peers, "OVERHEAD_SHAPE", (40, 40, 40))
    fakes = [numpy_peer(name) for name in ("mmtune", "cublas", "triton", "triton_tf32x3")]
    absent = {"cupy": "CuPy does not import: no module named cupy"}
    result = bench_peers([(8, 9, 10), (70, 90, 33)], tmp_path, rounds=2, lineup=Lineup(NumpyDevice(), fakes, absent))
    written = json.loads((tmp_path / "peers.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert written["device"] == "numpy" and set(written["call_overhead_us"]) == {"mmtune", *peers.COMPARED}
    assert all(isinstance(us, float) for us in written["call_overhead_us"].values())
    assert written["overhead_row"]["m"] == 40  # measured apart: not among the shapes
    choices = [lookup(m, n, k) for m, n, k in ((8, 9, 10), (70, 90, 33))]
    assert [(r["m"], r["source"], r["family"]) for r in written["rows"]] == [
        (8, choices[0].source, choices[0].family), (70, choices[1].source, choices[1].family)]
    for r in written["rows"]:
        for name in ("mmtune", *peers.COMPARED):
            assert r[f"{name}_call_gflops"] > 0 and r[f"{name}_kernel_gflops"] > 0 and r[f"{name}_first_call_s"] > 0
            assert r[f"{name}_error"] < 1e-6 and r[f"{name}_kernel_timing"] == "loop"
        assert r["cupy_kernel_gflops"] is None and r["failures"] == {}
        assert r["vs_cublas"] == pytest.approx(r["mmtune_kernel_gflops"] / r["cublas_kernel_gflops"])
        assert r["call_vs_triton"] == pytest.approx(r["mmtune_call_gflops"] / r["triton_call_gflops"])
        assert r["vs_triton_tf32x3"] == pytest.approx(r["mmtune_kernel_gflops"] / r["triton_tf32x3_kernel_gflops"])
    assert written["rows"][1]["category"] == "odd" and written["geomeans"]["odd"]["shapes"] == 1
    table = (tmp_path / "peers.md").read_text()
    assert f"| 70x90x33 | odd | {choices[1].source} | {choices[1].family} |" in table
    assert "Absent: CuPy: CuPy does not import" in table and "Call overhead at 40x40x40" in table
    assert (tmp_path / "peers.png").read_bytes()[:4] == b"\x89PNG"


def test_the_error_measures_judge_each_element_by_its_own_terms():
    A, B = np.array([[1.0, -1.0], [3.0, 4.0]]), np.array([[1.0, 0.0], [1.0, 2.0]])
    exact = accuracy.exact_of(A, B, None, slice(None), lambda x: x.astype(np.float64))
    C = A @ B + np.array([[1e-6, 0.0], [0.0, 8e-6]])  # C[0, 0] = 0 from terms of size 1, C[1, 1] = 8 from 4 and 4
    found = accuracy.errors(C, exact)
    assert found.elementwise == pytest.approx(max(1e-6 / 2, 8e-6 / 8))
    assert found.normwise == pytest.approx(math.sqrt(1e-12 + 64e-12) / math.sqrt(0 + 4 + 49 + 64))


def test_every_peer_s_errors_against_float64_are_reported(monkeypatch):
    """Both measures and both draws for each peer that computes, right or wrong: float32 products are
    near float32's epsilon, half-precision inputs 2^-11 off on uniform operands and overflow (no
    error to report) on wide ones; a peer not in the lineup has none."""
    monkeypatch.setattr(peers, "OVERHEAD_SHAPE", (8, 8, 8))

    def half(A, B, C):
        return lambda: np.matmul(A.astype(np.float16).astype(np.float32), B.astype(np.float16), out=C)

    lineup = Lineup(NumpyDevice(), [numpy_peer("mmtune"), Peer("cublas", half), numpy_peer("triton")])
    with np.errstate(over="ignore", invalid="ignore"):
        r = bench_peers([(40, 30, 64)], rounds=1, lineup=lineup)["rows"][0]
    for draw in accuracy.DRAWS:
        assert 0 < r[f"mmtune_error_elementwise_{draw}"] < 64 * 2**-24
        assert 0 < r[f"mmtune_error_normwise_{draw}"] < 2**-20
        assert r[f"triton_tf32x3_error_normwise_{draw}"] is None  # not in the lineup
    assert 2**-14 < r["cublas_error_elementwise_uniform"] < 2**-9 and r["cublas_error_normwise_uniform"] > 2**-14
    assert r["cublas_error_elementwise_wide"] is None and r["cublas_error_normwise_wide"] is None
    assert r["failures"]["cublas"].startswith("wrong product") and r["cublas_kernel_gflops"] is None
    assert set(accuracy.ERROR_KEYS) == {f"error_{m}_{d}" for m in accuracy.MEASURES for d in accuracy.DRAWS}


def test_every_peer_gets_the_operands_in_the_layout_asked(monkeypatch):
    """x @ W.T as nn.Linear computes it: B reaches every peer as the transposed view of an N x K
    array, in the timed calls and in the error draws alike, and the products are still checked."""
    monkeypatch.setattr(peers, "OVERHEAD_SHAPE", (8, 8, 8))
    seen = []

    def recording(A, B, C):
        seen.append((A.flags.c_contiguous, B.flags.f_contiguous and not B.flags.c_contiguous))
        return lambda: np.matmul(A, B, out=C)

    result = bench_peers([(40, 30, 64)], rounds=1, lineup=Lineup(NumpyDevice(), [Peer("mmtune", recording)]),
                         asked=peers.Asked(layout="NT"))
    assert result["layout"] == "NT" and len(seen) > 2 and set(seen) == {(True, True)}
    row = result["rows"][0]
    assert row["source"] == lookup(40, 30, 64, layout="NT").source and row["mmtune_error"] < 1e-6
    assert 0 < row["mmtune_error_elementwise_uniform"] < 64 * 2**-24
    with pytest.raises(ValueError, match="unknown layout"):
        bench_peers([(40, 30, 64)], rounds=1, lineup=Lineup(NumpyDevice(), [Peer("mmtune", recording)]),
                    asked=peers.Asked(layout="XT"))


def test_operands_are_drawn_from_either_distribution():
    uniform = accuracy.exact_on_host(300, 20, 200, "uniform", 0).A
    wide = accuracy.exact_on_host(300, 20, 200, "wide", 0).A
    assert uniform.dtype == wide.dtype == np.float32
    assert -1 <= uniform.min() < -0.99 and 0.99 < uniform.max() <= 1
    exponents = np.log2(abs(wide))
    assert -30 <= exponents.min() < -29 and 29 < exponents.max() <= 30 and (wide < 0).mean() == pytest.approx(0.5, abs=0.02)
    assert not np.array_equal(wide, accuracy.exact_on_host(300, 20, 200, "wide", 1).A)
    with pytest.raises(ValueError, match="unknown draw 'normal'"):
        accuracy.exact_on_host(3, 3, 3, "normal", 0)


def test_a_peer_that_fails_or_is_wrong_is_reported_and_not_timed(monkeypatch):
    monkeypatch.setattr(peers, "OVERHEAD_SHAPE", (8, 8, 8))

    def wrong(A, B, C):
        return lambda: C.fill(1.0)

    def broken(A, B, C):
        def call():
            raise RuntimeError("no kernel image\nfor this device")
        return call

    fakes = [numpy_peer("mmtune"), Peer("cublas", wrong), Peer("triton", broken)]
    result = bench_peers([(12, 13, 14)], rounds=1, lineup=Lineup(NumpyDevice(), fakes))
    r = result["rows"][0]
    assert r["failures"]["triton"] == "RuntimeError: no kernel image"
    assert r["failures"]["cublas"].startswith("wrong product: relative error")
    assert r["cublas_error"] > 0.1 and r["cublas_kernel_gflops"] is None and r["triton_first_call_s"] is None
    assert r["mmtune_kernel_gflops"] > 0 and r["vs_cublas"] is None and result["worst_vs_cublas"] is None
    assert result["call_overhead_us"]["cublas"] is None and result["call_overhead_us"]["mmtune"] is not None
    assert "Failed: Triton at 12x13x14: RuntimeError: no kernel image" in report.markdown(result)


def test_the_goals_report_names_shapes_below_the_floor(monkeypatch):
    monkeypatch.setattr(peers, "OVERHEAD_SHAPE", (8, 8, 8))
    result = bench_peers([(8, 8, 8), (16, 16, 16)], rounds=1,
                         lineup=Lineup(NumpyDevice(), [numpy_peer("mmtune"), numpy_peer("cublas")]))
    ratios = {f"{r['m']}x{r['n']}x{r['k']}": r["vs_cublas"] for r in result["rows"]}
    assert result["worst_vs_cublas"]["ratio"] == min(ratios.values())
    assert result["below_floor"] == [shape for shape, ratio in ratios.items() if ratio < peers.FLOOR]


def test_the_triton_kernel_in_triton_s_interpreter():
    """Where Triton and PyTorch import (not in CI): every tile shape of both kernels' configs, on odd
    sizes."""
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    child = """
import sys
import torch, triton, triton.language as tl
from autotune.bench import triton_peer

@triton.jit
def bounded_by_an_argument(x_ptr, n):
    for i in range(0, n, 1):
        tl.store(x_ptr + i, i)

try:
    bounded_by_an_argument[(1,)](torch.zeros(3), 3)
except Exception as error:  # e.g. Triton 3.6's interpreter with NumPy 2.4, which no longer makes int() of a 1-element array
    print(f"Triton's interpreter cannot run a loop bounded by an argument here: {error}", file=sys.stderr)
    sys.exit(77)
for precision, configs in (("ieee", triton_peer.CONFIGS), ("tf32x3", triton_peer.TF32X3_CONFIGS)):
    for bm, bn, bk in sorted({c[:3] for c in configs}):
        m, n, k = 2 * bm + 3, bn + 5, 2 * bk + 7
        A, B, C = torch.randn(m, k), torch.randn(k, n), torch.full((m, n), float("nan"))
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
        triton_peer._matmul_kernel[grid](A, B, C, m, n, k, *A.stride(), *B.stride(), *C.stride(),
                                         BM=bm, BN=bn, BK=bk, GROUP_M=triton_peer.GROUP_M, PRECISION=precision)
        ref = A.double() @ B.double()
        assert ((C.double() - ref).norm() / ref.norm()).item() < 1e-6, (precision, bm, bn, bk)
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).parent.parent)
    if done.returncode == 77:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.skipif(not ON_GPU, reason="the real peers need PyTorch and a GPU")
def test_the_real_peers_on_the_gpu(tmp_path):
    pytest.importorskip("torch")
    result = bench_peers([(64, 64, 64), (100, 70, 33)], tmp_path, rounds=2)
    assert set(result["peers"]) | set(result["absent"]) == set(peers.PEER_NAMES)
    for r in result["rows"]:
        assert r["failures"] == {}, r["failures"]
        for name in result["peers"]:
            assert r[f"{name}_kernel_gflops"] > 0 and r[f"{name}_call_gflops"] > 0 and r[f"{name}_first_call_s"] > 0
            for draw in accuracy.DRAWS:  # every peer here computes accurate float32, TF32 off
                assert r[f"{name}_error_elementwise_{draw}"] < 1e-5 and r[f"{name}_error_normwise_{draw}"] < 1e-5
    # torch.matmul is captured in a graph; a call costs more than its kernel at 256^3
    assert {r["cublas_kernel_timing"] for r in result["rows"]} == {"graph"}
    assert result["call_overhead_us"]["cublas"] > 0
