"""What `lookup` serves a GPU model at shapes nobody tuned, from the shipped data alone, and which
of those choices a change of the shipped records or tables moves. No GPU: the device is named.

    python studies/lookup_diff.py --gpu "NVIDIA H100 80GB HBM3" --dtype float64 --out before.json
    (change the shipped data: a step in studies/table.py's SHIPPED, then its rebuild)
    python studies/lookup_diff.py --gpu "NVIDIA H100 80GB HBM3" --dtype float64 --out after.json --against before.json

A promoted row also teaches the cost model its tile, which then prices it at every shape the
records do not serve (docs/performance.md, step 52): this lists where that changes the pick.
`--lone-share` prices with another autotune.select.model.LONE_SHARE. `--jobs` writes a
`studies/table.py jobs` file that times, at each shape, every distinct choice of this run and of
the earlier runs named by `--variant NAME=FILE` (a job's "source" names the runs that chose it),
so that one GPU process compares them, and `--timed` summarizes what that process measured
(docs/performance.md, step 53):

    python studies/lookup_diff.py --gpu "NVIDIA H200" --dtype float64 --seed 7 --lone-share 1 --out one.json
    python studies/lookup_diff.py --gpu "NVIDIA H200" --dtype float64 --seed 7 --out now.json \
        --variant step52=before.json --variant lone1=one.json --jobs jobs.json
    python studies/table.py jobs jobs.json --out timed.json    (on the GPU)
    python studies/lookup_diff.py --timed timed.json

The user's cache is not read (MMTUNE_CACHE points at an empty file of a temporary directory).
Exits 1 where a choice moved.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

#: cubes across the mid and large sizes, and products of a few hundred rows on wide weights
PROBES = [(s, s, s) for s in (1100, 1500, 1536, 1900, 2304, 2500, 3000, 3001, 5000, 6000, 12288)] + [
    (4000, 4000, 1000), (1000, 4000, 4000), (1024, 8192, 1024), (512, 8192, 8192), (300, 8192, 8192)]


def shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def choices(gpu: str, cc: str, sm_count: int, dtype: str, layout: str, precision: str | None,
            shapes: list[tuple[int, int, int]]) -> dict[str, str]:
    """Each shape's choice: where it came from, the family and its config."""
    from autotune.backends import Device
    from autotune.select.lookup import lookup

    device = Device(name=gpu, cc=cc, sm_count=sm_count)
    found = {}
    for m, n, k in shapes:
        choice = lookup(m, n, k, dtype, device=device, layout=layout, precision=precision)
        found[f"{m}x{n}x{k}"] = f"{choice.source} {choice.family} {json.dumps(choice.config, sort_keys=True)}"
    return found


def variant(text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    if not name or not path or name == "this":
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=FILE with a NAME other than 'this'")
    return name, Path(path)


def share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share from 0 to 1")
    return value


def earlier_runs(variants: list[tuple[str, Path]], names: list[str]) -> dict[str, dict[str, str]]:
    """The choices of each --variant run; ValueError where one cannot be read or lacks a shape."""
    runs = {}
    for name, path in variants:
        try:
            runs[name] = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"--variant {name}: cannot read {path}: {error}") from None
        missing = [shape for shape in names if shape not in runs[name]]
        if missing:
            raise ValueError(f"--variant {name}: {path} has no choice at {', '.join(missing[:3])}")
    return runs


def jobs(runs: dict[str, dict[str, str]], dtype: str, layout: str) -> list[dict]:
    """studies/table.py jobs: at each shape, each distinct choice among `runs` (name -> choices)."""
    found = []
    for name in next(iter(runs.values())):
        chosen: dict[tuple[str, str], list[str]] = {}
        for run, picks in runs.items():
            _, family, config = picks[name].split(" ", 2)
            chosen.setdefault((family, config), []).append(run)
        for (family, config), by in chosen.items():
            found.append({"family": family, "params": json.loads(config), "dtype": dtype, "layout": layout,
                          "shape": list(shape(name)), "source": ",".join(by)})
    return found


