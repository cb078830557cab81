"""mmtune bench, sweep and plot: timings next to cuBLAS and the peers, the seed study's tables,
charts of studies and benches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from autotune.cli.app import command
from autotune.cli.options import Dtype, Layout, Precision, Simulate, gflops, int_list
from autotune.errors import UserError


def _shapes(text: str) -> list[tuple[int, int, int]]:
    """--shapes: a suite name or MxNxK shapes, in any case."""
    from autotune.bench.suite import parse_shapes

    try:
        return parse_shapes(str(text).lower())
    except ValueError as error:  # autotune.bench.suite raises a builtin here
        raise UserError(str(error)) from None


Shapes = Annotated[Any, typer.Option(parser=_shapes, metavar="SUITE|MxNxK,...", help=(
    "A suite (standard, squares, quick, wide, seeded; autotune/data/suites.json), or shapes like "
    "1024x1024x1024,4096x512x64."))]


@command()
def bench(
    shapes: Shapes = "standard",
    dtype: Dtype = "float32",
    out: Annotated[Optional[Path], typer.Option(metavar="DIR", help="Directory for bench.json and bench.png.")] = None,
    seeds: Annotated[bool, typer.Option("--seeds/--no-seeds", metavar="", help=(
        "Also time the seed kernels (naive, shared TPB=16)."))] = True,
    simulate: Simulate = False,
    peers: Annotated[bool, typer.Option("--peers", metavar="", help=(
        "Instead, time the path users call on PyTorch tensors: mmtune's matmul, torch.matmul, Triton and CuPy where "
        "they import; writes peers.json, peers.md and peers.png."))] = False,
    precision: Precision = None,
    layout: Layout = "NN",
):
    """Time the kernel matmul uses for each shape next to cuBLAS and the seed kernels (or, with --peers, the call)."""
    if peers:
        return _bench_peers(shapes, dtype, out, precision, layout)
    if layout != "NN":
        raise UserError("--layout needs --peers: the kernel bench times NN products")
    from autotune.bench.suite import bench as run

    result = run(shapes, dtype, out, seeds, precision=precision)
    table = Table("shape", "config from", "family", "GFLOPS", "cuBLAS", "ratio", "naive", "shared")
    for r in result["rows"]:
        cells = [r.get(key) for key in ("tuned_gflops", "cublas_gflops")]
        table.add_row(
            f"{r['m']}x{r['n']}x{r['k']}", r["source"], r["family"], *[gflops(c) if c else "-" for c in cells],
            f"{r['ratio']:.3f}" if r["ratio"] else "-",
            *[gflops(r[key]) if r.get(key) else "-" for key in ("naive_gflops", "shared_gflops")],
        )
    Console(width=200).print(table)
    if result["geomean_ratio"]:
        typer.echo(f"geometric mean of tuned / cuBLAS: {result['geomean_ratio']:.3f} on {result['device']}")
    typer.echo(f"timings: {result['timing']}")


def _bench_peers(shapes: list[tuple[int, int, int]], dtype: str, out: Optional[Path], precision: Optional[str],
                 layout: str) -> None:
    from autotune.bench.peers import Asked, bench_peers
    from autotune.bench.report import markdown

    if dtype != "float32":
        raise UserError("--peers times float32 only")
    result = bench_peers(shapes, out, progress=lambda text: typer.echo(text, err=True),
                         asked=Asked(precision=precision, layout=layout))
    typer.echo(markdown(result), nl=False)


Sizes = Annotated[Any, typer.Option("--sizes", parser=int_list("--sizes"), metavar="8,16,...", help=(
    "Square sizes for the naive and shared tables; default the seed's 8,16,...,4096."))]
Blocks = Annotated[Any, typer.Option("--blocks", parser=int_list("--blocks"), metavar="8,16,...", help=(
    "Square block edges for the naive and shared tables; default 8,16,32."))]
Elements = Annotated[Any, typer.Option("--elements", parser=int_list("--elements"), metavar="1,2,...", help=(
    "Elements per thread for the register table, divisors of 32; default 1,2,4,8,16,32."))]


@command()
def sweep(
    sizes: Sizes = None,
    blocks: Blocks = None,
    elements: Elements = None,
    register_size: Annotated[int, typer.Option(metavar="SIZE", help="Square size of the register table.")] = 1024,
    dtype: Dtype = "float32",
    out: Annotated[Optional[Path], typer.Option(metavar="DIR", help=(
        "Directory for sweep.csv, sweep.json and sweep.png."))] = None,
    simulate: Simulate = False,
):
    """Measure the seed study's tables on this GPU: GFLOPS by size and block, and by elements per thread."""
    from autotune.bench.sweep import BLOCKS, ELEMENTS, SIZES, Tables, size_table
    from autotune.bench.sweep import sweep as run

    tables = Tables(tuple(sizes or SIZES), tuple(blocks or BLOCKS), tuple(elements or ELEMENTS), register_size)
    result = run(dtype, tables, out, progress=lambda text: typer.echo(f"measuring {text}", err=True))
    console = Console(width=200)
    rows = result["rows"]
    cublas = {r["m"]: r["cublas_gflops"] for r in rows}
    for table, title in (("naive", "global memory (naive)"), ("shared", "shared memory (shared, pad 0)")):
        table_sizes, table_blocks, grid = size_table(rows, table)
        out_table = Table("size", *[f"{b}*{b}" for b in table_blocks], "cuBLAS", title=f"{title}, GFLOPS")
        for size, line in zip(table_sizes, grid):
            cells = [gflops(v) if v else "NA" for v in line]
            out_table.add_row(f"{size}*{size}*{size}", *cells, gflops(cublas[size]) if cublas[size] else "-")
        console.print(out_table)
    register = [r for r in rows if r["table"] == "register"]
    if register:
        out_table = Table("elements per thread", "threads", "GFLOPS", "ratio to cuBLAS",
                          title=f"register 32x32 tiles at {register_size}^3")
        for r in register:
            out_table.add_row(
                str(r["elements"]), str(r["threads"] or ""), gflops(r["gflops"]) if r["gflops"] else "NA",
                f"{r['ratio']:.3f}" if r["ratio"] else "-",
            )
        console.print(out_table)
    for r in rows:
        if r["error"]:
            typer.echo(f"{r['family']} {json.dumps(r['config'])} at {r['m']}^3: {r['error']}", err=True)
    typer.echo(f"on {result['device']}" + (f"; written to {out}" if out else ""))


