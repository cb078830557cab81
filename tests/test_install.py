"""What a user installing mmtune from a wheel gets: the package data, the CLI working from any
directory, and a clear refusal when another package named `kernels` shadows mmtune's."""

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

from autotune.store import prebuilt
from kernels.rules import Arch

ROOT = Path(__file__).parent.parent
BUILD_LEFTOVERS = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis")


def run(args, cwd, env=None, ok=True):
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert result.returncode == 0, f"{args}: {result.stdout}{result.stderr}"
    return result


def test_a_foreign_kernels_package_ahead_of_mmtunes_is_refused_by_name(tmp_path):
    fake = tmp_path / "elsewhere" / "kernels"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('"""Some other project\'s kernels."""\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(ROOT)])}
    result = run([sys.executable, "-c", "import autotune"], cwd=tmp_path, env=env, ok=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("ImportError: mmtune needs its own top-level package `kernels`")
    assert str(fake / "__init__.py") in last and str(ROOT / "kernels" / "__init__.py") in last
    assert "pip uninstall kernels" in last
    env["PYTHONPATH"] = str(ROOT)
    assert run([sys.executable, "-c", "import autotune, kernels; print(kernels.__file__)"], tmp_path, env).stdout.strip() == str(
        ROOT / "kernels" / "__init__.py")


def fresh_venv_with_the_wheel(tmp_path) -> tuple[Path, Path]:
    """Build the wheel from a copy of the checkout and install it, without dependencies, into a
    new virtual environment whose .pth files lend it this environment's site-packages for the
    dependencies. A path line in a .pth does not run the .pth files it names, so this
    environment's (editable) mmtune stays out; the other .pth files are copied (numba-cuda's
    redirector is one). Returns the new environment's python and the wheel."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*BUILD_LEFTOVERS))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", source], tmp_path)
    (wheel,) = (tmp_path / "dist").glob("mmtune-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel], tmp_path)
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip())
    lent = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "00-mmtune-test-dependencies.pth").write_text("".join(f"{p}\n" for p in lent))
    for directory in lent:
        for pth in directory.glob("*.pth"):
            if "mmtune" not in pth.name and "mmtune" not in pth.read_text():
                shutil.copy(pth, purelib / pth.name)
    return python, wheel


def test_the_wheel_installed_outside_the_checkout_has_its_data_and_runs(tmp_path):
    python, wheel = fresh_venv_with_the_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert {"autotune/data/suites.json", "autotune/data/records/nvidia-h200.json", "kernels/__init__.py",
            "autotune/data/measured/nvidia-h200.json.xz", "autotune/data/kernels/sm_90a.tar.xz",
            "autotune/torch/native.cpp"} <= set(names)  # the C++ eager path builds from its source
    assert not [n for n in names if n.startswith(("studies/", "tests/", "docs/"))]
    licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]  # pyproject's license-files
    assert len(licenses) == 1 and zipfile.ZipFile(wheel).read(licenses[0]) == (ROOT / "LICENSE").read_bytes()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["MMTUNE_CACHE"] = str(tmp_path / "cache" / "cache.db")
    env["MMTUNE_KERNELS"] = str(tmp_path / "kernels")
    mmtune = python.parent / ("mmtune.exe" if os.name == "nt" else "mmtune")
    where = run([python, "-c", """if True:
        import json, autotune, kernels
        from autotune.bench import suite
        from autotune.store import cubins, prebuilt, records
        from kernels.rules import Arch
        print(json.dumps({"autotune": autotune.__file__, "kernels": kernels.__file__,
                          "measured": [table["device"] for table in records.measured_tables()],
                          "stand_ins": len(prebuilt.entries(Arch(9, 0, "a"))),
                          "current": [e.header["parts"]["source"] == cubins.source_hash()
                                      for e in prebuilt.entries(Arch(9, 0, "a"))][:1],
                          "h200": len(records.shipped_rows("NVIDIA H200", "float32")),
                          "h200_all": len(records.shipped_rows("NVIDIA H200")),
                          "suites": sorted(records.suites()), "standard": len(suite.parse_shapes("standard"))}))
        """], elsewhere, env).stdout
    found = json.loads(where)
    site_packages = str(python.parent.parent)
    assert found["autotune"].startswith(site_packages) and found["kernels"].startswith(site_packages), found
    assert found["h200"] >= 12 and found["h200_all"] > found["h200"]  # float64 rows ship too
    assert found["suites"] == ["quick", "seeded", "squares", "standard", "wide"] and found["standard"] == 12
    assert found["measured"] == ["NVIDIA H200"] and found["stand_ins"] == len(prebuilt.keys(Arch(9, 0, "a")))
    assert found["current"] == [True]  # the installed kernels/ hash as the checkout's

    assert "promote" in run([mmtune, "--help"], elsewhere, env).stdout
    assert "--shapes" in run([mmtune, "bench", "--help"], elsewhere, env).stdout
    tuned = run([mmtune, "tune", "--m", 12, "--n", 10, "--k", 8, "--trials", 4, "--family", "shared", "--simulate"], elsewhere, env)
    assert "written to the cache" in tuned.stdout
    rows = json.loads(run([mmtune, "best", "--json"], elsewhere, env).stdout)
    assert [(r["device"], r["m"], r["n"], r["k"], r["family"]) for r in rows] == [("simulator", 12, 10, 8, "shared")]
    shipped = Path(found["autotune"]).parent / "data" / "records" / "nvidia-h200.json"
    refused = run([mmtune, "promote", "--from", shipped], elsewhere, env, ok=False)
    assert refused.returncode == 2 and "not a source checkout" in refused.stderr
    promoted = run([mmtune, "promote", "--from", shipped, "--out", tmp_path / "mine.json"], elsewhere, env).stdout
    count = found["h200_all"]
    assert promoted.endswith(f"{count} added, 0 replaced (faster, or current where the records' were on older code), 0 kept; {count} rows\n")
