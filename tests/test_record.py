"""autotune.record and MMTUNE_RECORD: the products a program calls, counted on both call paths
and merged across runs; `mmtune tune --recorded` and `mmtune warm --recorded` on them."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import ON_GPU
from typer.testing import CliRunner

import autotune
import kernels
from autotune.call import recording
from autotune.cli import app
from autotune.errors import RecordedError
from autotune.store import recorded
from autotune.store.cache import Cache
from autotune.store.recorded import Recorded
from autotune.store.rows import Row
from autotune.tune.recorded import has_exact_row

ROOT = Path(__file__).resolve().parent.parent
#: the tests that run under the simulator (--simulate would switch a GPU run's process to it)
on_cpu = pytest.mark.skipif(ON_GPU, reason="runs under the simulator")
H200 = {"device": "NVIDIA H200", "cc": "9.0", "sm_count": 132}
SIMULATOR = {"device": "simulator", "cc": "", "sm_count": 0}


def product(m, n, k, calls, layout="NN", **fields):
    values = {**SIMULATOR, "dtype": "float32", "precision": "ieee", "family": "shared",
              "config": {"pad": 0, "tpb": 16}, "source": "default", **fields}
    return Recorded(m=m, n=n, k=k, layout=layout, calls=calls, **values)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


# Recording -------------------------------------------------------------------------------

@on_cpu
def test_both_layouts_are_counted_and_a_second_run_adds_up(tmp_path, rng):
    from numba import cuda

    path = tmp_path / "calls.json"
    A, B = rng.random((5, 7), dtype=np.float32), rng.random((7, 6), dtype=np.float32)
    dA, dB, dBt = cuda.to_device(A), cuda.to_device(B), cuda.to_device(np.ascontiguousarray(B.T))
    with autotune.record(path) as running:
        autotune.matmul(dA, dB)
        autotune.clear()  # plans forgotten meanwhile: their counts are not
        autotune.matmul(dA, dB)
        np.testing.assert_allclose(autotune.matmul(dA, dBt.T).copy_to_host(), A @ B, rtol=1e-5)
        autotune.matmul(A, B)  # NumPy operands: the same NN product
    assert recording.counts is None and running.path == path.absolute()
    nn, nt = recorded.read(path)
    choice = autotune.lookup(5, 6, 7)
    assert nn == product(5, 6, 7, 3, family=choice.family, config=choice.config, source=choice.source)
    assert (nt.layout, nt.calls, nt.m, nt.n, nt.k) == ("NT", 1, 5, 6, 7)
    with autotune.record(path):
        autotune.matmul(dA, dBt.T)
    assert [(p.layout, p.calls) for p in recorded.read(path)] == [("NN", 3), ("NT", 2)]
    assert path.read_text().startswith('{"mmtune_recorded": 1, "products": [\n{"device": "simulator"')


@on_cpu
def test_products_with_a_bias_are_recorded_apart_and_older_files_read_as_without(tmp_path, rng):
    from numba import cuda

    path = tmp_path / "calls.json"
    A, B = rng.random((5, 7), dtype=np.float32), rng.random((7, 6), dtype=np.float32)
    dA, dB, bias = cuda.to_device(A), cuda.to_device(B), cuda.to_device(rng.random(6, dtype=np.float32))
    with autotune.record(path):
        autotune.matmul(dA, dB, bias=bias)
        autotune.matmul(dA, dB, bias=bias)
        autotune.matmul(dA, dB)
    assert [(p.bias, p.calls) for p in recorded.read(path)] == [(True, 2), (False, 1)]
    path.write_text(path.read_text().replace('"bias": true, ', "").replace('"bias": false, ', ""))
    assert [(p.bias, p.calls) for p in recorded.read(path)] == [(False, 3)]  # a file from before the field


@on_cpu
def test_nested_recordings_each_count_from_their_start(tmp_path, rng):
    from numba import cuda

    dA, dB = cuda.to_device(rng.random((4, 3), dtype=np.float32)), cuda.to_device(rng.random((3, 2), dtype=np.float32))
    with autotune.record(tmp_path / "outer.json"):
        autotune.matmul(dA, dB)
        with autotune.record(tmp_path / "inner.json"):
            autotune.matmul(dA, dB)
        autotune.matmul(dA, dB)
    assert [p.calls for p in recorded.read(tmp_path / "outer.json")] == [3]
    assert [p.calls for p in recorded.read(tmp_path / "inner.json")] == [1]


@on_cpu
def test_mmtune_record_writes_at_exit_and_import_stays_light(tmp_path):
    script = ("import sys, autotune\nassert 'numba' not in sys.modules\n"
              "from autotune import record\nassert 'numba' not in sys.modules and 'autotune.call.front' not in "
              "sys.modules\nimport numpy as np\n"
              "autotune.matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))")
    env = {**os.environ, "MMTUNE_RECORD": str(tmp_path / "calls.json"), "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": str(ROOT)}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    [found] = recorded.read(tmp_path / "calls.json")
    assert (found.device, found.m, found.n, found.k, found.calls) == ("simulator", 2, 4, 3, 2)


def test_a_file_that_is_not_one_of_recorded_calls_is_refused_and_kept(tmp_path):
    path = tmp_path / "calls.json"
    with pytest.raises(RecordedError, match="no such file; record one with autotune.record"):
        recorded.read(path)
    path.write_text('{"rows": []}')
    with pytest.raises(RecordedError, match="not a file of recorded calls"):
        recorded.add(path, [product(2, 2, 2, 1)])
    assert path.read_text() == '{"rows": []}'
    good = json.loads(recorded.encode([product(2, 2, 2, 1)]))
    for change, message in ((("m", 0), "'m' must be at least 1"), (("layout", "XY"), "layout 'XY' is none of"),
                            (("calls", True), "'calls' must be a JSON int"), (("config", []), "must be a JSON dict")):
        path.write_text(json.dumps({**good, "products": [{**good["products"][0], change[0]: change[1]}]}))
        with pytest.raises(RecordedError, match=f"product 1: .*{message}"):
            recorded.read(path)


def test_merging_adds_calls_and_keeps_the_newer_serving():
    older = [product(8, 8, 8, 5, source="model"), product(4, 4, 4, 9)]
    merged = recorded.merge(older, [product(8, 8, 8, 7, source="exact"), product(8, 8, 8, 1, layout="TN")])
    assert [(p.m, p.layout, p.calls, p.source) for p in merged] == [
        (8, "NN", 12, "exact"), (4, "NN", 9, "default"), (8, "TN", 1, "default")]


# tune --recorded ------------------------------------------------------------------------

@on_cpu
def test_tune_recorded_tunes_the_most_called_first_then_a_rerun_skips_them(tmp_path):
    path = tmp_path / "calls.json"
    recorded.add(path, [product(5, 6, 7, 10), product(4, 5, 3, 12, layout="NT"), product(6, 6, 6, 1),
                        product(5, 6, 7, 4, deterministic=True), product(9, 9, 9, 50, **H200)])
    args = ("tune", "--recorded", path, "--top", 2, "--trials", 1, "--family", "shared", "--jobs", 1, "--simulate")
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    assert first.stderr.splitlines()[:3] == [
        "9x9x9 float32 ieee, 50 calls: recorded on NVIDIA H200, not on this simulator: not tuned here",
        "[1/2] 5x6x7 float32 ieee, 14 calls: tuning", "[2/2] 4x5x3 NT float32 ieee, 12 calls: tuning"]
    assert "best for simulator float32 5x6x7: shared {" in first.stdout
    assert "best for simulator float32 4x5x3 NT: shared {" in first.stdout
    assert first.stdout.endswith(f"2 tuned, 0 skipped, 0 failed of 2 recorded products of this GPU in {path}\n")
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[:2] == [
        "[1/2] 5x6x7 float32 ieee, 14 calls: skipped: an exact current row serves it",
        "[2/2] 4x5x3 NT float32 ieee, 12 calls: skipped: an exact current row serves it"]


def test_only_an_exact_current_row_of_this_gpu_layout_and_precision_skips_a_product():
    shape = (64, 64, 64)
    wanted = product(*shape, 1, **H200)
    row = Row(device="NVIDIA H200", dtype="float32", m=64, n=64, k=64, family="shared", params={"pad": 0, "tpb": 16},
              gflops=1.0, cc="9.0", sm_count=132, source_hash=kernels.source_hash("shared"), layout="NT")
    cache = Cache()
    cache.record(replace(row, m=32))  # another shape
    cache.record(replace(row, source_hash="older"))  # stale
    cache.record(replace(row, device="NVIDIA H100 80GB HBM3", layout="NN"))  # another GPU model
    cache.record(replace(row, layout="TN"))  # another layout
    assert not has_exact_row(wanted, cache) and not has_exact_row(replace(wanted, layout="NT"), cache)
    cache.record(replace(row, layout="NN"))
    assert has_exact_row(wanted, cache)
    assert has_exact_row(replace(wanted, precision="tf32x3"), cache)  # an ieee row serves tf32x3 too
    cache.record(replace(row, m=128, family="tf32x3", params={}, precision="tf32x3", layout="NN"))
    assert not has_exact_row(replace(wanted, m=128), cache)  # tf32x3 does not serve ieee


@pytest.mark.parametrize("args,message", [
    (("--recorded", "nope.json"), "nope.json: no such file; record one with autotune.record('nope.json')"),
    (("--recorded", "{bad}"), "not JSON"),
    (("--recorded", "{good}", "--top", 0), "--top takes a whole number, 1 or more; got '0'"),
    (("--recorded", "{good}", "--top", "x"), "--top takes a whole number, 1 or more; got 'x'"),
    (("--recorded", "{good}", "--m", 4), "--recorded takes each product's shape, dtype, layout and precision"),
    (("--recorded", "{good}", "--dtype", "float64"), "--recorded takes each product's shape"),
    (("--m", 4, "--n", 4), "give --m, --n and --k, or --recorded FILE"),
    ((), "give --m, --n and --k, or --recorded FILE"),
    (("--m", 4, "--n", 4, "--k", 4, "--top", 3), "--top needs --recorded"),
    (("--recorded", "{good}", "--jobs", 0), "--jobs must be at least 1"),
])
@on_cpu
def test_bad_input_to_tune_recorded_is_one_line_and_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("[1, 2")
    recorded.add(tmp_path / "good.json", [product(4, 4, 4, 1)])
    args = [str(a).format(bad=tmp_path / "bad.json", good=tmp_path / "good.json") for a in args]
    result = invoke("tune", *args, "--simulate")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and message in result.stderr and len(result.stderr.splitlines()) == 1


# warm --recorded ------------------------------------------------------------------------

LOAD = """
import json, sys
from autotune.call import front
from autotune.store import recorded
found = []
for p in recorded.read(sys.argv[1]):
    if p.cc:
        served = front.find_entry(p.gpu, p.problem, bias=p.bias)
        found.append([served.entry.key, served.source])
