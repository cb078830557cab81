"""studies/ as a dataset: small enough to clone, every result set and script indexed, large raw
files compressed, its scripts kept apart from the package, the tests and each other (they import
only the package; nothing imports them), and the shipped data (autotune/data) rebuilt from it by one
command, byte for byte."""

import ast
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
STUDIES = ROOT / "studies"
DATA = ROOT / "autotune" / "data"
MAX_CHECKOUT_BYTES = 6 * 2**20  # the checkout without .git


def tracked_files() -> list[Path]:
    """The checkout's files: tracked, and untracked but not ignored (what a commit would take)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return sorted({ROOT / name for name in listed.decode().split("\0") if name})


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_checkout_stays_under_6_mib():
    total = sum(path.stat().st_size for path in tracked_files() if path.is_file())
    assert total <= MAX_CHECKOUT_BYTES, f"the checkout's files take {total / 2**20:.2f} MiB"


def test_raw_journals_and_row_dumps_are_tracked_compressed():
    raw = [path for path in tracked_files() if path.suffix in (".journal", ".jsonl")]
    assert not raw, "compress with xz: " + ", ".join(str(p.relative_to(ROOT)) for p in raw)


def test_every_result_set_is_in_the_index():
    index = (STUDIES / "README.md").read_text()
    entries = [entry for gpu in STUDIES.iterdir() if gpu.is_dir() for entry in gpu.iterdir()]
    assert entries
    missing = [entry.name for entry in entries if entry.name.split(".")[0] not in index]
    assert not missing, f"studies/README.md does not mention {missing}"


def test_every_script_is_in_the_index():
    index = (STUDIES / "README.md").read_text()
    scripts = [path.name for path in [*STUDIES.glob("*.py"), *STUDIES.glob("*.sh")]]
    assert scripts
    missing = [name for name in scripts if f"studies/{name}" not in index]
    assert not missing, f"studies/README.md does not mention {missing}"


def test_studies_scripts_import_only_the_package_and_nothing_imports_them():
    scripts = sorted(STUDIES.glob("*.py"))
    test_modules = {path.stem for path in (ROOT / "tests").glob("*.py")}
    script_names = {path.stem for path in scripts} | {"studies"}
    for script in scripts:
        assert "sys.path" not in script.read_text(), script.name
        assert not imported_modules(script) & (test_modules | {"tests", "studies"}), script.name
        others = imported_modules(script) & (script_names - {script.stem})
        assert not others, f"{script.name} imports the studies script(s) {sorted(others)}"
    for path in [*ROOT.glob("autotune/**/*.py"), *ROOT.glob("kernels/**/*.py"), *ROOT.glob("tests/*.py")]:
        assert not imported_modules(path) & script_names, path.name


def contents(path: Path) -> bytes:
    """A file's bytes, decompressed where its name says xz."""
    return lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()


def test_the_shipped_data_rebuilds_from_the_studies_byte_for_byte(tmp_path):
    """studies/README.md's rebuild command, into a temporary folder: every shipped measured table
    and records file comes out as autotune/data holds it (decompressed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "studies/table.py", "rebuild", "--out", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = sorted(path.relative_to(DATA) for kind in ("measured", "records")
                     for path in (DATA / kind).glob("*.json*"))
    built = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*.json*"))
    assert built == shipped, "studies/table.py SHIPPED does not make every shipped file"
    differ = [str(name) for name in shipped if contents(tmp_path / name) != contents(DATA / name)]
    assert not differ, f"rebuilt from studies/ but not as shipped: {differ} (add a step to studies/table.py SHIPPED)"


def test_lookup_diff_times_each_runs_choices_in_one_set_of_jobs(tmp_path):
    """studies/lookup_diff.py (no GPU): two pricings of the shipped float64 records that choose
    apart at both shapes, the jobs that time each distinct choice once, and the summary by run of
    a result of those jobs (a job that failed left out and counted)."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def run(*args):
        done = subprocess.run([sys.executable, "studies/lookup_diff.py", *map(str, args)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    shapes = {(800, 800, 800), (169, 930, 631)}
    common = ("--gpu", "NVIDIA H100 80GB HBM3", "--dtype", "float64", "--shapes", *("x".join(map(str, s)) for s in shapes))
    run(*common, "--lone-share", "1", "--out", tmp_path / "lone1.json")
    run(*common, "--out", tmp_path / "now.json", "--variant", f"lone1={tmp_path / 'lone1.json'}",
        "--jobs", tmp_path / "jobs.json")
    jobs = json.loads((tmp_path / "jobs.json").read_text())
    assert sorted((tuple(job["shape"]), job["source"]) for job in jobs) == sorted(
        (shape, run) for shape in shapes for run in ("this", "lone1"))  # the runs choose apart: a job each
    for shape in shapes:
        assert len({json.dumps(job["params"], sort_keys=True) for job in jobs if tuple(job["shape"]) == shape}) == 2
    gflops = {"this": 50.0, "lone1": 25.0}
    result = {"shapes": [{"shape": list(shape), "cublas_gflops": 100.0,
                          "jobs": [{**job, "gflops": None if (job["source"], shape[0]) == ("lone1", 169)
                                    else gflops[job["source"]]} for job in jobs if tuple(job["shape"]) == shape]}
                         for shape in shapes]}
    (tmp_path / "timed.json").write_text(json.dumps(result))
    lines = {line.split()[0]: line for line in run("--timed", tmp_path / "timed.json").splitlines()}
    assert "all 0.500 (2)" in lines["this"] and "left out" not in lines["this"]
    assert "all 0.250 (1)" in lines["lone1"] and lines["lone1"].endswith("left out 1")
