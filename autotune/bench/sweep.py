"""mmtune sweep: the seed study's tables (seed 003), measured with our kernels on this GPU.

Three tables, each a row per measurement in sweep.csv and a panel of sweep.png:
- naive (global memory) and shared (shared-memory tiles) by square size 8..4096 and square block
  8x8, 16x16, 32x32, next to cuBLAS at each size;
- register by elements per thread 1..32 at 1024^3 with the seed's layout: a 32x32 tile of C,
  32x32 tiles of A and B in shared memory, each thread computing `elements` rows of one column
  32/elements rows apart (the seed's ILP kernel, generalized).
Our kernels handle partial tiles, so sizes below the block are measured where the seed wrote NA.
Every kernel is verified at the size before it is timed; a failure is a row with an error.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import kernels
from autotune.bench.figures import save_png
from autotune.measure.measurement import cublas_matmul, device_info, measure, random_inputs, time_launches, versions
from autotune.space.configs import device_limits

SIZES = tuple(2**p for p in range(3, 13))
BLOCKS = (8, 16, 32)
ELEMENTS = (1, 2, 4, 8, 16, 32)
REGISTER_SIZE = 1024
SEED_TILE = 32
CSV_FIELDS = ("table", "family", "m", "n", "k", "block", "elements", "threads", "config", "gflops", "cublas_gflops", "ratio", "error")


def block_config(family: str, block: int) -> dict:
    """The seed's square thread block for the global-memory (naive) and shared-memory kernels."""
    if family == "naive":
        return {"block_x": block, "block_y": block}
    return {"tpb": block, "pad": 0}


def elements_config(elements: int) -> dict:
    """The seed's register kernel: 32x32 tiles, `elements` strided rows of C per thread."""
    return {
        "bm": SEED_TILE, "bn": SEED_TILE, "bk": SEED_TILE, "tm": elements, "tn": 1,
        "pad": 0, "mapping": "strided", "prefetch": False,
    }


@dataclass(frozen=True)
class Tables:
    """What the three tables cover: square sizes and block edges (naive, shared), elements per
    thread at one size (register)."""

    sizes: tuple = SIZES
    blocks: tuple = BLOCKS
    elements: tuple = ELEMENTS
    register_size: int = REGISTER_SIZE


def sweep(dtype: str = "float32", tables: Tables = Tables(), out_dir: Path | None = None, repeat: int = 20,
          progress=None) -> dict:
    """Measure the three tables; write sweep.csv, sweep.json and sweep.png to `out_dir` if given.
    `progress(text)` is told each measurement before it starts."""
    sizes, blocks, elements, register_size = tables.sizes, tables.blocks, tables.elements, tables.register_size
    if dtype not in kernels.DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; supported: {', '.join(kernels.DTYPES)}")
    rng = np.random.default_rng(0)
    cublas = cublas_matmul() if dtype != "int32" else None
    cublas_at = {}
    limits = device_limits()
    rows = []

    def run(cell: Cell) -> None:
        if progress:
            progress(f"{cell.table} {cell.size}^3, {cell.label}")
        if cell.size not in cublas_at:
            cublas_at[cell.size] = _cublas_gflops(cublas, cell.size, dtype, rng, repeat)
        rows.append(_measure_row(cell, Bench(dtype, limits, rng, repeat), cublas_at[cell.size]))

    for size in sizes:
        for family in ("naive", "shared"):
            for block in blocks:
                run(Cell(family, family, block_config(family, block), size, block=block))
    for count in elements:
        run(Cell("register", "register", elements_config(count), register_size, elements=count))
    result = {**device_info(), **versions(), "dtype": dtype, "rows": rows}
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "sweep.json").write_text(json.dumps(result, indent=1))
        write_csv(rows, out_dir / "sweep.csv")
        chart(result, out_dir / "sweep.png")
    return result


def _cublas_gflops(cublas, size: int, dtype: str, rng, repeat: int) -> float | None:
    if cublas is None:
        return None
    from numba import cuda

    A, B = random_inputs(size, size, size, dtype, rng)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((size, size), A.dtype)
    return time_launches(lambda: cublas(dA, dB, dC), repeat=repeat).gflops(size, size, size)


