#!/usr/bin/env bash
# One device call: tune the key shapes, then bench the standard suite against cuBLAS.
#   bash studies/gpu_run.sh OUT_DIR [TRIALS]
# Expects PYTHONPATH to reach this checkout (and the carried wheels, see README).
set -uo pipefail
out=${1:?usage: gpu_run.sh OUT_DIR [TRIALS]}; trials=${2:-40}
mkdir -p "$out"
export MMTUNE_CACHE="$out/cache.db" NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1
for shape in 1024x1024x1024 4096x4096x4096 2048x2048x2048; do
  IFS=x read -r m n k <<<"$shape"
  timeout 130 python3 -m autotune tune --m "$m" --n "$n" --k "$k" --trials "$trials" --timeout 90 --family vector --family register
done 2>&1 | tee "$out/tune.log"
python3 -m autotune best --json > "$out/records.json"
timeout 260 python3 -m autotune bench --shapes standard --out "$out" 2>&1 | tee "$out/bench.log"
