"""Each candidate's speed in two measured tables of the same shapes (studies/step24_table.py),
new over old, by whether the shape's operands have unaligned rows and how the candidate moves
its tiles (through registers, or by asynchronous copies).

    python3 studies/step26_compare.py OLD.json[.xz] ... -- NEW.json[.xz] ...

Step 26 read unaligned rows through registers as aligned 16-byte words: candidates through
registers at shapes with unaligned rows are the ones the change touches, the rest are controls
(their ratios are the noise between the two device sessions).
"""

from __future__ import annotations

import json
import lzma
import math
import statistics
import sys
from collections import defaultdict

from autotune.operands import unaligned_rows
from autotune.peers import category


def read(paths: list[str]) -> tuple[dict, list]:
    speeds, tiles = {}, None
    for path in paths:
        opened = lzma.open(path, "rt") if path.endswith(".xz") else open(path)
        with opened as handle:
            table = json.load(handle)
        tiles = table["tiles"]
        for entry in table["shapes"]:
            shape = tuple(entry["shape"])
            for job in entry["jobs"]:
                if job.get("gflops"):
                    for name in job.get("candidates", ()):
                        speeds[shape, name] = job["gflops"]
            speeds[shape, "cublas"] = entry.get("cublas_gflops")
    return speeds, tiles


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> None:
    split = sys.argv.index("--")
    old, tiles = read(sys.argv[1:split])
    new, _ = read(sys.argv[split + 1:])
    groups, best = defaultdict(list), defaultdict(list)
    for (shape, name), speed in new.items():
        if name == "cublas" or not old.get((shape, name)):
            continue
        moved = "copies" if tiles[int(name.split(":")[0])]["async_copy"] else "registers"
        rows = "unaligned" if unaligned_rows(*shape, "NN", "float32") else "aligned"
        groups[rows, moved].append(speed / old[shape, name])
    for (rows, moved), ratios in sorted(groups.items()):
        print(f"{rows:>9} rows, tiles through {moved:>9}: {len(ratios):4} candidates, new/old geomean "
              f"{geomean(ratios):.3f}, median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.2f}, max {max(ratios):.2f}")
    shapes = {shape for shape, name in new if name == "cublas"}
    for shape in sorted(shapes):
        fastest = {label: max((v for (s, n), v in table.items() if s == shape and n != "cublas" and v), default=0)
                   for label, table in (("old", old), ("new", new))}
        cublas = new.get((shape, "cublas")) or 0
        if fastest["old"] and fastest["new"] and cublas:
            rows = "unaligned" if unaligned_rows(*shape, "NN", "float32") else "aligned"
            best[rows, category(*shape)].append((fastest["new"] / fastest["old"], fastest["new"] / cublas,
                                                 fastest["old"] / old.get((shape, "cublas"), cublas)))
    print("best candidate per shape (vs cuBLAS of its own session):")
    for (rows, kind), entries in sorted(best.items()):
        print(f"{rows:>9} {kind:>6}: {len(entries):3} shapes, new/old {geomean([e[0] for e in entries]):.3f}, "
              f"vs cuBLAS {geomean([e[2] for e in entries]):.3f} -> {geomean([e[1] for e in entries]):.3f}")


if __name__ == "__main__":
    main()