def timed(path: Path) -> list[str]:
    """Lines: each run's geometric mean of kernel GFLOPS / cuBLAS's, by category and in all, from
    a studies/table.py jobs result of `--jobs`; a job that failed, or a shape cuBLAS was not
    timed at, is left out and counted."""
    from autotune.bench.peers import category

    logs: dict[str, dict[str, list[float]]] = {}
    left_out: dict[str, int] = {}
    for result in json.loads(path.read_text())["shapes"]:
        for job in result["jobs"]:
            for run in job["source"].split(","):
                logs.setdefault(run, {})
                if not (job.get("gflops") and result.get("cublas_gflops")):
                    left_out[run] = left_out.get(run, 0) + 1
                    continue
                for group in (category(*result["shape"]) or "other", "all"):
                    logs[run].setdefault(group, []).append(math.log(job["gflops"] / result["cublas_gflops"]))
    return [f"{run:>12} " + "  ".join(f"{group} {math.exp(statistics.fmean(v)):.3f} ({len(v)})"
                                       for group, v in groups.items())
            + (f"  left out {left_out[run]}" if run in left_out else "") for run, groups in logs.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", help="a GPU model as the records name it")
    parser.add_argument("--cc", default="9.0")
    parser.add_argument("--sm-count", type=int, default=132)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--layout", default="NN")
    parser.add_argument("--precision")
    parser.add_argument("--seed", type=int, help="also autotune.bench.peers.seeded_shapes(seed)")
    parser.add_argument("--shapes", type=shape, nargs="*", default=PROBES)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--against", type=Path, help="an earlier --out to compare with")
    parser.add_argument("--lone-share", type=share, help="price with this autotune.select.model.LONE_SHARE (0 to 1)")
    parser.add_argument("--variant", type=variant, action="append", default=[], help="NAME=an earlier --out")
    parser.add_argument("--jobs", type=Path, help="write studies/table.py jobs for this run and the --variant runs")
    parser.add_argument("--timed", type=Path, help="only summarize a studies/table.py jobs result of --jobs")
    args = parser.parse_args()
    if args.timed:
        try:
            print("\n".join(timed(args.timed)))
        except (OSError, ValueError, KeyError, TypeError) as error:
            parser.error(f"--timed {args.timed}: not a studies/table.py jobs result ({error!r})")
        return 0
    if not (args.gpu and args.out):
        parser.error("--gpu and --out are needed, unless --timed")
    if args.variant and not args.jobs:
        parser.error("--variant names runs for --jobs")
    if args.lone_share is not None:
        from autotune.select import model

        model.LONE_SHARE = args.lone_share
    with tempfile.TemporaryDirectory() as empty:
        os.environ["MMTUNE_CACHE"] = str(Path(empty) / "cache.db")
        shapes = list(args.shapes)
        if args.seed is not None:
            from autotune.bench.peers import seeded_shapes

            shapes += [tuple(s) for s in seeded_shapes(args.seed)]
        found = choices(args.gpu, args.cc, args.sm_count, args.dtype, args.layout, args.precision, shapes)
    args.out.write_text(json.dumps(found, indent=0))
    if args.jobs:
        try:
            runs = {"this": found, **earlier_runs(args.variant, list(found))}
        except ValueError as error:
            parser.error(str(error))
        args.jobs.write_text(json.dumps(jobs(runs, args.dtype, args.layout)))
    if args.against is None:
        for name, choice in found.items():
            print(f"{name:>18} {choice}")
        return 0
    before = json.loads(args.against.read_text())
    moved = [name for name in found if before.get(name) != found[name]]
    for name in moved:
        print(f"{name:>18} {before.get(name)}\n{'':>18} -> {found[name]}")
    print(f"{len(moved)} of {len(found)} choices moved")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
