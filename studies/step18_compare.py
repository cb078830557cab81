"""Step 18 of docs/performance.md: compare the cold 40-trial `climb` tunes with the shipped records,
shape by shape, from the two benches each device call ran (`studies/gpu_step18.sh`).

    python studies/step18_compare.py  ->  studies/h200/step18/compare.txt

The shipped records took the tuned rows of the shapes marked `new`: `mmtune promote --from
studies/h200/step18/call3/records.json`, which keeps the faster row per shape by the tuner's GFLOPS,
turns the records before step 18 into today's autotune/data/records/nvidia-h200.json byte for byte.
"""

import json
from pathlib import Path

STEP = Path(__file__).parent / "h200" / "step18"


def bench_rows(name: str) -> dict[tuple, dict]:
    rows = {}
    for path in sorted(STEP.glob(f"call*/{name}/bench.json")):
        rows |= {(r["m"], r["n"], r["k"]): r for r in json.loads(path.read_text())["rows"]}
    return rows


def main() -> None:
    new, shipped = bench_rows("new"), bench_rows("shipped")
    lines = [f"{'shape':<16} {'new family':<10} {'GFLOPS':>8} {'ratio':>6}   {'shipped':<8} {'GFLOPS':>8} "
             f"{'ratio':>6}   new/shipped  kept"]
    for shape in new:
        a, b = new[shape], shipped[shape]
        lines.append(
            f"{'x'.join(map(str, shape)):<16} {a['family']:<10} {a['tuned_gflops']:>8,.0f} {a['ratio']:>6.3f}   "
            f"{b['family']:<8} {b['tuned_gflops']:>8,.0f} {b['ratio']:>6.3f}   {a['tuned_gflops'] / b['tuned_gflops']:>11.3f}  "
            f"{'new' if a['tuned_gflops'] > b['tuned_gflops'] else 'shipped'}"
        )
    (STEP / "compare.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
