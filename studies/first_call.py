"""The first call of a product shape the process has not seen, through autotune.torch, as a new
user meets it: seconds from after `import autotune.torch` and CUDA init (inputs on the GPU) to a
verified result, each case in a fresh process with a kernel store of its own; and the seconds the
import took.

    python3 studies/first_call.py --out OUT.json [--shape 1536x1024x768] [--seen 1024x1024x1024]

Cases:
  - `empty`: an empty store (a fresh install): the first call takes the kernel that ships for its
    kind (autotune.store.prebuilt) while the chosen one builds, or compiles where none ships;
  - `kind`: a store holding only --seen's kernel, of the same kind as --shape's (dtype, layout,
    alignment, offset width): the first call takes it as a stand-in while the chosen kernel builds
    in another process;
    then, in both, the calls' host time (back to back, no synchronize) while it builds and once it
    has switched, each as a median over a window;
  - `own`: a store that already holds --shape's own kernel.
Prints one JSON object a case and writes them all to --out. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, statistics, sys, time
began = time.perf_counter()
import autotune.torch as mt
import torch
imported = time.perf_counter() - began
m, n, k = map(int, sys.argv[1].split("x"))
A = torch.randn(m, k, device="cuda"); B = torch.randn(k, n, device="cuda")
ref = A.double() @ B.double()
torch.cuda.synchronize()
start = time.perf_counter()
C = mt.matmul(A, B)
torch.cuda.synchronize()
first = time.perf_counter() - start
from autotune.store import background
builds = len(background._builds)  # a stand-in served the first call while these build
error = float(torch.linalg.norm(C.double() - ref) / torch.linalg.norm(ref))
calls = []  # (seconds since the first call began, host seconds of one call)
while calls[-1][0] < float(sys.argv[2]) if calls else True:
    began = time.perf_counter()
    mt.matmul(A, B)
    calls.append((began - start, time.perf_counter() - began))
    if len(calls) % 64 == 0:
        torch.cuda.synchronize()
def window(low, high):
    found = [c for t, c in calls if low <= t < high]
    return round(statistics.median(found) * 1e6, 1) if found else None
end = calls[-1][0] if calls else 0
print(json.dumps({"import_s": round(imported, 3), "first_call_s": round(first, 4), "background_builds": builds,
                  "relative_error": error,
                  "calls": len(calls),
                  "host_us_first_half_second": window(0, 0.5), "host_us_last_second": window(end - 1, end + 1)}))
"""


def child(shape: str, store: Path, seconds: float) -> dict:
    env = {**os.environ, "MMTUNE_KERNELS": str(store), "MMTUNE_CACHE": str(store / "cache.db")}
    env.pop("MMTUNE_WAIT", None)
    done = subprocess.run([sys.executable, "-c", CHILD, shape, str(seconds)], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", default="1536x1024x768")
    parser.add_argument("--seen", default="1024x1024x1024")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the `kind` case keeps calling")
    args = parser.parse_args()
    found = []
    with tempfile.TemporaryDirectory() as root:
        stores = {name: Path(root) / name for name in ("empty", "kind", "own")}
        for store in stores.values():
            store.mkdir()
        child(args.seen, stores["kind"], 0)  # its kernel into the store, and nothing else
        child(args.shape, stores["own"], 0)
        for name, store in stores.items():
            (store / "cache.db").unlink(missing_ok=True)  # rows of a run are not a new user's
            result = {"case": name, "shape": args.shape, "seen": args.seen if name == "kind" else None,
                      **child(args.shape, store, 0 if name == "own" else args.seconds)}
            print(json.dumps(result), flush=True)
            found.append(result)
    args.out.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
