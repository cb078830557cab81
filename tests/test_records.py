"""The data shipped inside the package (records per GPU model, bench suites) and `mmtune promote`."""

import json
from importlib import resources

import pytest
from typer.testing import CliRunner

import autotune.store.records
import kernels
from autotune.bench.suite import parse_shapes
from autotune.store.cache import Cache
from autotune.cli import app
from autotune.store.records import shipped_rows, slug, suites
from autotune.store.rows import Row

ROW = dict(device="NVIDIA H200", dtype="float32", m=1024, n=1024, k=1024, family="shared",
           params={"tpb": 16, "pad": 1}, gflops=100.0)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_shipped_records_are_package_data_one_file_per_gpu_model():
    files = [f for f in resources.files("autotune").joinpath("data/records").iterdir() if f.name.endswith(".json")]
    assert files
    for file in files:
        rows = json.loads(file.read_text())
        assert rows and {f"{slug(r['device'])}.json" for r in rows} == {file.name}
    h200 = shipped_rows("NVIDIA H200", "float32")
    assert (4096, 4096, 4096) in {r.shape for r in h200}
    assert all(isinstance(r.params, dict) for r in h200)
    assert len(shipped_rows()) >= len(h200) and shipped_rows("NVIDIA H200", "int32") == shipped_rows("No such GPU") == []


def test_every_shipped_record_was_measured_on_todays_kernels():
    """A kernel changed without its records re-timed (`mmtune warm --retime` on the GPU, then
    `mmtune promote`) would serve stale measurements with a warning at every lookup."""
    hashes = kernels.source_hashes()
    stale = [f"{r.device} {r.dtype} {r.m}x{r.n}x{r.k} {r.family}" for r in shipped_rows()
             if r.source_hash != hashes[r.family]]
    assert not stale, f"records of older kernel code: {stale}"


def test_a_familys_source_hash_covers_the_modules_it_imports_names_from():
    from kernels import dmma, tf32x3, warp_mma

    assert warp_mma in kernels.registry._modules_used(dmma)
    assert {dmma, warp_mma} <= set(kernels.registry._modules_used(tf32x3))


def test_the_suites_are_package_data():
    assert set(suites()) >= {"standard", "squares", "quick"}
    assert len(parse_shapes("standard")) == len(suites()["standard"]) == 12


