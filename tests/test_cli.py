import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernels
from autotune.store.cache import Cache
from autotune.cli import app
from autotune.store.rows import Row

runner = CliRunner()
ROW = dict(device="NVIDIA H200", dtype="float32", m=1024, n=1024, k=1024, family="shared",
           params={"pad": 1, "tpb": 16}, gflops=6020.5, median_ms=0.3567, spread=0.012, trials=40,
           cc="9.0", driver="13.0", numba="0.68.0", numba_cuda="0.30.4", source_hash="abc",
           created="2026-11-22T02:00:00+00:00", study="mmtune:NVIDIA H200:float32:1024x1024x1024", sm_count=132,
           layout="NN", precision="ieee")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_tune_then_resume_then_best_in_the_simulator():
    first = invoke("tune", "--m", 5, "--n", 6, "--k", 7, "--trials", 2, "--family", "shared", "--simulate", "--dtype", "int32",
                   "--jobs", 1)
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert "best for simulator int32 5x6x7: shared {" in first.stdout
    assert any(line.startswith("  written to the cache") for line in lines)
    assert "2 trials (2 new, 0 failed)" in first.stdout
    again = invoke("tune", "--m", 5, "--n", 6, "--k", 7, "--trials", 2, "--family", "shared", "--simulate", "--dtype", "int32",
                   "--jobs", 1)
    assert "2 trials (0 new, 0 failed)" in again.stdout
    rows = json.loads(invoke("best", "--json").stdout)
    assert [(r["device"], r["dtype"], r["m"], r["n"], r["k"], r["family"]) for r in rows] == [("simulator", "int32", 5, 6, 7, "shared")]
    assert rows[0]["trials"] == 2


def test_best_json_prints_the_rows_exactly():
    Cache().record(Row.of(ROW))
    result = invoke("best", "--json", "--m", 1024, "--n", 1024, "--k", 1024)
    assert result.exit_code == 0
    assert json.loads(result.stdout) == [{**ROW, "stale": True}]  # "abc" is not today's code


def test_best_table():
    Cache().record(Row.of(ROW))
    Cache().record(Row.of({**ROW, "m": 2048, "gflops": 0.5, "source_hash": kernels.source_hash("shared")}))
    lines = invoke("best", "--dtype", "float32").stdout.splitlines()
    assert [c.strip() for c in lines[1].split("┃")[1:-1]] == [
        "device", "dtype", "M", "N", "K", "layout", "precision", "family", "params", "GFLOPS", "spread", "trials",
        "tuned", "code"]
    body = [[c.strip() for c in line.split("│")[1:-1]] for line in lines[3:5]]
    assert body == [
        ["NVIDIA H200", "float32", "1024", "1024", "1024", "NN", "ieee", "shared", "pad=1 tpb=16", "6,020", "1.2%",
         "40", "2026-11-22", "stale"],
        ["NVIDIA H200", "float32", "2048", "1024", "1024", "NN", "ieee", "shared", "pad=1 tpb=16", "0.5", "1.2%",
         "40", "2026-11-22", "current"],
    ]


def test_best_of_an_empty_cache_is_an_empty_list():
    assert json.loads(invoke("best", "--json").stdout) == []


def test_bench_in_the_simulator(tmp_path):
    result = invoke("bench", "--shapes", "4x5x6", "--out", tmp_path, "--simulate", "--no-seeds")
    assert result.exit_code == 0, result.output
    assert "│ 4x5x6 │ default     │ register │" in result.stdout
    assert (tmp_path / "bench.json").exists()


def test_bench_peers_needs_pytorch_and_a_gpu():
    result = invoke("bench", "--peers", "--shapes", "4x5x6", "--simulate")
    assert result.exit_code == 2 and result.stderr.startswith("error: --peers needs PyTorch")
    assert len(result.stderr.splitlines()) == 1


