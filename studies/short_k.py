"""Products of a short K nobody tuned: the tiles around the short-K rule
(autotune.space.guesses.small_k_guess), what lookup serves, and cuBLAS's own kernels (step 56).

    python3 studies/short_k.py jobs --seeds 1-399 --count 24 --grid small --out JOBS.json      (CPU)
    python3 studies/table.py jobs JOBS.json --out TIMED.json                                   (GPU)
    python3 studies/short_k.py summary TIMED.json [TIMED.json ...]                             (CPU)
    python3 studies/short_k.py cublas JOBS.json --out NAMES.json                               (GPU)

`jobs` writes a `studies/table.py jobs` file: at each shape, lookup's pick for an H200 with an
empty cache (labelled --label, in both precisions) and every config of --grid. Shapes: the odd and
skinny ones of `seeded_shapes(seed)` for each of --seeds with K under 256, both sides over 16 and
M * N at least 20000, sorted by M * N and --count of them taken evenly (--all: every seeded
shape, no grid), then --shapes. Run it once with an older checkout first on PYTHONPATH and once
with this one (different --label), and `--add` the first file, to time both picks in one process.
`--cross NAME=V,V` crosses every grid config with a parameter's values (step 56 crossed
`wide_store` on a patched kernels/: `studies/h200/step56/wide-store.patch.xz`). `--region larger`
takes instead the seeded shapes past the rule's 32x64 tile (both sides over 64, more of those
tiles an SM than it takes), in any category; `--k-range` bounds their K, and `--exclude` leaves
out the shapes of a timed file (step 57: `--grid probe`, `--grid larger`).
`summary` prints each shape's cuBLAS GFLOPS and, over it, every lookup label's pick, the rule's
config where it serves the shape (this checkout's rule), and the best job; then their geometric
means by the rule's tile and stages ("none" where it serves none) and by lookup label. `cublas`
lists the kernels torch.matmul launches at each shape of a jobs file (torch.profiler): cuBLAS's
tile, stages and warps.
"""

from __future__ import annotations

import argparse
import itertools
import json
import lzma
import math
import os
import sys
import tempfile

#: the tiles `--grid small` crosses: a block's rows and columns, a thread's, BK, and the pipeline
#: (1 shared tile through registers, or 3 filled by asynchronous copies)
SMALL_SIDES, SMALL_THREAD_TILES, SMALL_STEPS = (32, 64, 128), ((4, 4), (8, 4), (4, 8)), (8, 16, 32)
PIPELINES = {"s1": {"stages": 1, "async_copy": False}, "s2": {"stages": 2, "async_copy": False},
             "s3a": {"stages": 3, "async_copy": True}, "s4a": {"stages": 4, "async_copy": True}}
COMMON = {"pad": 4, "unroll": True, "fragments": 1, "wide_fetch": True, "min_blocks": 1}
#: `--grid square`: the 64x64 tile's pipelines and BKs, and a 64x128 one, for a larger C
SQUARE = [({"bm": 64, "bn": 64, "tm": 8, "tn": 4, "bk": bk}, pipe) for pipe, bk in
          (("s1", 16), ("s1", 8), ("s3a", 8), ("s3a", 16), ("s2", 16), ("s2", 8), ("s4a", 8))] + [
          ({"bm": 64, "bn": 128, "tm": 8, "tn": 4, "bk": 8}, "s3a")]
#: `--grid rule`: the rule's tiles and their neighbours
RULE = [({"bm": 32, "bn": 64, "tm": 4, "tn": 4, "bk": 8}, "s3a"), ({"bm": 64, "bn": 64, "tm": 8, "tn": 4, "bk": 8}, "s3a"),
        ({"bm": 32, "bn": 32, "tm": 4, "tn": 4, "bk": 8}, "s3a"), ({"bm": 32, "bn": 32, "tm": 4, "tn": 4, "bk": 16}, "s1"),
        ({"bm": 64, "bn": 128, "tm": 8, "tn": 4, "bk": 8}, "s3a"), ({"bm": 32, "bn": 64, "tm": 4, "tn": 4, "bk": 16}, "s3a")]
#: `--grid probe` (step 57): five tiles, each at BK 8 and 16, through registers or 3 or 4 stages of
#: asynchronous copies (cross `fragments=1,2` for both fragment sets)
PROBE = [({"bm": bm, "bn": bn, "tm": tm, "tn": tn, "bk": bk}, pipe)
         for bm, bn, tm, tn in ((32, 64, 4, 4), (32, 32, 4, 4), (64, 64, 8, 4), (64, 32, 4, 4), (64, 128, 8, 8))
         for bk in (8, 16) for pipe in ("s1", "s3a", "s4a")]
