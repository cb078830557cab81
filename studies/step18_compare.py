"""Step 18 of docs/performance.md: compare the cold 40-trial `climb` tunes with the shipped records,
shape by shape, from the two benches each device call ran (`studies/gpu_step18.sh`), and keep the
faster row of each shape in studies/h200/records.json.

    python studies/step18_compare.py  ->  studies/h200/step18/compare.txt (and records.json updated)
"""

import json
from pathlib import Path

STUDIES = Path(__file__).parent
STEP = STUDIES / "h200" / "step18"
RECORDS = STUDIES / "h200" / "records.json"


def bench_rows(name: str) -> dict[tuple, dict]:
    rows = {}
    for path in sorted(STEP.glob(f"call*/{name}/bench.json")):
        rows |= {(r["m"], r["n"], r["k"]): r for r in json.loads(path.read_text())["rows"]}
    return rows


def main() -> None:
    new, shipped = bench_rows("new"), bench_rows("shipped")
    tuned = {(r["m"], r["n"], r["k"]): r for path in sorted(STEP.glob("call*/records.json"))
             for r in json.loads(path.read_text())}
    records = json.loads(RECORDS.read_text())
    lines = [f"{'shape':<16} {'new family':<10} {'GFLOPS':>8} {'ratio':>6}   {'shipped':<8} {'GFLOPS':>8} "
             f"{'ratio':>6}   new/shipped  kept"]
    for shape in new:
        a, b = new[shape], shipped[shape]
        keep_new = a["tuned_gflops"] > b["tuned_gflops"]
        lines.append(
            f"{'x'.join(map(str, shape)):<16} {a['family']:<10} {a['tuned_gflops']:>8,.0f} {a['ratio']:>6.3f}   "
            f"{b['family']:<8} {b['tuned_gflops']:>8,.0f} {b['ratio']:>6.3f}   {a['tuned_gflops'] / b['tuned_gflops']:>11.3f}  "
            f"{'new' if keep_new else 'shipped'}"
        )
        if keep_new:
            assert tuned[shape]["params"] == a["config"], shape  # the benched row is the tuned one
            records = [r for r in records if (r["m"], r["n"], r["k"]) != shape] + [tuned[shape]]
    records.sort(key=lambda r: (r["dtype"], r["m"], r["n"], r["k"]))
    RECORDS.write_text(json.dumps(records, indent=2) + "\n")
    (STEP / "compare.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
