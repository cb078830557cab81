import csv
import json

from autotune.bench.sweep import CSV_FIELDS, Tables, elements_config, size_table, sweep


def test_elements_config_is_the_seeds_ilp_layout():
    config = elements_config(2)
    assert (config["bm"], config["bn"], config["bk"], config["tm"], config["tn"]) == (32, 32, 32, 2, 1)
    assert config["mapping"] == "strided"  # rows row and row + 16, as in the seed's listing


def test_sweep_measures_every_cell_and_writes_csv_json_png(tmp_path):
    result = sweep("float32", Tables(sizes=(5, 9), blocks=(8, 16), elements=(8, 3), register_size=20), out_dir=tmp_path)
    rows = result["rows"]
    assert len(rows) == 2 * 2 * 2 + 2
    sizes, blocks, grid = size_table(rows, "shared")
    assert sizes == [5, 9] and blocks == [8, 16]
    assert all(value > 0 for line in grid for value in line)  # verified, then timed
    register = {r["elements"]: r for r in rows if r["table"] == "register"}
    assert register[8]["gflops"] > 0 and register[8]["threads"] == 128
    assert register[3]["gflops"] is None and "does not divide" in register[3]["error"]
    with open(tmp_path / "sweep.csv") as handle:
        table = list(csv.DictReader(handle))
    assert tuple(table[0]) == CSV_FIELDS and len(table) == len(rows)
    assert json.loads(table[-1]["config"])["tm"] == 3
    assert json.loads((tmp_path / "sweep.json").read_text())["rows"] == json.loads(json.dumps(rows))
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
