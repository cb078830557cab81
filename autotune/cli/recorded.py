"""What `mmtune tune` prints of a tune, and the lines of `tune --recorded` and `warm --recorded`:
each calls one library function (autotune.tune.recorded, autotune.call.warm) and says, product by
product, what became of it."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from autotune.cli.options import gflops, layout_suffix


def show_tuned(result) -> None:
    """A tune's winner (autotune.tune.tuner.TuneResult with a row), in four lines."""
    row = result.row
    typer.echo(f"best for {row.device} {row.dtype} {row.m}x{row.n}x{row.k}{layout_suffix(row.layout)}: {row.family} "
               f"{json.dumps(row.params)} ({row.precision})")
    typer.echo(
        f"  {gflops(row.gflops)} GFLOPS, median {row.median_ms:.4g} ms, spread {row.spread:.1%};"
        f" {result.trials} trials ({result.new_trials} new, {result.failed} failed) in {result.wall_s:.0f} s"
    )
    typer.echo("  written to the cache" if result.written else "  the cache keeps a faster row for this shape")
    typer.echo(f"  study {result.study_name!r} in {result.storage}")


def recorded_name(p) -> str:
    """A recorded product in a line: shape, layout, dtype, precision."""
    return f"{p.m}x{p.n}x{p.k}{layout_suffix(p.layout)} {p.dtype} {p.precision}"


def tune_recorded(path: Path, request, top: int | None) -> None:
    """tune --recorded: on stderr a line as each product starts (or was recorded on another GPU);
    on stdout each one's result, then a count. Exit status 1 if a tune failed."""
    from autotune.tune.recorded import RecordedTuning
    from autotune.tune.recorded import tune_recorded as run

    done = []
    for outcome in run(RecordedTuning(path, request, top)):
        p = outcome.product
        name = f"{recorded_name(p)}, {p.calls:,} call{'s' if p.calls > 1 else ''}"
        if outcome.status == "elsewhere":
            typer.echo(f"{name}: {outcome.reason}", err=True)
            continue
        name = f"[{outcome.index}/{outcome.total}] {name}"
        if outcome.status == "tuning":
            typer.echo(f"{name}: tuning", err=True)
            continue
        done.append(outcome.status)
        if outcome.status == "tuned":
            show_tuned(outcome.result)
        else:
            typer.echo(f"{name}: {outcome.status}: {outcome.reason}")
    counts = ", ".join(f"{done.count(s)} {s}" for s in ("tuned", "skipped", "failed"))
    typer.echo(f"{counts} of {len(done)} recorded products of this GPU in {path}")
    if "failed" in done:
        raise typer.Exit(1)


def warm_recorded(path: Path) -> None:
    """warm --recorded: each product's kernels in the store, or why not. Exit status 1 if one
    that has an architecture failed to build."""
    from autotune.call.warm import warm_recorded as run
    from autotune.store.cubins import directory

    results = run(path)
    for r in results:
        p = r.product
        status = f"stored {' '.join(r.keys)}" if r.keys else f"not built: {r.error}"
        more = " deterministic" * p.deterministic + " with a bias" * p.bias
        typer.echo(f"{p.device} {recorded_name(p)}{more}: {status}")
    typer.echo(f"{sum(bool(r.keys) for r in results)} of {len(results)} recorded products' kernels in {directory()}")
    if any(not r.keys and r.product.cc for r in results):
        raise typer.Exit(1)
