import json

import pytest

from autotune.bench.suite import bench, parse_shapes


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


def test_charts_are_saved_as_palette_pngs_that_keep_their_picture(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    from autotune.bench.figures import save_png

    plt.close("all")
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(range(4), [1, 3, 2, 4], color=["tab:blue", "tab:orange", "tab:green", "tab:red"])
    fig.canvas.draw()
    drawn = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    save_png(fig, tmp_path / "chart.png", dpi=fig.dpi)
    with Image.open(tmp_path / "chart.png") as image:
        assert image.mode == "P"
        saved = np.asarray(image.convert("RGB")).astype(int)
    assert saved.shape == drawn.shape
    assert np.abs(saved - drawn).mean() < 2
    assert not plt.get_fignums(), "the figure is closed"
