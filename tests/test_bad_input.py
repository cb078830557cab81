"""Each bad input answers with one line on stderr (`error: ...`), exit status 2, and leaves the
cache as it was, byte for byte."""

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

import autotune.tune.tuner
from autotune.cli import app
from autotune.errors import InfrastructureFailure
from autotune.store.cache import APPLICATION_ID, Cache
from autotune.store.rows import Row
from autotune.tune.replay import Replay
from autotune.tune.tuner import TuneRequest, tune

ROOT = Path(__file__).parent.parent
ROW = dict(device="simulator", dtype="float32", m=8, n=8, k=8, family="shared", params={"pad": 1, "tpb": 16},
           gflops=1.5, median_ms=0.1, spread=0.01, trials=4, cc="", source_hash="abc", layout="NN",
           precision="ieee")
H100 = dict(ROW, device="NVIDIA H100 80GB HBM3", cc="9.0", sm_count=132)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def snapshot(path: Path) -> tuple[bytes, bytes]:
    """The cache file's bytes and its WAL's: a write shows in one of them."""
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes(), wal.read_bytes() if wal.exists() else b""


@pytest.fixture
def cache(isolated_cache):
    """A cache holding one row, closed (its WAL checkpointed into the file)."""
    opened = Cache()
    opened.record(Row.of(ROW))
    opened.close()
    return isolated_cache


def one_line(result, *parts: str) -> str:
    """The single stderr line of a refused command, which holds each of `parts`."""
    stderr = result.stderr
    assert getattr(result, "exit_code", getattr(result, "returncode", None)) == 2, stderr
    assert stderr.startswith("error: ") and stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    for part in parts:
        assert part in stderr, stderr
    return stderr


def refused(cache_path: Path, *args, parts=()) -> str:
    before = snapshot(cache_path)
    line = one_line(invoke(*args), *parts)
    assert snapshot(cache_path) == before
    return line