@dataclass(frozen=True)
class Cell:
    """One measurement of a table: a family's config at a square size, labelled by the seed's
    block edge (naive, shared) or elements per thread (register)."""

    table: str
    family: str
    config: dict
    size: int
    block: int | None = None
    elements: int | None = None

    @property
    def label(self) -> str:
        return f"block {self.block}x{self.block}" if self.block else f"{self.elements} elements per thread"


@dataclass(frozen=True)
class Bench:
    """What every cell is measured with."""

    dtype: str
    limits: object
    rng: np.random.Generator
    repeat: int


def _measure_row(cell: Cell, bench: Bench, cublas_gflops: float | None) -> dict:
    size, family, config, dtype = cell.size, cell.family, cell.config, bench.dtype
    row = {
        "table": cell.table, "family": family, "m": size, "n": size, "k": size, "block": cell.block,
        "elements": cell.elements, "threads": None, "config": config, "gflops": None, "cublas_gflops": cublas_gflops,
        "ratio": None, "error": None,
    }
    row["error"] = kernels.family(family).restrict(config, dtype, bench.limits)
    if row["error"]:
        return row
    try:
        kernel = kernels.build(family, config, dtype)
        row["threads"] = kernel.threads
        result = measure(kernel, (size, size, size), bench.rng, repeat=bench.repeat)
    except Exception as error:  # a config that cannot compile or launch is a row, not the end of the sweep
        row["error"] = f"{type(error).__name__}: {error}".splitlines()[0]
        return row
    if not result.verification.ok:
        row["error"] = f"wrong result: {result.verification.describe()}"
        return row
    row["gflops"] = result.gflops
    if cublas_gflops:
        row["ratio"] = result.gflops / cublas_gflops
    return row


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "config": json.dumps(row["config"])})


def size_table(rows: list[dict], table: str) -> tuple[list[int], list[int], list[list[float | None]]]:
    """(sizes, blocks, GFLOPS[size][block]) of one of the seed's size-by-block tables."""
    mine = [r for r in rows if r["table"] == table]
    sizes = sorted({r["m"] for r in mine})
    blocks = sorted({r["block"] for r in mine})
    cell = {(r["m"], r["block"]): r["gflops"] for r in mine}
    return sizes, blocks, [[cell.get((s, b)) for b in blocks] for s in sizes]


def chart(result: dict, path: Path) -> None:
    """Heatmaps of the naive and shared tables (GFLOPS, log colour) and the register line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    rows = result["rows"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 6))
    values = [r["gflops"] for r in rows if r["gflops"]]
    norm = LogNorm(min(values), max(values)) if values else None
    for ax, table, title in ((axes[0], "naive", "global memory (naive)"), (axes[1], "shared", "shared memory tiles")):
        sizes, blocks, grid = size_table(rows, table)
        data = np.array([[np.nan if v is None else v for v in line] for line in grid], dtype=float)
        ax.imshow(data, norm=norm, cmap="viridis", aspect="auto")
        for i, line in enumerate(grid):
            for j, value in enumerate(line):
                ax.text(j, i, _label(value), ha="center", va="center", fontsize=8, color="w")
        ax.set_xticks(range(len(blocks)), [f"{b}x{b}" for b in blocks])
        ax.set_yticks(range(len(sizes)), [f"{s}^3" for s in sizes])
        ax.set_xlabel("block")
        ax.set_title(f"{title}, GFLOPS")
    register = [r for r in rows if r["table"] == "register"]
    axes[2].plot([r["elements"] for r in register], [r["gflops"] or np.nan for r in register], "o-")
    if register and register[0]["cublas_gflops"]:
        axes[2].axhline(register[0]["cublas_gflops"], color="grey", linestyle="--", label="cuBLAS")
        axes[2].legend()
    axes[2].set_xscale("log", base=2)
    axes[2].set_xlabel("elements per thread")
    axes[2].set_ylabel("GFLOPS")
    size = register[0]["m"] if register else REGISTER_SIZE
    axes[2].set_title(f"register tiles 32x32, {size}^3")
    fig.suptitle(f"seed 003's tables on {result['device']} ({result['dtype']})")
    fig.tight_layout()
    save_png(fig, path)


def _label(gflops: float | None) -> str:
    if gflops is None:
        return "-"
    return f"{gflops:,.0f}" if gflops >= 100 else f"{gflops:.3g}"
