"""studies/ as a dataset: small enough to clone, every result set indexed, large raw files
compressed, and its scripts kept apart from the package and the tests (they import only the
package; nothing imports them)."""

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
STUDIES = ROOT / "studies"
MAX_CHECKOUT_BYTES = 8 * 2**20  # the checkout without .git


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_checkout_stays_under_8_mb():
    total = sum(path.stat().st_size for path in tracked_files() if path.is_file())
    assert total < MAX_CHECKOUT_BYTES, f"tracked files take {total / 2**20:.1f} MB"


def test_raw_journals_and_row_dumps_are_tracked_compressed():
    raw = [path for path in tracked_files() if path.suffix in (".journal", ".jsonl")]
    assert not raw, "compress with xz: " + ", ".join(str(p.relative_to(ROOT)) for p in raw)


def test_every_result_set_is_in_the_index():
    index = (STUDIES / "README.md").read_text()
    entries = [entry for gpu in STUDIES.iterdir() if gpu.is_dir() for entry in gpu.iterdir()]
    assert entries
    missing = [entry.name for entry in entries if entry.name.split(".")[0] not in index]
    assert not missing, f"studies/README.md does not mention {missing}"


def test_studies_scripts_import_only_the_package_and_nothing_imports_them():
    scripts = sorted(STUDIES.glob("*.py"))
    test_modules = {path.stem for path in (ROOT / "tests").glob("*.py")}
    for script in scripts:
        assert "sys.path" not in script.read_text(), script.name
        assert not imported_modules(script) & (test_modules | {"tests", "studies"}), script.name
    script_names = {path.stem for path in scripts} | {"studies"}
    for path in [*ROOT.glob("autotune/**/*.py"), *ROOT.glob("kernels/**/*.py"), *ROOT.glob("tests/*.py")]:
        assert not imported_modules(path) & script_names, path.name