def test_slug():
    assert slug("NVIDIA H200") == "nvidia-h200"
    assert slug("NVIDIA GeForce RTX 4090 (laptop)") == "nvidia-geforce-rtx-4090-laptop"


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A source checkout whose package data holds one records file, for promote to write into."""
    root = tmp_path / "checkout"
    records = root / "autotune" / "data" / "records"
    records.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'mmtune'\n")
    (records / "nvidia-h200.json").write_text(json.dumps([ROW, {**ROW, "m": 512}]))
    monkeypatch.setattr(autotune.store.records, "DATA", root / "autotune" / "data")
    return records


def shapes(path):
    return [(r["device"], r["m"], r["gflops"]) for r in json.loads(path.read_text())]


def test_promote_merges_the_cache_into_each_gpus_file_keeping_the_faster_rows(checkout):
    cache = Cache()
    for row in ({**ROW, "gflops": 200.0}, {**ROW, "m": 512, "gflops": 50.0}, {**ROW, "m": 2048, "gflops": 300.0},
                {**ROW, "device": "NVIDIA H100 80GB HBM3", "gflops": 90.0}, {**ROW, "device": "simulator", "m": 8}):
        cache.record(Row.of(row))
    result = invoke("promote")
    assert result.exit_code == 0, result.output
    h100, h200 = checkout / "nvidia-h100-80gb-hbm3.json", checkout / "nvidia-h200.json"
    assert result.stdout.splitlines() == [
        f"{h100}: 1 added, 0 replaced (faster, or current where the records' were on older code), 0 kept; 1 rows",
        f"{h200}: 1 added, 1 replaced (faster, or current where the records' were on older code), 1 kept; 3 rows",
    ]
    assert shapes(h200) == [("NVIDIA H200", 512, 100.0), ("NVIDIA H200", 1024, 200.0), ("NVIDIA H200", 2048, 300.0)]
    assert shapes(h100) == [("NVIDIA H100 80GB HBM3", 1024, 90.0)]
    text = h200.read_text()
    assert invoke("promote").exit_code == 0 and h200.read_text() == text  # nothing new: the same bytes
    assert sorted(p.name for p in checkout.iterdir()) == ["nvidia-h100-80gb-hbm3.json", "nvidia-h200.json"]


def test_promote_from_an_export_file_with_filters(checkout, tmp_path):
    export = tmp_path / "export.json"
    export.write_text(json.dumps([{**ROW, "m": 64, "gflops": 7.0}, {**ROW, "m": 64, "dtype": "float64", "gflops": 3.0}]))
    result = invoke("promote", "--from", export, "--dtype", "float64", "--m", 64, "--n", 1024, "--k", 1024)
    assert result.exit_code == 0, result.output
    assert [(r["m"], r["dtype"]) for r in json.loads((checkout / "nvidia-h200.json").read_text())] == [
        (512, "float32"), (1024, "float32"), (64, "float64")]


def test_the_shipped_file_is_already_in_promotes_order(tmp_path):
    """Promoting the shipped rows into a copy of their file changes no byte: diffs stay readable."""
    shipped = resources.files("autotune").joinpath("data/records/nvidia-h200.json")
    copy = tmp_path / "copy.json"
    copy.write_text(shipped.read_text())
    (promotion,) = autotune.store.records.promote(shipped_rows("NVIDIA H200"), out=copy)
    assert (promotion.added, promotion.replaced) == (0, 0) and copy.read_text() == shipped.read_text()


def test_promote_refuses_outside_a_source_checkout_unless_given_out(checkout, tmp_path):
    (checkout.parent.parent.parent / "pyproject.toml").unlink()  # as in site-packages
    Cache().record(Row.of(ROW))
    result = invoke("promote")
    assert result.exit_code == 2 and "not a source checkout" in result.stderr and "--out FILE" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    out = tmp_path / "mine.json"
    assert invoke("promote", "--out", out).exit_code == 0 and shapes(out) == [("NVIDIA H200", 1024, 100.0)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "simulator"], "rows measured under the simulator do not belong in the shipped records"),
        ([], "rows of the simulator are promoted only with --device simulator"),
        (["--device", "NVIDIA H200"], "no rows to promote in the cache"),
        (["--m", 8], "give all of --m, --n and --k"),
        (["--from", "missing.json"], "missing.json"),
    ],
)
def test_promote_mistakes_are_one_line_and_change_nothing(checkout, args, message):
    Cache().record(Row.of({**ROW, "device": "simulator"}))
    before = (checkout / "nvidia-h200.json").read_text()
    result = invoke("promote", *args)
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and message in result.stderr, result.output
    assert (checkout / "nvidia-h200.json").read_text() == before


def test_promote_replaces_a_record_of_older_code_with_a_current_one_even_if_slower(checkout, tmp_path):
    import kernels

    current = kernels.source_hash(ROW["family"])
    (checkout / "nvidia-h200.json").write_text(json.dumps([{**ROW, "gflops": 500.0, "source_hash": "older"}]))
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{**ROW, "gflops": 100.0, "source_hash": current}]))
    assert invoke("promote", "--from", rows).exit_code == 0
    assert shapes(checkout / "nvidia-h200.json") == [("NVIDIA H200", 1024, 100.0)]
    rows.write_text(json.dumps([{**ROW, "gflops": 400.0, "source_hash": "older"}]))
    assert invoke("promote", "--from", rows).exit_code == 0  # an older-code row never displaces a current one
    assert shapes(checkout / "nvidia-h200.json") == [("NVIDIA H200", 1024, 100.0)]
