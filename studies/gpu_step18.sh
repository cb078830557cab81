#!/usr/bin/env bash
# Step 18 of docs/performance.md: does the `climb` sampler hold beyond 4096^3? A cold `mmtune tune`
# with the CLI's defaults (every family, climb) and --trials 40 --jobs 14 for each shape given, with
# the shipped records hidden, so the only warm starts are the families' defaults and the shapes
# tuned before in this cache. Cache and journal stay in /tmp/step18 between calls on a held machine.
# BENCH=1 then benches those shapes twice in the same call: on the new cache alone, then on the
# shipped records alone.
#   bash studies/gpu_step18.sh OUT_DIR [MxNxK ...]
set -uo pipefail
out=${1:?usage: gpu_step18.sh OUT_DIR [MxNxK ...]}; shift
work=/tmp/step18 shipped=autotune/data/records/nvidia-h200.json
mkdir -p "$out" "$work"
mv "$shipped" "$work/records.json.shipped"
trap 'mv "$work/records.json.shipped" "$shipped"' EXIT
export MMTUNE_CACHE="$work/cache.db"
for shape in "$@"; do
  IFS=x read -r m n k <<<"$shape"
  echo "== $shape"
  time timeout 300 python3 -m autotune tune --m "$m" --n "$n" --k "$k" --trials 40 --jobs 14
done 2>&1 | grep -v Warning | tee -a "$out/tune.txt"
cp "$work"/studies.journal "$out/" 2>/dev/null
python3 -m autotune best --json > "$out/records.json"
if [ "${BENCH:-0}" = 1 ]; then
  shapes=$(IFS=,; echo "$*")
  mkdir -p "$out/new" "$out/shipped"
  timeout 280 python3 -m autotune bench --shapes "$shapes" --out "$out/new" 2>&1 | grep -v Warning | tee "$out/new.txt"
  mv "$work/records.json.shipped" "$shipped"; trap - EXIT
  MMTUNE_CACHE="$work/empty.db" timeout 280 python3 -m autotune bench --shapes "$shapes" --out "$out/shipped" 2>&1 \
    | grep -v Warning | tee "$out/shipped.txt"
fi
