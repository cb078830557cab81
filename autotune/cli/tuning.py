"""mmtune tune, lookup, best, warm and check: search a shape (or the shapes a program called),
say what serves it, show the cache, build kernels ahead of time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from autotune.cli.app import command
from autotune.cli.options import (
    Dtype,
    K,
    Layout,
    M,
    N,
    OnlyDtype,
    OnlyK,
    OnlyLayout,
    OnlyM,
    OnlyN,
    OnlyPrecision,
    Precision,
    Simulate,
    dimension,
    gflops,
    int_list,
    layout_suffix,
    parse_arch,
    row_name,
    shape,
    simulate_if_asked,
    whole_number,
)
from autotune.cli.recorded import show_tuned, tune_recorded, warm_recorded
from autotune.errors import TuneError, UserError

Families = Annotated[Optional[list[str]], typer.Option(
    "--family", parser=str.lower, metavar="FAMILY",
    help="Kernel family to search (repeatable), like register or shared; default all that take the dtype.")]
Gpus = Annotated[Any, typer.Option("--gpus", parser=int_list("--gpus", "GPU indices like 0,1", least=0),
                                   metavar="0,1,...", help="GPU indices: --jobs workers on each, all on one study.")]
TuneM = Annotated[Optional[int], typer.Option("--m", parser=dimension("--m"), metavar="M",
                                              help="Rows of A and C (with --n and --k, or else --recorded).")]
TuneN = Annotated[Optional[int], typer.Option("--n", parser=dimension("--n"), metavar="N", help="Columns of B and C.")]
TuneK = Annotated[Optional[int], typer.Option("--k", parser=dimension("--k"), metavar="K",
                                              help="Columns of A, rows of B.")]
RecordedFile = Annotated[Optional[Path], typer.Option("--recorded", metavar="FILE", help=(
    "A file of the products a program called (autotune.record or MMTUNE_RECORD): use those instead of one shape."))]


@command()
def tune(
    m: TuneM = None, n: TuneN = None, k: TuneK = None, dtype: Dtype = "float32",
    trials: Annotated[int, typer.Option(metavar="COUNT", help="Measured trials the study should hold; a rerun "
                                                              "resumes up to this.")] = 40,
    timeout: Annotated[Optional[float], typer.Option(metavar="SECONDS",
                                                     help="Stop searching after this many seconds.")] = None,
    family: Families = None,
    sampler: Annotated[str, typer.Option(parser=str.lower, metavar="SAMPLER", help=(
        "climb (local search, default), tpe, random, grid (brute force) or gp; all seeded."))] = "climb",
    storage: Annotated[Optional[str], typer.Option(metavar="FILE|URL", help=(
        "A journal file, or a database URL like postgresql://user@host/db that hosts share; default a journal "
        "file beside the cache."))] = None,
    seed: Annotated[int, typer.Option(metavar="SEED", help="Seed of the sampler and of the random inputs.")] = 0,
    jobs: Annotated[Optional[int], typer.Option(metavar="COUNT", help=(
        "Worker processes sharing the GPU: they compile in parallel, measure one at a time; default the usable CPU "
        "cores, as many as free memory holds (2 GiB each), at most 16."))] = None,
    trial_timeout: Annotated[float, typer.Option(metavar="SECONDS", help=(
        "Fail a trial (and stop its measuring process) after this many seconds."))] = 300,
    gpus: Gpus = None,
    layout: Layout = "NN",
    precision: Precision = None,
    recorded: RecordedFile = None,
    top: Annotated[Optional[int], typer.Option("--top", parser=whole_number("--top", least=1), metavar="COUNT", help=(
        "With --recorded: only the COUNT most called products."))] = None,
    simulate: Simulate = False,
):
    """Search kernel configs for one shape, or for the shapes a program called; cache and print the verified best."""
    from autotune.tune.tuner import TuneRequest
    from autotune.tune.tuner import tune as run

    given = [x is not None for x in (m, n, k)]
    if recorded is None and not all(given):
        raise UserError("give --m, --n and --k, or --recorded FILE")
    if recorded is not None and (any(given) or dtype != "float32" or layout != "NN" or precision is not None):
        raise UserError("--recorded takes each product's shape, dtype, layout and precision from the file; drop "
                        "--m, --n, --k, --dtype, --layout and --precision")
    if top is not None and recorded is None:
        raise UserError("--top needs --recorded")
    request = TuneRequest(
        m or 0, n or 0, k or 0, dtype=dtype, trials=trials, timeout=timeout, families=family or None,
        sampler=sampler, storage=storage, seed=seed, jobs=jobs, trial_timeout=trial_timeout,
        gpus=gpus, layout=layout, precision=precision,
    )
    if recorded is not None:
        tune_recorded(recorded, request, top)
        return
    result = run(request)
    if result.row is None:
        raise TuneError(f"no config verified in {result.trials} trials ({result.failed} failed); their errors are in "
                        f"study {result.study_name!r} of {result.storage}")
    show_tuned(result)


@command()
def best(
    m: OnlyM = None, n: OnlyN = None, k: OnlyK = None, dtype: OnlyDtype = None, layout: OnlyLayout = None,
    precision: OnlyPrecision = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print a JSON list of the rows.")] = False,
):
    """Show the cached best configs, for all shapes or one."""
    from autotune.store.records import cached

    rows = cached(dtype, shape(m, n, k), layout, precision)
    if as_json:
        typer.echo(json.dumps([{**c.row.as_dict(), "stale": c.stale} for c in rows], indent=2))
        return
    table = Table("device", "dtype", "M", "N", "K", "layout", "precision", "family", "params", "GFLOPS", "spread",
                  "trials", "tuned", "code")
    for c in rows:
        r = c.row
        params = " ".join(f"{key}={value}" for key, value in r.params.items())
        table.add_row(
            r.device, r.dtype, str(r.m), str(r.n), str(r.k), r.layout, r.precision, r.family,
            params, gflops(r.gflops), f"{r.spread:.1%}" if r.spread is not None else "",
            str(r.trials or ""), (r.created or "")[:10], "stale" if c.stale else "current",
        )
    Console(width=200).print(table)
    if any(c.stale for c in rows):
        typer.echo("stale: measured on older kernel code; matmul prefers current rows, `mmtune tune` re-times them")


@command()
def lookup(
    m: M, n: N, k: K, dtype: Dtype = "float32", layout: Layout = "NN",
    deterministic: Annotated[bool, typer.Option("--deterministic", metavar="", help=(
        "Only configs that do not add into C: no split-K or stream-K (same bits on every run)."))] = False,
    precision: Precision = None,
    simulate: Simulate = False,
):
    """Say which config matmul would use for a shape, and where it came from."""
    from autotune.select.lookup import lookup as find

    choice = find(m, n, k, dtype, layout=layout, deterministic=deterministic, precision=precision)
    typer.echo(f"{choice.source}: {choice.family} {json.dumps(choice.config)} ({choice.precision})")
    if choice.tuned_shape:
        tuned = "x".join(map(str, choice.tuned_shape)) + layout_suffix(choice.tuned_layout)
        typer.echo(f"  tuned for {tuned} (distance {choice.distance:.2f}) at {gflops(choice.gflops)} GFLOPS"
                   f" on {choice.measured_on} ({choice.gpu_match}; {choice.origin} row"
                   f"{', stale: older kernel code' if choice.stale else ''})")
    if choice.basis:
        typer.echo(f"  {choice.basis}")
    if choice.rest:
        typer.echo(f"  C's last {choice.peel} rows as a product of their own, {choice.rest.source}: "
                   f"{choice.rest.family} {json.dumps(choice.rest.config)}")


@command()
def warm(
    arch: Annotated[Any, typer.Option(parser=parse_arch, metavar="ARCH", help=(
        "GPU architecture to compile for, like sm_90 or 9.0 (default sm_90)."))] = None,
    retime: Annotated[bool, typer.Option("--retime/--no-retime", metavar="", help=(
        "First re-time, on this GPU, the stale rows of its model (cached or shipped) into the cache."))] = False,
    recorded: Annotated[Optional[Path], typer.Option("--recorded", metavar="FILE", help=(
        "Instead, the kernels matmul would load for the products in FILE (autotune.record), each for the GPU it "
        "was recorded on."))] = None,
    simulate: Annotated[bool, typer.Option("--simulate/--no-simulate", is_eager=True, callback=simulate_if_asked, metavar="", help=(
        "Re-time under Numba's CUDA simulator (tests; timings mean nothing)."))] = False,
):
    """Compile the kernels of the cache's and shipped rows for an architecture into the kernel store (no GPU needed)."""
    from autotune.store.cubins import directory
    from autotune.store.warm import warm as run

    if recorded is not None and arch is not None:
        raise UserError("--recorded builds for the GPU each product was recorded on; drop --arch")
    if recorded is not None and simulate:
        raise UserError("--recorded compiles for the GPUs the products were recorded on; drop --simulate")
    if retime:
        from autotune.tune.retime import retime_stale

        for done in retime_stale(progress=lambda row: typer.echo(f"re-timing {row_name(row)}", err=True)):
            typer.echo(f"{row_name(done.old)}: " + (
                f"{gflops(done.old.gflops)} -> {gflops(done.new.gflops)} GFLOPS on today's code"
                if done.new else f"not re-timed: {done.error}"))
    if simulate:  # the simulator has no architecture to compile for
        return
    if recorded is not None:
        warm_recorded(recorded)
        return
    results = run(arch or parse_arch("sm_90"))
    for r in results:
        status = f"stored {r.key}" if r.key else f"failed: {r.error}"
        typer.echo(f"{row_name(r.row)}: {status}")
    typer.echo(f"{sum(bool(r.key) for r in results)} of {len(results)} kernels in {directory()}")
    if any(r.error for r in results):
        raise typer.Exit(1)


@command()
def check(
    family: Annotated[str, typer.Option(parser=str.lower, metavar="FAMILY", help="Kernel family.")] = "register",
    dtype: Dtype = "float32",
    sample: Annotated[int, typer.Option(metavar="COUNT", help=(
        "How many feasible configs to compile (the default first)."))] = 20,
    cc: Annotated[Any, typer.Option(parser=parse_arch, metavar="CC", help=(
        "Target compute capability, like 9.0."))] = "9.0",
    seed: Annotated[int, typer.Option(metavar="SEED", help="Seed of the sample.")] = 0,
):
    """Compile feasible configs for a GPU on this machine (no GPU needed); show registers, spills, shared memory."""
    from autotune.space.compile import compile_check
    from autotune.space.configs import GpuLimits, sample_configs

    limits = GpuLimits.for_cc(cc)
    try:
        configs = sample_configs(family, dtype, limits, sample, seed)
        results = compile_check(family, configs, dtype, limits, cc.native.target)  # what numba builds there
    except (ValueError, RuntimeError) as error:  # autotune.space and kernels raise builtins here
        raise UserError(str(error)) from None
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
