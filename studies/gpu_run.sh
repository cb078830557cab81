#!/usr/bin/env bash
# Tune shapes on one GPU, then bench the standard suite against cuBLAS.
#   bash studies/gpu_run.sh OUT_DIR TRIALS [MxNxK ...]     (default: every shape of the standard suite)
# The cache and the Optuna journal go to $MMTUNE_CACHE (default OUT_DIR/cache.db), so a later call
# can resume them; BENCH=0 skips the bench; TUNE_SECONDS (default 50) bounds each shape's study.
# Expects PYTHONPATH to reach this checkout (and the carried wheels, see README).
set -uo pipefail
out=${1:?usage: gpu_run.sh OUT_DIR TRIALS [MxNxK ...]}; trials=${2:-40}; shift 2 || shift $#
mkdir -p "$out"
export MMTUNE_CACHE="${MMTUNE_CACHE:-$out/cache.db}" NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1
shapes=("$@")
if [ ${#shapes[@]} -eq 0 ]; then
  mapfile -t shapes < <(python3 -c 'from autotune.records import suites; print("\n".join(suites()["standard"]))')
fi
for shape in "${shapes[@]}"; do
  IFS=x read -r m n k <<<"$shape"
  timeout $((${TUNE_SECONDS:-50} + 100)) python3 -m autotune tune --m "$m" --n "$n" --k "$k" --trials "$trials" \
    --timeout "${TUNE_SECONDS:-50}" --jobs 6 \
    --family vector --family splitk --family register
done 2>&1 | tee -a "$out/tune.log"
python3 -m autotune best --json > "$out/records.json"
if [ "${BENCH:-1}" = 1 ]; then
  timeout 260 python3 -m autotune bench --shapes standard --out "$out" 2>&1 | tee "$out/bench.log"
fi