print(json.dumps({"found": found, "numba": "numba" in sys.modules}))
"""


@on_cpu
def test_warm_recorded_builds_what_the_call_path_loads_for_the_recorded_gpu(tmp_path):
    """Compile-only for sm_90 (no GPU); then a fresh process finds the product's kernel in the
    store, served from the store's memory, without importing numba."""
    Cache().record(Row(device="NVIDIA H200", dtype="float32", m=32, n=32, k=32, family="shared",
                       params={"pad": 1, "tpb": 8}, gflops=1.0, cc="9.0", sm_count=132,
                       source_hash=kernels.source_hash("shared")))
    path = tmp_path / "calls.json"
    recorded.add(path, [product(32, 32, 32, 3, **H200), product(32, 32, 32, 2, bias=True, **H200),
                        product(4, 4, 4, 1)])
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    warm = subprocess.run([sys.executable, "-m", "autotune", "warm", "--recorded", str(path)], check=False, env=env,
                          capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stderr[-3000:]
    lines = warm.stdout.splitlines()
    assert lines[0].startswith("NVIDIA H200 32x32x32 float32 ieee: stored ")
    assert lines[1].startswith("NVIDIA H200 32x32x32 float32 ieee with a bias: stored ")  # a build of its own
    assert lines[1].split()[-1] != lines[0].split()[-1]
    assert lines[2] == ("simulator 4x4x4 float32 ieee: not built: recorded under the simulator: no architecture to "
                        "build for")
    assert lines[3].startswith("2 of 3 recorded products' kernels in ")
    loaded = subprocess.run([sys.executable, "-c", LOAD, str(path)], check=False, env=env, capture_output=True,
                            text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert json.loads(loaded.stdout) == {"found": [[lines[0].split()[-1], "store"], [lines[1].split()[-1], "store"]],
                                         "numba": False}


@on_cpu
def test_warm_recorded_takes_no_arch_nor_simulate(tmp_path):
    recorded.add(tmp_path / "calls.json", [product(4, 4, 4, 1)])
    for extra, message in ((("--arch", "sm_90"), "drop --arch"), (("--simulate",), "drop --simulate")):
        result = invoke("warm", "--recorded", tmp_path / "calls.json", *extra)
        assert result.exit_code == 2 and message in result.stderr, result.output


# The driver path, on a GPU ---------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a GPU: MMTUNE_TEST_GPU=1")
def test_the_driver_path_records_its_products(tmp_path):
    torch = pytest.importorskip("torch")
    from autotune.call import front

    A, B = torch.randn(64, 96, device="cuda"), torch.randn(96, 80, device="cuda")
    Bt = B.T.contiguous()
    autotune.matmul(A, B)  # a plan built before the recording: its calls before it do not count
    with autotune.record(tmp_path / "calls.json"):
        for _ in range(3):
            autotune.matmul(A, B)
        C = autotune.matmul(A, Bt.T)
        autotune.matmul(A[:0], B)  # an empty product: nothing to record
    torch.testing.assert_close(C, A @ B)
    assert front.backend() == "driver" and recording.counts is None
    nn, nt = recorded.read(tmp_path / "calls.json")
    name = torch.cuda.get_device_name()
    assert (nn.device, nn.layout, nn.calls, nt.layout, nt.calls) == (name, "NN", 3, "NT", 1)
    assert nn.cc == "{}.{}".format(*torch.cuda.get_device_capability()) and nn.sm_count > 0
    choice = autotune.lookup(64, 80, 96, layout="NT")
    assert (nt.family, nt.config, nt.source) == (choice.family, choice.config, choice.source)