def mmtune(*args, env: dict | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`python -m autotune ARGS` in a process of its own: without a GPU and with the simulator off
    unless `env` turns it on."""
    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "MMTUNE_PRETEND_GPU")}
    environment["PYTHONPATH"] = str(ROOT)
    environment.update(env or {})
    return subprocess.run([*prefix, sys.executable, "-m", "autotune", *map(str, args)], env=environment,
                          capture_output=True, text=True, timeout=300)


def unprivileged() -> tuple[str, ...]:
    """A command prefix without root's power to write read-only files: a user namespace as root."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("unshare") and subprocess.run(["unshare", "--user", "true"]).returncode == 0:
        return ("unshare", "--user")
    pytest.skip("as root without user namespaces, a read-only file is writable")


# Without a GPU --------------------------------------------------------------------------------

NO_GPU = "no CUDA GPU here"


@pytest.mark.skipif(os.environ.get("MMTUNE_TEST_GPU") == "1", reason="this host has a GPU")
@pytest.mark.parametrize("command", [
    ("tune", "--m", 4, "--n", 4, "--k", 4),
    ("lookup", "--m", 4, "--n", 4, "--k", 4),
    ("bench", "--shapes", "4x4x4"),
], ids=lambda command: command[0])
def test_a_gpu_command_without_a_gpu_or_simulate(cache, command):
    before = snapshot(cache)
    done = mmtune(*command)
    one_line(done, NO_GPU, "--simulate")
    assert snapshot(cache) == before


@pytest.mark.skipif(os.environ.get("MMTUNE_TEST_GPU") == "1", reason="this host has a GPU")
def test_matmul_without_a_gpu_raises_no_gpu_error(cache):
    script = ("import numpy as np, autotune\n"
              "from autotune.errors import NoGpuError\n"
              "try:\n"
              "    autotune.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))\n"
              "except NoGpuError as error:\n"
              "    print(error)\n")
    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "MMTUNE_PRETEND_GPU")}
    done = subprocess.run([sys.executable, "-c", script], env={**environment, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith(NO_GPU) and done.stdout.count("\n") == 1, done.stderr


# Tuning ---------------------------------------------------------------------------------------

TUNE = ("tune", "--m", 4, "--n", 4, "--k", 4, "--simulate", "--family", "shared")


def test_jobs_above_the_usable_cores(cache):
    cores = len(os.sched_getaffinity(0))
    refused(cache, *TUNE, "--jobs", cores + 1, parts=(f"--jobs {cores + 1}", f"the {cores} CPU cores",
                                                      f"give --jobs {cores} or fewer"))


def test_jobs_above_what_free_memory_holds(cache, monkeypatch):
    monkeypatch.setattr(autotune.tune.tuner, "available_memory", lambda: 3 * 2**30)
    monkeypatch.setattr(autotune.tune.tuner, "usable_cores", lambda: 8)
    refused(cache, *TUNE, "--jobs", 2, parts=("need about 4 GiB of host memory (2 GiB each)", "3 GiB is available",
                                              "give --jobs 1 or fewer"))


class BrokenFirst(Replay):
    """A measurer whose first `broken` calls fail as a measuring process that did not start."""

    def __init__(self, broken: int, **options):
        super().__init__(**options)
        self.broken = broken

    def __call__(self, *args, **kwargs):
        if self.broken:
            self.broken -= 1
            raise InfrastructureFailure("the measuring process did not start: replayed")
        return super().__call__(*args, **kwargs)


def test_trials_that_fail_for_the_machinery_do_not_count():
    result = tune(TuneRequest(6, 5, 4, trials=3, families=["shared"], jobs=1), BrokenFirst(2, default=5.0),
                  show_progress=False)
    assert result.trials == 3 and result.failed == 0 and result.row is not None


def test_three_machinery_failures_in_a_row_stop_the_tune(cache, monkeypatch):
    monkeypatch.setattr(autotune.measure.isolation, "START_TIMEOUT_S", 0)  # no child answers in no time
    line = refused(cache, *TUNE, "--jobs", 1, "--trials", 5,
                   parts=("3 trials in a row failed for reasons not of their configs", "did not start",
                          "the study keeps its 0 measured trials"))
    assert "rerun" in line


def test_operands_that_cannot_fit_are_refused_before_any_trial(cache, monkeypatch):
    monkeypatch.setattr(autotune.tune.tuner, "Isolated", lambda *args: pytest.fail("a trial started"))
    refused(cache, "tune", "--m", 100_000_000_000, "--n", 4, "--k", 4, "--simulate",
            parts=("need 2.91 TiB (3200000000064 bytes) of host memory", "bytes) is available", "smaller shape"))


@pytest.mark.parametrize("args,message", [
    (TUNE + ("--timeout", -1), "error: --timeout must be a positive number of seconds, got -1\n"),
    (("tune", "--m", 4, "--n", 4, "--k", 4, "--simulate", "--dtype", "float64", "--family", "tf32x3"),
     "error: tf32x3 kernels do not multiply float64; those that do: "),
    (("lookup", "--m", -1, "--n", 4, "--k", 4, "--simulate"), "error: --m takes a whole number, 0 or more; got '-1'\n"),
    (("best", "--dtype", "float16"), "error: unsupported dtype 'float16'; supported: float32, float64, int32\n"),
], ids=["timeout", "family-dtype", "lookup-m", "best-dtype"])
def test_a_bad_option_value(cache, args, message):
    assert refused(cache, *args).startswith(message)


def test_best_refuses_a_dtype_as_tune_does(cache):
    assert refused(cache, "best", "--dtype", "float16") == refused(cache, *TUNE, "--dtype", "float16")


# A read-only cache ----------------------------------------------------------------------------


@pytest.fixture
def read_only(cache):
    """The cache, its file and directory made read-only (for this test's processes)."""
    cache.chmod(0o444)
    cache.parent.chmod(0o555)
    yield cache
    cache.parent.chmod(0o755)
    cache.chmod(0o644)


def test_lookup_and_matmul_read_a_read_only_cache(read_only):
    prefix = unprivileged()
    before = snapshot(read_only)
    found = mmtune("lookup", "--m", 8, "--n", 8, "--k", 8, "--simulate", prefix=prefix)
    assert found.returncode == 0 and found.stdout.startswith('exact: shared {"pad": 1, "tpb": 16}'), found.stderr
    script = ("import numpy as np, autotune\n"
              "a = np.ones((8, 8), np.float32)\n"
              "assert (autotune.matmul(a, a) == 8).all()\n"
              "print(autotune.lookup(8, 8, 8).source)\n")
    done = subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_ENABLE_CUDASIM": "1"})
    assert done.stdout == "exact\n" and "ignoring the cache" not in done.stderr, done.stderr
    assert snapshot(read_only) == before


def test_writing_a_read_only_cache_says_read_only(read_only, tmp_path):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([dict(ROW, m=16)]))
    before = snapshot(read_only)
    one_line(mmtune("import", rows, prefix=unprivileged()), str(read_only), "is read-only", "MMTUNE_CACHE")
    one_line(mmtune(*TUNE, prefix=unprivileged(), env={"NUMBA_ENABLE_CUDASIM": "1"}), "is read-only")
    assert snapshot(read_only) == before


def test_cache_reset_of_a_read_only_cache(read_only):
    before = snapshot(read_only)
    one_line(mmtune("cache", "reset", prefix=unprivileged()), "cannot set", "aside", "writable")
    assert snapshot(read_only) == before and os.listdir(read_only.parent) == [read_only.name]


# Paths ----------------------------------------------------------------------------------------


def test_a_cache_path_whose_parent_is_a_file(tmp_path, monkeypatch):
    parent = tmp_path / "file"
    parent.write_text("not a directory")
    monkeypatch.setenv("MMTUNE_CACHE", str(parent / "cache.db"))
    one_line(invoke("best"), f"a part of {parent} is a file, not a directory", "MMTUNE_CACHE")
    assert parent.read_text() == "not a directory"


@pytest.mark.parametrize("where,message", [
    ("missing/rows.json", "does not exist; create it first"),
    (".", "it is a directory; give a file path"),
    ("/dev/full", "no space is left on its device"),
], ids=["missing-directory", "directory", "dev-full"])
def test_export_to_a_path_it_cannot_write(cache, tmp_path, where, message):
    out = tmp_path / where
    refused(cache, "export", "--out", out, parts=(f"cannot write {out}", message))


def test_export_to_a_read_only_path(cache, tmp_path):
    out = tmp_path / "read-only" / "rows.json"
    out.parent.mkdir()
    out.parent.chmod(0o555)
    try:
        done = mmtune("export", "--out", out, prefix=unprivileged())
    finally:
        out.parent.chmod(0o755)
    one_line(done, f"cannot write {out}", "read-only")
    assert not out.exists()


# Rows that cannot be measurements ---------------------------------------------------------------

IMPLAUSIBLE = [
    (dict(H100, gflops=math.inf), "row 0: gflops is missing or invalid (inf)"),
    (dict(H100, gflops=80_000.0), "gflops 80000 is above 1.1x the 67 TFLOPS peak of float32 ieee"),
    (dict(H100, family="cublas"), "unknown kernel family 'cublas'"),
    (dict(H100, dtype="float16"), "dtype is invalid ('float16')"),
    (dict(H100, params={"pad": 1, "tpb": 7}), "shared params {\"pad\": 1, \"tpb\": 7} are impossible"),
]


@pytest.mark.parametrize("row,message", IMPLAUSIBLE, ids=["infinite", "above-peak", "family", "dtype", "params"])
def test_import_refuses_a_row_that_cannot_be_a_measurement(cache, tmp_path, row, message):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([row]))
    refused(cache, "import", path, parts=(f"{path}: ", message))


