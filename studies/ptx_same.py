"""Whether a change of kernel code changed what the shipped records run: the sm_90 PTX of every
shipped record, hashed, before and after.

    PYTHONPATH=OLD_CHECKOUT python3 studies/ptx_same.py --out before.json
    python3 studies/ptx_same.py --out after.json --against before.json [--relabel]

Each record's kernel is built for its shape (kernels.build_for) and compiled to PTX in a process
of its own: compiling several kernels in one process can change the PTX of the later ones. Entry
names (which embed Numba's unique ids), comments and Numba's environment declarations (globals
no kernel reads) are normalized away before hashing. With
--against, prints the records whose PTX differs and exits 1 if any does; records whose PTX is
the same can take today's source hash without being timed again (docs/performance.md, step 30):
--relabel writes it into the records file for them. No GPU needed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

#: Numba's declarations of each device function's environment pointer, which no kernel reads: a
#: device function split in two adds one, not code
ENVIRONMENTS = re.compile(r"^\.common \.global \.align 8 \.u64 _ZN08NumbaEnv\w+;\n", re.MULTILINE)
RECORDS = Path(__file__).resolve().parent.parent / "autotune" / "data" / "records" / "nvidia-h200.json"


def ptx_hash(row: dict) -> dict:
    import kernels
    from kernels.resources import ptx

    shape, layout = (row["m"], row["n"], row["k"]), row.get("layout") or "NN"
    kernel = kernels.build_for(row["family"], row["params"], row["dtype"], shape, layout)
    text = re.sub(r"_Z\w+", "NAME", re.sub(r"//[^\n]*", "", re.sub(ENVIRONMENTS, "", ptx(kernel))))
    return {"record": f"{row['family']} {row['dtype']} {'x'.join(map(str, shape))} {layout}",
            "params": row["params"], "built_for": kernel.unaligned, "kernels": kernels.__file__,
            "ptx_sha256": hashlib.sha256(text.encode()).hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--records", default=str(RECORDS))
    parser.add_argument("--against")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--relabel", action="store_true", help="give records whose PTX is the same today's source hash")
    args = parser.parse_args()
    rows = json.loads(Path(args.records).read_text())
    with ProcessPoolExecutor(args.jobs, max_tasks_per_child=1) as pool:
        found = list(pool.map(ptx_hash, rows))
    Path(args.out).write_text(json.dumps(found, indent=0))
    print(f"{len(found)} records compiled with {found[0]['kernels'] if found else '-'}")
    if args.against:
        before = {key(r): r for r in json.loads(Path(args.against).read_text())}
        changed = [r["record"] for r in found if before.get(key(r), {}).get("ptx_sha256") != r["ptx_sha256"]]
        print(f"{len(found) - len(changed)} the same, {len(changed)} changed or new: {', '.join(changed) or '-'}")
        if args.relabel:
            relabel(Path(args.records), {r["record"] for r in found} - set(changed))
        sys.exit(1 if changed else 0)


def key(found: dict) -> tuple[str, str]:
    """A compiled record's name and parameters, those its family gained since filled in
    (autotune.store.rows.GAINED), so that a record written before a parameter existed matches itself."""
    from autotune.store.rows import GAINED

    family = found["record"].split()[0]
    return found["record"], json.dumps({**GAINED.get(family, {}), **found["params"]}, sort_keys=True)


def relabel(path: Path, same: set[str]) -> None:
    """Today's source hash for the records of `same` (named as ptx_hash names them) in the file."""
    import kernels

    rows = json.loads(path.read_text())
    hashes = kernels.source_hashes()
    for row in rows:
        shape = "x".join(str(row[c]) for c in "mnk")
        if f"{row['family']} {row['dtype']} {shape} {row.get('layout') or 'NN'}" in same:
            row["source_hash"] = hashes[row["family"]]
    path.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"re-labelled {len(same)} records in {path}")


if __name__ == "__main__":
    main()