def test_sweep_prints_the_seeds_tables_in_the_simulator(tmp_path):
    result = invoke("sweep", "--sizes", "4,6", "--blocks", "8", "--elements", "16", "--register-size", 9, "--out", tmp_path, "--simulate")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # the title wraps where the simulator's timings make the table narrower than it
    top = next(index for index, line in enumerate(lines) if line.startswith("┏"))
    assert " ".join(line.strip() for line in lines[:top]) == "global memory (naive), GFLOPS"
    assert lines[top + 1].startswith("┃ size  ┃ 8*8")
    assert lines[top + 3].startswith("│ 4*4*4 │") and lines[top + 4].startswith("│ 6*6*6 │")
    assert "register 32x32 tiles at 9^3" in result.stdout and "│ 16                  │ 64      │" in result.stdout
    assert lines[-1] == f"on simulator; written to {tmp_path}"
    assert "measuring shared 6^3, block 8x8\n" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv", "sweep.json", "sweep.png"]


def test_lookup_in_the_simulator():
    result = invoke("lookup", "--m", 8, "--n", 8, "--k", 8, "--simulate")
    assert result.exit_code == 0
    assert result.stdout.startswith('default: register {"bm": 64')


@pytest.mark.parametrize(
    "args,message",
    [
        (("tune", "--m", 0, "--n", 4, "--k", 4, "--simulate"), "error: M, N and K must be positive, got 0x4x4\n"),
        (("tune", "--m", 4, "--n", 4, "--k", 4, "--dtype", "float16", "--simulate"), "error: unsupported dtype 'float16'; supported: float32, float64, int32\n"),
        (("tune", "--m", 4, "--n", 4, "--k", 4, "--family", "cublas", "--simulate"), "error: unknown kernel family 'cublas'; known: wgmma, dmma, tf32x3, vector, splitk, register, streamk, shared, naive, gemv\n"),
        (("best", "--m", 4), "error: give all of --m, --n and --k, or none\n"),
        (("bench", "--shapes", "4x4", "--simulate"), "error: '4x4' is neither a suite (standard, squares, quick, wide, seeded) nor a shape MxNxK\n"),
        (("bench", "--peers", "--dtype", "float64", "--simulate"), "error: --peers times float32 only\n"),
        (("bench", "--layout", "NT", "--simulate"), "error: --layout needs --peers: the kernel bench times NN products\n"),
        (("sweep", "--sizes", "8,x", "--simulate"), "error: --sizes takes positive integers like 8,16,32; got '8,x'\n"),
        (("sweep", "--sizes", "8", "--dtype", "float16", "--simulate"), "error: unsupported dtype 'float16'; supported: float32, float64, int32\n"),
        (("lookup", "--m", 4, "--n", 4, "--k", 4, "--dtype", "bool"), "error: unsupported dtype 'bool'; supported: float32, float64, int32\n"),
        (("check", "--family", "naive", "--sample", 1), "error: compiling to PTX needs numba-cuda without NUMBA_ENABLE_CUDASIM\n"),
        (("check", "--family", "splitk", "--cc", "8.0"), "error: no splitk config runs here for float32: "
         "red.global.add.v4.f32 (16-byte adds into C) needs compute capability 9.0, this GPU has 8.0\n"),
    ],
)
def test_user_mistakes_are_one_line_on_stderr(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr == message
    assert "Traceback" not in result.output


def test_a_corrupt_cache_is_reported_not_overwritten(isolated_cache):
    isolated_cache.parent.mkdir(parents=True)
    isolated_cache.write_bytes(b"garbage" * 500)
    result = invoke("best")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {isolated_cache} is not a usable mmtune cache")
    assert isolated_cache.read_bytes() == b"garbage" * 500


def test_cache_check_and_reset_set_a_damaged_file_aside(isolated_cache):
    assert invoke("cache", "check").stdout == f"no cache yet at {isolated_cache}\n"
    cache = Cache()
    cache.record(Row.of(ROW))
    cache.close()  # an open connection would checkpoint its WAL into the file set aside below
    assert invoke("cache", "check").stdout == f"ok: {isolated_cache}\n"
    isolated_cache.write_bytes(b"garbage" * 500)
    checked = invoke("cache", "check")
    assert checked.exit_code == 1 and "is not a usable mmtune cache" in checked.stderr
    assert "`mmtune cache reset` sets the file aside" in invoke("best").stderr
    reset = invoke("cache", "reset")
    moved = list(isolated_cache.parent.glob("cache.db.bad-*"))
    assert reset.stdout == f"moved {isolated_cache} to {moved[0]}\n" and moved[0].read_bytes() == b"garbage" * 500
    assert json.loads(invoke("best", "--json").stdout) == []


def test_export_then_import_merges_keeping_the_faster_rows(tmp_path, monkeypatch):
    Cache().record(Row.of(ROW))
    Cache().record(Row.of({**ROW, "dtype": "float64", "gflops": 100.0}))
    exported = tmp_path / "rows.json"
    assert invoke("export", "--out", exported).exit_code == 0
    assert json.loads(exported.read_text()) == json.loads(invoke("export").stdout)
    monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / "other" / "cache.db"))
    Cache().record(Row.of({**ROW, "gflops": 9000.0, "family": "register", "params": {"bm": 64}}))
    result = invoke("import", exported)
    assert result.stdout == f"imported 2 rows from {exported}: 1 written, 1 kept (the cache's were current or faster)\n"
    rows = {r.dtype: (r.family, r.gflops) for r in Cache().rows()}
    assert rows == {"float32": ("register", 9000.0), "float64": ("shared", 100.0)}