@pytest.mark.parametrize("row,message", IMPLAUSIBLE[1:], ids=["above-peak", "family", "dtype", "params"])
def test_cache_check_refuses_a_row_that_cannot_be_a_measurement(cache, row, message):
    values = {**row, "params": json.dumps(row["params"])}
    with sqlite3.connect(cache) as db:
        columns, marks = ", ".join(values), ", ".join("?" * len(values))
        db.execute(f"INSERT INTO best ({columns}) VALUES ({marks})", list(values.values()))
    db.close()
    result = invoke("cache", "check")
    assert result.exit_code == 1 and message in result.stderr, result.output


# Foreign databases ----------------------------------------------------------------------------


RECORDS = ROOT / "autotune" / "data" / "records" / "nvidia-h200.json"


@pytest.mark.parametrize("made_by, answers", [
    ("CREATE TABLE best (player TEXT, score INTEGER)",
     ("has a table 'best' without mmtune's columns", "not an mmtune cache")),
    ("PRAGMA application_id = 1234", ("another application's SQLite database (application_id 0x4d2)",)),
], ids=["a table named best", "another application's id"])
def test_a_foreign_database_is_never_written(tmp_path, monkeypatch, made_by, answers):
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as db:
        db.execute(made_by)
    db.close()
    monkeypatch.setenv("MMTUNE_CACHE", str(path))
    before = snapshot(path)
    one_line(invoke("best"), *answers)
    one_line(invoke("import", RECORDS), answers[-1])
    assert snapshot(path) == before


def test_the_cache_carries_mmtunes_mark(cache):
    with sqlite3.connect(cache) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    db.close()


# Spelling and help ----------------------------------------------------------------------------


def test_option_values_are_taken_in_any_case(cache, monkeypatch):
    monkeypatch.setattr(autotune.tune.tuner, "Isolated", lambda *args: Replay(default=5.0))
    tuned = invoke("tune", "--m", 6, "--n", 5, "--k", 4, "--simulate", "--family", "Shared", "--dtype", "INT32",
                   "--sampler", "RANDOM", "--layout", "nt", "--precision", "IEEE", "--trials", 2, "--jobs", 1)
    assert tuned.exit_code == 0, tuned.output
    assert "best for simulator int32 6x5x4 NT: shared" in tuned.stdout
    found = invoke("lookup", "--m", 8, "--n", 8, "--k", 8, "--dtype", "Float32", "--layout", "nN",
                   "--precision", "Ieee", "--simulate")
    assert found.exit_code == 0 and found.stdout.startswith("exact: shared"), found.output
    listed = invoke("best", "--json", "--dtype", "FLOAT32", "--layout", "nn", "--precision", "IEEE")
    assert [r["m"] for r in json.loads(listed.stdout)] == [8]
    from autotune.bench.suite import parse_shapes
    from autotune.cli.timing import _shapes

    assert _shapes("QUICK") == parse_shapes("quick") and _shapes("4X5X6") == [(4, 5, 6)]


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, prefix + (name,))
        else:
            yield prefix + (name,)


@pytest.mark.parametrize("command", [(), ("cache",), *_commands(typer.main.get_command(app))],
                         ids=lambda command: " ".join(command) or "mmtune")
def test_help_shows_real_metavars(command):
    shown = invoke(*command, "--help")
    assert shown.exit_code == 0, shown.output
    for typed in ("<bool>", "<int>", "<float>", "<str>", "<path>", "<list"):
        assert typed not in shown.stdout, f"mmtune {' '.join(command)} --help shows {typed}"
