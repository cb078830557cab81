"""The `mmtune` command line: each command parses its options and calls one library function."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="Tune Numba CUDA matrix-multiplication kernels per shape and keep the verified best.",
    no_args_is_help=True,
    add_completion=False,
)
DTYPE_HELP = "Element type: float32, float64 or int32."
LAYOUT_HELP = ("How A and B are stored: NN, NT, TN or TT; T is the transpose of a C-contiguous array "
               "(A.T, B.T views).")
PRECISION_HELP = ("How exactly float32 is computed: ieee (the CUDA cores, as cuBLAS's SGEMM; the default) or "
                  "tf32x3 (also three TF32 products on the tensor cores, where faster; subnormal operands held "
                  "to 2**-147). float64 and int32 are IEEE either way.")


class UserError(Exception):
    """A mistake in the command line or its environment: one line on stderr, exit 2."""


def _fail(error: Exception) -> None:
    hint = ""
    if type(error).__name__ == "CacheError":
        hint = "; `mmtune cache check` says more, `mmtune cache reset` sets the file aside"
    typer.echo(f"error: {error}{hint}", err=True)
    raise typer.Exit(2)


def _use_simulator(simulate: bool) -> None:
    """--simulate: Numba's CUDA simulator, which must be chosen before numba is imported."""
    if simulate:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        from numba import config

        if not config.ENABLE_CUDASIM:
            raise UserError("--simulate came after numba was loaded without NUMBA_ENABLE_CUDASIM=1")


