"""README.md's figures are what docs/readme_table.py renders from its one peers JSON, and the
README stays short and true: the shipped rows counted right, CI's test command the one it shows."""

import copy
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
_spec = importlib.util.spec_from_file_location("readme_table", ROOT / "docs" / "readme_table.py")
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)


def source() -> dict:
    return table.load(ROOT / table.SOURCE)


def test_the_readmes_figures_are_what_the_script_renders_from_the_json():
    assert table.blocks_of(README.read_text()) == table.render(source()), (
        f"README.md's figures differ from {table.SOURCE}: run `python docs/readme_table.py`")


def test_a_changed_json_or_a_hand_edited_table_differs():
    text, data = README.read_text(), source()
    changed = copy.deepcopy(data)
    changed["geomeans"]["all"]["vs_cublas"] += 0.01
    assert table.render(changed) != table.render(data)
    assert table.rewrite(text, table.render(changed)) != text
    rendered = table.blocks_of(text)["table"]
    edited = text.replace(rendered, re.sub(r"\d\.\d{3}", "9.999", rendered, count=1))
    assert table.blocks_of(edited) != table.render(data)


def test_the_script_checks_and_rewrites_in_place(tmp_path, monkeypatch):
    assert subprocess.run([sys.executable, str(ROOT / "docs" / "readme_table.py"), "--check"],
                          capture_output=True, text=True, timeout=120).returncode == 0
    stale = tmp_path / "README.md"
    blocks = table.blocks_of(README.read_text())
    stale.write_text(README.read_text().replace(blocks["headline"], "old figures"))
    monkeypatch.setattr(table, "README", stale)
    assert table.main(["--check"]) == 1
    assert table.main([]) == 0 and stale.read_text() == README.read_text()


def test_the_table_says_where_its_figures_come_from():
    data, shown = source(), table.render(source())["table"]
    assert table.SOURCE in shown and data["device"] in shown
    assert (data.get("date") or "date not recorded") in shown
    assert (f"commit `{data['commit']}`" if data.get("commit") else "commit not recorded") in shown
    assert "one run of" in shown and "replaced whole and never merged" in shown


def test_the_json_is_a_run_of_a_command_named_in_performance_md():
    command = re.search(r"one run of `([^`]+)`", table.render(source())["table"]).group(1)
    assert command.startswith("mmtune bench --peers") and command in (ROOT / "docs" / "performance.md").read_text()


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= 300


@pytest.mark.parametrize("gpu,named", [("nvidia-h200", "tuned rows for the NVIDIA H200"),
                                       ("nvidia-h100-80gb-hbm3", "rows for the H100")])
def test_the_readme_counts_the_shipped_rows(gpu, named):
    rows = json.loads((ROOT / "autotune" / "data" / "records" / f"{gpu}.json").read_text())
    said = re.search(rf"(\d+) {named}\s+\((\d+) float32, (\d+) of\s+them for the\s+`tf32x3`"
                     r"\s+precision; (\d+) float64\)", README.read_text())
    assert said, f"README.md no longer says how many rows ship for {gpu}"
    float32 = [r for r in rows if r["dtype"] == "float32"]
    counted = (len(rows), len(float32), sum(r.get("precision") == "tf32x3" for r in float32),
               sum(r["dtype"] == "float64" for r in rows))
    assert tuple(int(n) for n in said.groups()) == counted


def test_the_readme_shows_cis_test_command_and_the_sweep():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()][-1]
    text = README.read_text()
    assert ci in text and "python -m pytest -n auto\n" in text
    assert "`python -m pytest -n auto -m sweep`" in text