#: `--grid larger` (step 57): the 64x64 tile's pipelines against the measured table's 64x128, for a C
#: past the 32x64 tile's
LARGER = [({"bm": 64, "bn": 64, "tm": 8, "tn": 4, "bk": bk}, pipe) for bk, pipe in
          ((8, "s1"), (8, "s3a"), (8, "s4a"), (16, "s1"))] + [
          ({"bm": 64, "bn": 128, "tm": 8, "tn": 8, "bk": 8}, pipe) for pipe in ("s1", "s3a")] + [
          ({"bm": 64, "bn": 64, "tm": 8, "tn": 4, "bk": 16}, "s3a")]
GPU, CC, SM_COUNT = "NVIDIA H200", "9.0", 132
#: the sources of jobs that are not a lookup's pick (step 56's files also name grids "regionB:...")
GRID_SOURCES = ("grid", "regionB")


def grid(name: str) -> list[dict]:
    if name == "none":
        return []
    if name == "small":
        tiles = [({"bm": bm, "bn": bn, "tm": tm, "tn": tn, "bk": bk}, pipe)
                 for bm, bn in itertools.product(SMALL_SIDES, SMALL_SIDES) for tm, tn in SMALL_THREAD_TILES
                 if 64 <= (bm // tm) * (bn // tn) <= 256 for bk in SMALL_STEPS for pipe in ("s1", "s3a")]
    else:
        tiles = {"square": SQUARE, "rule": RULE, "probe": PROBE, "larger": LARGER}[name]
    return [{**tile, **COMMON, **PIPELINES[pipe]} for tile, pipe in tiles]


def seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last) + 1)) if last else [int(s) for s in text.split(",")]