@command()
def plot(
    out: Annotated[Path, typer.Option(metavar="DIR", help="Directory for the PNG files.")] = Path("plots"),
    storage: Annotated[Optional[str], typer.Option(metavar="FILE|URL", help=(
        "Optuna storage URL or journal file; default the one beside the cache."))] = None,
    study: Annotated[Optional[str], typer.Option(metavar="NAME", help=(
        "Only this study (names as `mmtune tune` prints them)."))] = None,
    bench: Annotated[Optional[Path], typer.Option(metavar="FILE", help=(
        "Also chart this bench.json (from `mmtune bench --out`)."))] = None,
):
    """Plot studies' optimization history and parameter importances, and a bench chart."""
    from autotune.bench.plots import plot_bench, plot_studies
    from autotune.store.cache import Cache
    from autotune.tune.storage import storage_spec

    spec = storage_spec(storage, Cache())
    try:
        paths = plot_studies(spec, out, study)
        if bench is not None:
            paths.append(plot_bench(bench, out))
    except KeyError:  # Optuna's answer to a study it does not hold
        raise UserError(f"no study {study!r} in {spec}; without --study, mmtune plot draws every study there") from None
    except ValueError as error:  # autotune.bench.plots raises a builtin for a damaged journal or bench.json
        raise UserError(str(error)) from None
    for path in paths:
        typer.echo(str(path))