@pytest.mark.parametrize(
    "content,message",
    [
        ("not json", "Expecting value"),
        ('{"rows": []}', "expected a JSON list of cache rows"),
        ('[{"device": "GPU"}]', "row 0: dtype is missing or invalid (None)"),
        (json.dumps([ROW, {**ROW, "gflops": -1}]), "row 1: gflops is missing or invalid (-1)"),
        (json.dumps([{**ROW, "colour": "red"}]), "row 0: unknown fields ['colour']"),
    ],
)
def test_import_refuses_a_malformed_file_and_leaves_the_cache_alone(tmp_path, content, message):
    Cache().record(Row.of(ROW))
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = invoke("import", bad)
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {bad}: ") and message in result.stderr
    assert Cache().rows() == [Row.of(ROW)]


def test_plot_draws_the_shipped_studies_and_a_bench_chart(tmp_path):
    from pathlib import Path

    h200 = Path(__file__).parent.parent / "studies" / "h200"
    result = invoke("plot", "--out", tmp_path, "--storage", h200 / "studies.journal.xz", "--bench", h200 / "bench.json")
    assert result.exit_code == 0, result.output
    written = sorted(Path(line).name for line in result.stdout.splitlines())
    assert "mmtune_NVIDIA_H200_float32_4096x4096x4096-history.png" in written
    assert "mmtune_NVIDIA_H200_float32_4096x4096x4096-importance.png" in written
    assert written[0] == "bench.png" and all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in written)


def test_plot_of_an_unknown_study_is_an_error(tmp_path):
    result = invoke("plot", "--out", tmp_path, "--study", "nope")
    assert result.exit_code == 2 and result.stderr.startswith("error: ")


@pytest.mark.parametrize("args,message", [
    (("tune", "--m", 4, "--simulate"), "error: give --m, --n and --k, or --recorded FILE\n"),
    (("tnue",), "error: No such command 'tnue'. Did you mean 'tune'?\n"),
    (("cache", "nosuch"), "error: No such command 'nosuch'.\n"),
    (("--bogus",), "error: No such option: --bogus\n"),
])
def test_usage_mistakes_are_one_line_too(args, message):
    result = invoke(*args)
    assert (result.exit_code, result.stderr) == (2, message)


def test_python_m_autotune_is_mmtune():
    done = subprocess.run([sys.executable, "-m", "autotune", "best", "--dtype", "float16"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert done.returncode == 2
    assert done.stderr == "error: unsupported dtype 'float16'; supported: float32, float64, int32\n"
