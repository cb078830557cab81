import json

import pytest

from autotune.bench import bench, parse_shapes


def test_parse_shapes_reads_suites_and_lists():
    assert parse_shapes("quick") == [(1024, 1024, 1024), (4096, 4096, 4096)]
    assert (16384, 64, 16384) in parse_shapes("standard")
    assert parse_shapes("5x6x7, 8X9X10") == [(5, 6, 7), (8, 9, 10)]


@pytest.mark.parametrize("spec", ["5x6", "5x0x7", "big", "5x6x-1"])
def test_parse_shapes_refuses_nonsense(spec):
    with pytest.raises(ValueError, match="is neither a suite"):
        parse_shapes(spec)


def test_bench_writes_json_and_a_chart(tmp_path):
    result = bench([(5, 6, 7), (3, 2, 9)], "float32", tmp_path)
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert [(r["m"], r["source"]) for r in rows] == [(5, "default"), (3, "default")]
    assert all(r["tuned_gflops"] > 0 and r["naive_gflops"] > 0 and r["shared_gflops"] > 0 for r in rows)
    assert result["geomean_ratio"] is None  # no cuBLAS in the simulator
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