def shapes(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    from autotune.bench.peers import category, seeded_shapes
    from autotune.space.guesses import SHORT_K_TILE, SHORT_K_TILES_PER_SM, SKINNY

    low, high = (int(x) for x in args.k_range.split("-")) if args.k_range else (1, math.inf if args.all else 255)
    skipped = {tuple(entry["shape"]) for path in args.exclude for entry in load(path)["shapes"]}

    def wanted(m: int, n: int, k: int) -> bool:
        if not low <= k <= high or (m, n, k) in skipped:
            return False
        if args.region == "larger":  # past the short-K rule's 32x64 tile: the 64x64 tile's or the table's
            tiles = -(-m // SHORT_K_TILE["bm"]) * -(-n // SHORT_K_TILE["bn"])
            return min(m, n) > SKINNY and tiles > SHORT_K_TILES_PER_SM * SM_COUNT
        return args.all or (category(m, n, k) in ("odd", "skinny") and min(m, n) > 16 and m * n >= 20000)

    found = []
    for seed in seeds(args.seeds) if args.seeds else []:
        for shape in seeded_shapes(seed):
            if wanted(*shape) and shape not in found:
                found.append(shape)
    if not args.all:
        found.sort(key=lambda s: s[0] * s[1])
        found = found[:: max(1, len(found) // args.count)][: args.count]
    found += [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes]
    return list(dict.fromkeys(found))


def jobs_main(args: argparse.Namespace) -> None:
    os.environ.setdefault("MMTUNE_CACHE", os.path.join(tempfile.mkdtemp(), "empty.db"))
    from autotune.backends import Device
    from autotune.select.lookup import lookup
    from kernels.base import Config

    device = Device(GPU, CC, SM_COUNT)
    crossed = [dict(zip([n for n, _ in args.cross], values))
               for values in itertools.product(*[v for _, v in args.cross])] or [{}]
    jobs = [j for path in args.add for j in load(path)]
    seen = {(tuple(j["shape"]), j.get("layout", "NN"), Config.of(j["family"], j["params"]).key) for j in jobs}
    for shape in shapes(args):
        picks = {precision: lookup(*shape, "float32", device, layout=args.layout, precision=precision)
                 for precision in ("tf32x3", "ieee")}
        candidates = [(c.family, c.config, f"{args.label}:{precision}:{c.source}") for precision, c in picks.items()]
        candidates += [("vector", {**params, **extra}, "grid") for params in grid(args.grid) for extra in crossed]
        for family, params, source in candidates:
            key = (shape, args.layout, Config.of(family, params).key)
            if key not in seen:
                seen.add(key)
                jobs.append({"family": family, "params": params, "dtype": "float32", "shape": list(shape),
                             "layout": args.layout, "source": source})
    with open(args.out, "w") as out:
        json.dump(jobs, out)
    print(f"{len({tuple(j['shape']) for j in jobs})} shapes, {len(jobs)} jobs", file=sys.stderr)


def load(path: str):
    """A JSON file, xz-compressed where its name ends in .xz (as studies/ keeps them)."""
    with (lzma.open if path.endswith(".xz") else open)(path, "rt") as file:
        return json.load(file)


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def summary_main(args: argparse.Namespace) -> None:
    from autotune.space.configs import GpuLimits
    from autotune.space.guesses import SHORT_K_TILE, small_k_guess

    gpu = GpuLimits.for_cc(CC, SM_COUNT)
    by_region: dict[str, dict[str, list[float]]] = {}
    for path in args.timed:
        for entry in load(path)["shapes"]:
            blas, (m, n, k) = entry["cublas_gflops"], entry["shape"]
            timed = [j for j in entry["jobs"] if j.get("gflops")]
            if not blas or not timed:
                continue
            ratios = {"best": max(j["gflops"] for j in timed) / blas}
            for j in timed:
                if not j["source"].startswith(GRID_SOURCES):  # a lookup's pick, "LABEL:..."
                    ratios.setdefault(j["source"].split(":")[0], j["gflops"] / blas)
            layout = entry["jobs"][0].get("layout", "NN")
            rule = small_k_guess((m, n, k), "float32", gpu, layout)
            hit = [j for j in timed if rule and j["family"] == rule.family and _same(j["params"], rule.params)]
            region = "none" if rule is None else "{bm}x{bn} s{stages}".format(**rule.params)
            if hit:
                ratios["rule"] = hit[0]["gflops"] / blas
            print(f"{layout} {m}x{n}x{k}".ljust(20) + f"cuBLAS {blas:9.0f}  " + "  ".join(
                f"{name} {value:.3f}" for name, value in ratios.items()) + f"  ({region})")
            for name, value in ratios.items():
                by_region.setdefault(f"{layout} {region}", {}).setdefault(name, []).append(value)
    print("\ngeometric means over cuBLAS, by the rule's tile (SHORT_K_TILE is "
          f"{SHORT_K_TILE['bm']}x{SHORT_K_TILE['bn']}):")
    for region, columns in sorted(by_region.items()):
        print(f"  {region:12}" + "  ".join(f"{name} {geomean(v):.3f} ({len(v)})" for name, v in columns.items()))


def _same(params: dict, rule: dict) -> bool:
    """Whether a job's params are the rule's, a parameter the rule lacks counting where it is off
    (False or 0, as `--cross wide_store=false` left it)."""
    return all(params.get(name) == value for name, value in rule.items()) and not any(
        value for name, value in params.items() if name not in rule)


def cublas_main(args: argparse.Namespace) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.backends.cuda.matmul.allow_tf32 = False
    names = {}
    for m, n, k in sorted({tuple(j["shape"]) for j in load(args.jobs)}):
        A, B = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        C = torch.empty(m, n, device="cuda")
        for _ in range(3):
            torch.matmul(A, B, out=C)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                torch.matmul(A, B, out=C)
            torch.cuda.synchronize()
        launched: dict[str, list[float]] = {}
        for event in prof.events():
            if event.device_type.name == "CUDA":
                launched.setdefault(event.name, []).append(event.device_time)
        names[f"{m}x{n}x{k}"] = {name: [len(t), sorted(t)[len(t) // 2]] for name, t in launched.items()}
        print(f"{m}x{n}x{k}", names[f"{m}x{n}x{k}"], flush=True)
    with open(args.out, "w") as out:
        json.dump(names, out, indent=1)


def crossing(text: str) -> tuple[str, list]:
    name, _, values = text.partition("=")
    return name, [json.loads(v) for v in values.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    jobs = commands.add_parser("jobs", help="a studies/table.py jobs file (CPU)")
    jobs.add_argument("--seeds", help="FIRST-LAST or S,S,...")
    jobs.add_argument("--count", type=int, default=24)
    jobs.add_argument("--all", action="store_true", help="every seeded shape, not only the short-K odd and skinny ones")
    jobs.add_argument("--shapes", nargs="*", default=[])
    jobs.add_argument("--layout", default="NN")
    jobs.add_argument("--k-range", help="LOW-HIGH: the seeded shapes' K (default 1-255, any with --all)")
    jobs.add_argument("--region", choices=("small", "larger"), default="small",
                      help="small: odd and skinny shapes (or --all); larger: both sides over 64 and more "
                           "32x64 tiles an SM than the short-K rule's tile takes")
    jobs.add_argument("--exclude", action="append", default=[], help="a timed file whose shapes are left out")
    jobs.add_argument("--grid", choices=("small", "square", "rule", "probe", "larger", "none"), default="small")
    jobs.add_argument("--cross", type=crossing, action="append", default=[])
    jobs.add_argument("--label", default="lookup")
    jobs.add_argument("--add", action="append", default=[], help="a jobs file whose jobs come first")
    jobs.add_argument("--out", required=True)
    summary = commands.add_parser("summary", help="what a timed jobs file says of the rule (CPU)")
    summary.add_argument("timed", nargs="+")
    cublas = commands.add_parser("cublas", help="cuBLAS's kernels at a jobs file's shapes (GPU)")
    cublas.add_argument("jobs")
    cublas.add_argument("--out", required=True)
    args = parser.parse_args()
    {"jobs": jobs_main, "summary": summary_main, "cublas": cublas_main}[args.command](args)


if __name__ == "__main__":
    main()
