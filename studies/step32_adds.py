"""What adding into unaligned C as the address allows buys: split-K and stream-K kernels at
shapes whose N is not a multiple of 4, each built twice, in one process.

    python3 studies/step32_adds.py --out adds.json --shapes 1023x1025x999 777x1555x333 [--tiles 4]

Jobs at each shape: those of studies/step30_streamk.py (the shipped record, lookup's pick, and
the record's, lookup's and the measured table's --tiles best tiles streamed on 1 and 2 blocks per
SM) plus those tiles with K split in 2 and as wave arithmetic says (autotune.space.wave_splits).
Every job that adds into C runs twice: built for the shape (each group of 4 columns added as one
16-byte, two 8-byte, or 4-, 8- and 4-byte `red`s by its address) and built as before step 32 (one
4-byte `red` per column: the build told only A's and B's rows are unaligned). Built, checked and
timed as studies/step23_table.py does (driver plans, CUDA graphs, cuBLAS on the same tensors).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from step23_table import build_all, job, timed_shapes  # studies/, the script's folder
from step30_streamk import shape_jobs, tile_of

from autotune.operands import unaligned_rows
from autotune.records import shipped_rows
from autotune.space import DeviceLimits, infeasibility, wave_splits
from autotune.store import adds_into_c

OLD = " (4-byte adds)"


def split_jobs(jobs: list[dict], sm_count: int) -> list[dict]:
    """The streamed tiles of `jobs` with K split in 2 and as wave arithmetic says."""
    limits, found = DeviceLimits.for_cc("9.0"), {}
    for j in jobs:
        if j["family"] != "streamk":
            continue
        tile, shape = tile_of(j["params"]), tuple(j["shape"])
        for splits in {2, wave_splits(*shape, tile, sm_count)} - {1}:
            params = {**tile, "splits": splits}
            if infeasibility("splitk", params, "float32", limits) is None:
                found.setdefault(json.dumps(params, sort_keys=True), job("splitk", params, "float32", shape, "split"))
    return list(found.values())


def with_old_adds(jobs: list[dict]) -> list[dict]:
    """Each job, and each that adds into C again, built as if C's rows were aligned."""
    twins = []
    for j in jobs:
        if adds_into_c(j["params"]):
            built = unaligned_rows(*j["shape"], "NN", "float32")
            twins.append({**j, "source": j["source"] + OLD, "unaligned": built.replace("C", "")})
    return jobs + twins


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--tiles", type=int, default=4)
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1e9)
    args = parser.parse_args()
    began = time.perf_counter()

    from autotune.peers import TorchDevice

    device = TorchDevice()
    sm_count = device.torch.cuda.get_device_properties(0).multi_processor_count
    records = {(r["m"], r["n"], r["k"]): r for r in shipped_rows(None, "float32") if (r.get("layout") or "NN") == "NN"}
    jobs = []
    for shape in (tuple(map(int, s.split("x"))) for s in args.shapes):
        own = shape_jobs(shape, records.get(shape), sm_count, args.tiles, [1, 2])
        jobs += with_old_adds(own + split_jobs(own, sm_count))
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-adds-"))
    failed = build_all(jobs, root, args.jobs)

    result = {"device": device.name, "shapes": {}}
    for (shape, _), group, blas, seconds, _ in timed_shapes(device, jobs, root, failed, began + args.seconds):
        result["shapes"]["x".join(map(str, shape))] = {"cublas_gflops": blas, "jobs": group}
        print(f"{'x'.join(map(str, shape))}: cuBLAS {blas:8.0f}  ({seconds:.0f} s)", flush=True)
        old = {(j["family"], json.dumps(j["params"], sort_keys=True)): j for j in group if j["source"].endswith(OLD)}
        for j in sorted((j for j in group if not j["source"].endswith(OLD)), key=lambda j: -(j.get("gflops") or 0)):
            before = old.get((j["family"], json.dumps(j["params"], sort_keys=True)), {})
            ratio = lambda g: f"{g / blas:5.3f}x" if g else "  -   "  # noqa: E731
            print(f"  {j['source'][:24]:>24} {ratio(j.get('gflops'))} (4-byte adds {ratio(before.get('gflops'))})  "
                  f"{j['family']} {json.dumps(j['params'], sort_keys=True)} {j.get('error') or ''}", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
