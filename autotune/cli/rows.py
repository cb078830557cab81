"""mmtune export, import, promote, pull and cache: rows in and out of the cache, the shipped
records and a fleet's storage; the cache file itself."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli.app import cache_app, command
from autotune.cli.options import Device, OnlyDtype, OnlyK, OnlyM, OnlyN, shape


@command("export")
def export_records(
    out: Annotated[Optional[Path], typer.Option(metavar="FILE", help=(
        "Write to this file (in a directory that exists) instead of standard output."))] = None,
    device: Device = None,
    dtype: OnlyDtype = None,
):
    """Write cached rows as JSON: the format `mmtune import` and `mmtune promote --from` read."""
    from autotune.store.records import export

    text = export(out, device, dtype)
    if out is None:
        typer.echo(text, nl=False)


@command("import")
def import_records(
    path: Annotated[Path, typer.Argument(metavar="FILE", help=(
        "A JSON file written by `mmtune export` (or a shipped autotune/data/records/*.json)."))],
):
    """Merge rows from a JSON file into the cache, keeping per key the current row of two, else the faster."""
    from autotune.store.records import import_file

    imported = import_file(path)
    typer.echo(f"imported {imported.rows} rows from {path}: {imported.written} written, "
               f"{imported.rows - imported.written} kept (the cache's were current or faster)")


@command()
def promote(
    source: Annotated[Optional[Path], typer.Option("--from", metavar="FILE", help=(
        "Promote the rows of this export file (`mmtune export`) instead of the cache's."))] = None,
    device: Annotated[Optional[str], typer.Option(metavar="GPU", help=(
        "Only rows of this GPU model (as `mmtune best` names it); default every GPU but the simulator."))] = None,
    dtype: OnlyDtype = None,
    m: OnlyM = None, n: OnlyN = None, k: OnlyK = None,
    out: Annotated[Optional[Path], typer.Option(metavar="FILE", help=(
        "Merge into this file instead of the package's records (needed outside a source checkout)."))] = None,
):
    """Merge tuned rows into the shipped records, autotune/data/records/<gpu>.json of this checkout, keeping the
    faster row per shape."""
    from autotune.store.records import promote as run
    from autotune.store.records import select

    for p in run(select(source, device, dtype, shape(m, n, k)), out):
        typer.echo(f"{p.path}: {p.added} added, {p.replaced} replaced (faster, or current where the records' were on "
                   f"older code), {p.kept} kept; {p.total} rows")


@command()
def pull(
    storage: Annotated[str, typer.Option(metavar="URL", help=(
        "The storage a fleet tuned in, like postgresql://user@host/db (its password never shown)."))],
    device: Annotated[Optional[str], typer.Option(metavar="GPU", help=(
        "Pull the studies of this GPU model (as `mmtune best` names it); default this host's GPU."))] = None,
    dtype: OnlyDtype = None,
):
    """Write the verified best of each study of this GPU model from a shared storage into the local cache."""
    from autotune.tune.fleet import pull as run

    result = run(storage, device, dtype)
    typer.echo(
        f"pulled {result.studies} studies of {result.device} from {result.storage}: {result.written} written,"
        f" {result.kept} kept (the cache's were current or faster), {result.empty} without a verified trial"
    )


@command("check", cache_app)
def cache_check():
    """Check the cache file (MMTUNE_CACHE): SQLite integrity, mmtune's mark and table, every row (its params, a
    known family and dtype, params its family can take, GFLOPS below the GPU's peak)."""
    from autotune.store.cache import default_path
    from autotune.store.records import check_file

    path = default_path()
    problems = check_file(path)
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"ok: {path}" if path.exists() else f"no cache yet at {path}")


@command("reset", cache_app)
def cache_reset():
    """Rename the cache file to <name>.bad-<time> (nothing is deleted); the next use starts fresh."""
    from autotune.store.cache import default_path, set_aside

    moved = set_aside(default_path())
    typer.echo(f"moved {default_path()} to {moved}" if moved else f"no cache at {default_path()}")