def _gflops(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _int_list(text: Optional[str], option: str, what: str = "positive integers like 8,16,32", least: int = 1):
    """A comma-separated option as a list of ints of at least `least`; None if not given."""
    if text is None:
        return None
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < least:
        raise UserError(f"{option} takes {what}; got {text!r}")
    return values


def _layout(text: str) -> str:
    from autotune.cache import LAYOUTS

    if text.upper() not in LAYOUTS:
        raise UserError(f"unknown layout {text!r}; known: {', '.join(LAYOUTS)}")
    return text.upper()


def _precision(text: Optional[str]) -> Optional[str]:
    """--precision in its canonical spelling, or None where not given (the default)."""
    if text is None:
        return None
    from autotune.precision import PrecisionError, check

    try:
        return check(text)
    except PrecisionError as error:
        raise UserError(str(error)) from None


def _layout_suffix(layout: Optional[str]) -> str:
    """' TN' after a shape tuned for another layout than NN; nothing for NN."""
    return "" if layout in (None, "NN") else f" {layout}"


def _shape(m: Optional[int], n: Optional[int], k: Optional[int]):
    given = [x is not None for x in (m, n, k)]
    if any(given) and not all(given):
        raise UserError("give all of --m, --n and --k, or none")
    return (m, n, k) if all(given) else None


@app.command()
def tune(
    m: int = typer.Option(..., "--m", help="Rows of A and C."),
    n: int = typer.Option(..., "--n", help="Columns of B and C."),
    k: int = typer.Option(..., "--k", help="Columns of A, rows of B."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    trials: int = typer.Option(40, help="Measured trials the study should hold; a rerun resumes up to this."),
    timeout: Optional[float] = typer.Option(None, help="Stop searching after this many seconds."),
    family: Optional[list[str]] = typer.Option(None, help="Kernel family to search (repeatable); default all."),
    sampler: str = typer.Option("climb", help="climb (local search, default), tpe, random, grid (brute force) or gp; all seeded."),
    storage: Optional[str] = typer.Option(None, help="A journal file, or a database URL like postgresql://user@host/db that hosts share; default a journal file beside the cache."),
    seed: int = typer.Option(0, help="Seed of the sampler and of the random inputs."),
    jobs: Optional[int] = typer.Option(None, help="Worker processes sharing the GPU: they compile in parallel, measure one at a time; default the usable CPU cores, at most 16."),
    trial_timeout: float = typer.Option(300, help="Fail a trial (and stop its measuring process) after this many seconds."),
    gpus: Optional[str] = typer.Option(None, help="GPU indices like 0,1: --jobs workers on each, all on one study."),
    layout: str = typer.Option("NN", help=LAYOUT_HELP),
    precision: Optional[str] = typer.Option(None, help=PRECISION_HELP),
    simulate: bool = typer.Option(False, help="Run on the CPU under Numba's CUDA simulator (tiny shapes)."),
):
    """Search kernel configs for one shape; cache and print the verified best."""
    try:
        _use_simulator(simulate)
        from autotune.cache import CacheError
        from autotune.storage import StorageError
        from autotune.tuner import TuneError, TuneRequest, tune as run

        options = dict(dtype=dtype, trials=trials, timeout=timeout, sampler=sampler, storage=storage, seed=seed,
                       layout=_layout(layout), precision=_precision(precision), trial_timeout=trial_timeout,
                       gpus=_int_list(gpus, "--gpus", "GPU indices like 0,1", least=0))
        if family:
            options["families"] = family
        if jobs is not None:
            options["jobs"] = jobs
        result = run(TuneRequest(m, n, k, **options))
    except (UserError, TuneError, CacheError, StorageError) as error:
        _fail(error)
    row = result.row
    if row is None:
        _fail(RuntimeError(f"no config verified in {result.trials} trials ({result.failed} failed); see study {result.study_name}"))
    typer.echo(f"best for {row['device']} {row['dtype']} {m}x{n}x{k}{_layout_suffix(row['layout'])}: {row['family']} "
               f"{json.dumps(row['params'])} ({row['precision']})")
    typer.echo(
        f"  {_gflops(row['gflops'])} GFLOPS, median {row['median_ms']:.4g} ms, spread {row['spread']:.1%};"
        f" {result.trials} trials ({result.new_trials} new, {result.failed} failed) in {result.wall_s:.0f} s"
    )
    typer.echo("  written to the cache" if result.written else "  the cache keeps a faster row for this shape")
    typer.echo(f"  study {result.study_name!r} in {result.storage}")


@app.command()
def best(
    m: Optional[int] = typer.Option(None, "--m", help="Only this shape (with --n and --k)."),
    n: Optional[int] = typer.Option(None, "--n", help="See --m."),
    k: Optional[int] = typer.Option(None, "--k", help="See --m."),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    layout: Optional[str] = typer.Option(None, help="Only rows tuned for this layout (NN, NT, TN or TT)."),
    precision: Optional[str] = typer.Option(None, help="Only rows of kernels of this precision: ieee or tf32x3."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of the rows."),
):
    """Show the cached best configs, for all shapes or one."""
    try:
        from autotune.cache import Cache, CacheError, stale
        from kernels import source_hashes

        rows = Cache().rows(dtype=dtype, shape=_shape(m, n, k), layout=_layout(layout) if layout else None,
                            precision=_precision(precision))
        hashes = source_hashes()
    except (UserError, CacheError) as error:
        _fail(error)
    for row in rows:
        row["stale"] = stale(row, hashes)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("device", "dtype", "M", "N", "K", "layout", "precision", "family", "params", "GFLOPS", "spread",
                  "trials", "tuned", "code")
    for r in rows:
        params = " ".join(f"{key}={value}" for key, value in r["params"].items())
        table.add_row(
            r["device"], r["dtype"], str(r["m"]), str(r["n"]), str(r["k"]), r["layout"], r["precision"], r["family"],
            params,
            _gflops(r["gflops"]), f"{r['spread']:.1%}" if r["spread"] is not None else "",
            str(r["trials"] or ""), (r["created"] or "")[:10], "stale" if r["stale"] else "current",
        )
    Console(width=200).print(table)
    if any(r["stale"] for r in rows):
        typer.echo("stale: measured on older kernel code; matmul prefers current rows, `mmtune tune` re-times them")


@app.command()
def lookup(
    m: int = typer.Option(..., "--m", help="Rows of A and C."),
    n: int = typer.Option(..., "--n", help="Columns of B and C."),
    k: int = typer.Option(..., "--k", help="Columns of A, rows of B."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    layout: str = typer.Option("NN", help=LAYOUT_HELP),
    deterministic: bool = typer.Option(False, "--deterministic", help="Only configs that do not add into C: no split-K or stream-K (same bits on every run)."),
    precision: Optional[str] = typer.Option(None, help=PRECISION_HELP),
    simulate: bool = typer.Option(False, help="Look up for the simulator's rows."),
):
    """Say which config matmul would use for a shape, and where it came from."""
    try:
        _use_simulator(simulate)
        from autotune.runtime import lookup as find
        from autotune.operands import OperandError

        choice = find(m, n, k, dtype, layout=_layout(layout), deterministic=deterministic,
                      precision=_precision(precision))
    except (UserError, OperandError) as error:
        _fail(error)
    typer.echo(f"{choice.source}: {choice.family} {json.dumps(choice.config)} ({choice.precision})")
    if choice.tuned_shape:
        shape = "x".join(map(str, choice.tuned_shape)) + _layout_suffix(choice.tuned_layout)
        typer.echo(f"  tuned for {shape} (distance {choice.distance:.2f}) at {_gflops(choice.gflops)} GFLOPS"
                   f" on {choice.measured_on} ({choice.gpu_match}; {choice.origin} row"
                   f"{', stale: older kernel code' if choice.stale else ''})")
    if choice.basis:
        typer.echo(f"  {choice.basis}")
    if choice.rest:
        typer.echo(f"  C's last {choice.peel} rows as a product of their own, {choice.rest.source}: "
                   f"{choice.rest.family} {json.dumps(choice.rest.config)}")


@app.command()
def bench(
    shapes: str = typer.Option("standard", help="A suite (standard, squares, quick, wide, seeded; autotune/data/suites.json), or shapes like 1024x1024x1024,4096x512x64."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    out: Optional[Path] = typer.Option(None, help="Directory for bench.json and bench.png."),
    seeds: bool = typer.Option(True, help="Also time the seed kernels (naive, shared TPB=16)."),
    simulate: bool = typer.Option(False, help="Run under Numba's CUDA simulator (tiny shapes; no cuBLAS)."),
    peers: bool = typer.Option(
        False, "--peers", help="Instead, time the path users call on PyTorch tensors: mmtune's matmul, torch.matmul, "
        "Triton and CuPy where they import; writes peers.json, peers.md and peers.png.",
    ),
    precision: Optional[str] = typer.Option(None, help=PRECISION_HELP),
):
    """Time the kernel matmul uses for each shape next to cuBLAS and the seed kernels (or, with --peers, the call)."""
    if peers:
        return _bench_peers(shapes, dtype, out, simulate, precision)
    try:
        _use_simulator(simulate)
        from autotune.bench import bench as run, parse_shapes
        from autotune.cache import CacheError

        result = run(parse_shapes(shapes), dtype, out, seeds, precision=_precision(precision))
    except (UserError, CacheError, ValueError) as error:
        _fail(error)
    table = Table("shape", "config from", "family", "GFLOPS", "cuBLAS", "ratio", "naive", "shared")
    for r in result["rows"]:
        cells = [r.get(key) for key in ("tuned_gflops", "cublas_gflops")]
        table.add_row(
            f"{r['m']}x{r['n']}x{r['k']}", r["source"], r["family"], *[_gflops(c) if c else "-" for c in cells],
            f"{r['ratio']:.3f}" if r["ratio"] else "-",
            *[_gflops(r[key]) if r.get(key) else "-" for key in ("naive_gflops", "shared_gflops")],
        )
    Console(width=200).print(table)
    if result["geomean_ratio"]:
        typer.echo(f"geometric mean of tuned / cuBLAS: {result['geomean_ratio']:.3f} on {result['device']}")
    typer.echo(f"timings: {result['timing']}")


def _bench_peers(shapes: str, dtype: str, out: Optional[Path], simulate: bool, precision: Optional[str]) -> None:
    try:
        _use_simulator(simulate)
        from autotune.bench import parse_shapes
        from autotune.cache import CacheError
        from autotune.peers import PeersError, bench_peers, markdown

        if dtype != "float32":
            raise UserError("--peers times float32 only")
        result = bench_peers(parse_shapes(shapes), out, progress=lambda text: typer.echo(text, err=True),
                             precision=_precision(precision))
    except (UserError, CacheError, PeersError, ValueError) as error:
        _fail(error)
    typer.echo(markdown(result), nl=False)


@app.command()
def sweep(
    sizes: Optional[str] = typer.Option(None, help="Square sizes for the naive and shared tables; default the seed's 8,16,...,4096."),
    blocks: Optional[str] = typer.Option(None, help="Square block edges for the naive and shared tables; default 8,16,32."),
    elements: Optional[str] = typer.Option(None, help="Elements per thread for the register table, divisors of 32; default 1,2,4,8,16,32."),
    register_size: int = typer.Option(1024, help="Square size of the register table."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    out: Optional[Path] = typer.Option(None, help="Directory for sweep.csv, sweep.json and sweep.png."),
    simulate: bool = typer.Option(False, help="Run under Numba's CUDA simulator (tiny sizes; no cuBLAS)."),
):
    """Measure the seed study's tables on this GPU: GFLOPS by size and block, and by elements per thread."""
    try:
        _use_simulator(simulate)
        from autotune.sweep import size_table, sweep as run

        chosen = {"sizes": _int_list(sizes, "--sizes"), "blocks": _int_list(blocks, "--blocks"),
                  "elements": _int_list(elements, "--elements")}
        result = run(
            dtype, register_size=register_size, out_dir=out, progress=lambda text: typer.echo(f"measuring {text}", err=True),
            **{name: values for name, values in chosen.items() if values is not None},
        )
    except (UserError, ValueError) as error:
        _fail(error)
    console = Console(width=200)
    rows = result["rows"]
    cublas = {r["m"]: r["cublas_gflops"] for r in rows}
    for table, title in (("naive", "global memory (naive)"), ("shared", "shared memory (shared, pad 0)")):
        table_sizes, table_blocks, grid = size_table(rows, table)
        out_table = Table("size", *[f"{b}*{b}" for b in table_blocks], "cuBLAS", title=f"{title}, GFLOPS")
        for size, line in zip(table_sizes, grid):
            cells = [_gflops(v) if v else "NA" for v in line]
            out_table.add_row(f"{size}*{size}*{size}", *cells, _gflops(cublas[size]) if cublas[size] else "-")
        console.print(out_table)
    register = [r for r in rows if r["table"] == "register"]
    if register:
        out_table = Table("elements per thread", "threads", "GFLOPS", "ratio to cuBLAS", title=f"register 32x32 tiles at {register_size}^3")
        for r in register:
            out_table.add_row(
                str(r["elements"]), str(r["threads"] or ""), _gflops(r["gflops"]) if r["gflops"] else "NA",
                f"{r['ratio']:.3f}" if r["ratio"] else "-",
            )
        console.print(out_table)
    for r in rows:
        if r["error"]:
            typer.echo(f"{r['family']} {json.dumps(r['config'])} at {r['m']}^3: {r['error']}", err=True)
    typer.echo(f"on {result['device']}" + (f"; written to {out}" if out else ""))


@app.command()
def plot(
    out: Path = typer.Option(Path("plots"), help="Directory for the PNG files."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL or journal file; default the one beside the cache."),
    study: Optional[str] = typer.Option(None, help="Only this study (names as `mmtune tune` prints them)."),
    bench: Optional[Path] = typer.Option(None, help="Also chart this bench.json (from `mmtune bench --out`)."),
):
    """Plot studies' optimization history and parameter importances, and a bench chart."""
    try:
        from autotune.cache import Cache, CacheError
        from autotune.plots import plot_bench, plot_studies
        from autotune.storage import StorageError, storage_spec

        paths = plot_studies(storage_spec(storage, Cache()), out, study)
        if bench is not None:
            paths.append(plot_bench(bench, out))
    except (CacheError, KeyError, OSError, ValueError, StorageError) as error:
        _fail(error)
    for path in paths:
        typer.echo(str(path))


@app.command()
def pull(
    storage: str = typer.Option(..., help="The storage a fleet tuned in, like postgresql://user@host/db (its password never shown)."),
    device: Optional[str] = typer.Option(None, help="Pull the studies of this GPU model (as `mmtune best` names it); default this host's GPU."),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP + " Default all."),
):
    """Write the verified best of each study of this GPU model from a shared storage into the local cache."""
    try:
        from autotune.cache import CacheError
        from autotune.fleet import PullError, pull as run
        from autotune.storage import StorageError

        result = run(storage, device, dtype)
    except (CacheError, PullError, StorageError) as error:
        _fail(error)
    typer.echo(
        f"pulled {result.studies} studies of {result.device} from {result.storage}: {result.written} written,"
        f" {result.kept} kept (the cache's were current or faster), {result.empty} without a verified trial"
    )


@app.command("export")
def export_records(
    out: Optional[Path] = typer.Option(None, help="Write to this file instead of standard output."),
    device: Optional[str] = typer.Option(None, help="Only rows of this device (as `mmtune best` names it)."),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
):
    """Write cached rows as JSON: the format `mmtune import` and `mmtune promote --from` read."""
    try:
        from autotune.cache import Cache, CacheError

        text = json.dumps(Cache().rows(device=device, dtype=dtype), indent=1) + "\n"
    except CacheError as error:
        _fail(error)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)


@app.command("import")
def import_records(
    path: Path = typer.Argument(..., help="A JSON file written by `mmtune export` (or a shipped autotune/data/records/*.json)."),
):
    """Merge rows from a JSON file into the cache, keeping per key the current row of two, else the faster."""
    try:
        from autotune.cache import Cache, CacheError, RecordsError, read_records
        from kernels import source_hashes

        rows = read_records(path)
        written = Cache().merge(rows, source_hashes())
    except (CacheError, RecordsError) as error:
        _fail(error)
    typer.echo(f"imported {len(rows)} rows from {path}: {written} written, {len(rows) - written} kept "
               "(the cache's were current or faster)")


@app.command()
def promote(
    source: Optional[Path] = typer.Option(None, "--from", help="Promote the rows of this export file (`mmtune export`) instead of the cache's."),
    device: Optional[str] = typer.Option(None, help="Only rows of this GPU model (as `mmtune best` names it); default every GPU but the simulator."),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    m: Optional[int] = typer.Option(None, "--m", help="Only this shape (with --n and --k)."),
    n: Optional[int] = typer.Option(None, "--n", help="See --m."),
    k: Optional[int] = typer.Option(None, "--k", help="See --m."),
    out: Optional[Path] = typer.Option(None, help="Merge into this file instead of the package's records (needed outside a source checkout)."),
):
    """Merge tuned rows into the shipped records, autotune/data/records/<gpu>.json of this checkout, keeping the faster row per shape."""
    try:
        from autotune.cache import CacheError, RecordsError
        from autotune.records import PromoteError, promote as run, select

        promotions = run(select(source, device, dtype, _shape(m, n, k)), out)
    except (UserError, CacheError, RecordsError, PromoteError) as error:
        _fail(error)
    for p in promotions:
        typer.echo(f"{p.path}: {p.added} added, {p.replaced} replaced (faster, or current where the records' were on older code), {p.kept} kept; {p.total} rows")


cache_app = typer.Typer(help="Check the cache file, or set a damaged one aside and start fresh.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("check")
def cache_check():
    """Check the cache file (MMTUNE_CACHE): SQLite integrity, the mmtune table, every row's params."""
    from autotune.cache import check_file, default_path

    path = default_path()
    problems = check_file(path)
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"ok: {path}" if path.exists() else f"no cache yet at {path}")


@cache_app.command("reset")
def cache_reset():
    """Rename the cache file to <name>.bad-<time> (nothing is deleted); the next use starts fresh."""
    from autotune.cache import default_path, set_aside

    moved = set_aside(default_path())
    typer.echo(f"moved {default_path()} to {moved}" if moved else f"no cache at {default_path()}")


def _row_name(row: dict) -> str:
    shape = f"{row['m']}x{row['n']}x{row['k']}{_layout_suffix(row.get('layout'))}"
    return f"{row['device']} {row['dtype']} {shape} {row['family']}"


@app.command()
def warm(
    arch: str = typer.Option("sm_90", help="GPU architecture to compile for, like sm_90 or 9.0."),
    retime: bool = typer.Option(False, help="First re-time, on this GPU, the stale rows of its model (cached or shipped) into the cache."),
    simulate: bool = typer.Option(False, help="Re-time under Numba's CUDA simulator (tests; timings mean nothing)."),
):
    """Compile the kernels of the cache's and shipped rows for an architecture into the kernel store (no GPU needed)."""
    try:
        _use_simulator(simulate)
        from autotune.cache import CacheError
        from autotune.store import directory, parse_arch, warm as run

        target = parse_arch(arch)
        if retime:
            from autotune.retime import retime_stale

            for done in retime_stale(progress=lambda row: typer.echo(f"re-timing {_row_name(row)}", err=True)):
                typer.echo(f"{_row_name(done.old)}: " + (
                    f"{_gflops(done.old['gflops'])} -> {_gflops(done.new['gflops'])} GFLOPS on today's code"
                    if done.new else f"not re-timed: {done.error}"))
        if simulate:  # the simulator has no architecture to compile for
            return
        results = run(target)
    except (UserError, CacheError, ValueError) as error:
        _fail(error)
    for r in results:
        shape = f"{r.row['m']}x{r.row['n']}x{r.row['k']}{_layout_suffix(r.row.get('layout'))}"
        status = f"stored {r.key}" if r.key else f"failed: {r.error}"
        typer.echo(f"{r.row['device']} {r.row['dtype']} {shape} {r.row['family']}: {status}")
    typer.echo(f"{sum(bool(r.key) for r in results)} of {len(results)} kernels in {directory()}")
    if any(r.error for r in results):
        raise typer.Exit(1)


@app.command()
def check(
    family: str = typer.Option("register", help="Kernel family."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    sample: int = typer.Option(20, help="How many feasible configs to compile (the default first)."),
    cc: str = typer.Option("9.0", help="Target compute capability."),
    seed: int = typer.Option(0, help="Seed of the sample."),
):
    """Compile feasible configs for a GPU on this machine (no GPU needed); show registers, spills, shared memory."""
    try:
        from autotune.space import GpuLimits, compile_check, sample_configs

        target = tuple(int(x) for x in cc.split("."))
        limits = GpuLimits.for_cc(target)
        results = compile_check(family, sample_configs(family, dtype, limits, sample, seed), dtype, limits, target)
    except (ValueError, RuntimeError) as error:
        _fail(error)
    table = Table("config", "registers", "spill bytes", "shared bytes", "verdict")
    for r in results:
        res = r.resources or {}
        config = " ".join(f"{key}={value}" for key, value in r.config.items())
        table.add_row(
            config, str(res.get("registers", "")), str(res.get("spill_stores", "")),
            str(res.get("shared_bytes", "")), "ok" if r.ok else r.error,
        )
    Console(width=200).print(table)
    if not all(r.ok for r in results):
        raise typer.Exit(1)
