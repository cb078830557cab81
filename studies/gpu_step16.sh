#!/usr/bin/env bash
# Step 16 of docs/performance.md: the exhaustive float32 `vector` sweep at 4096^3
# (studies/exhaustive.py, resumed from studies/h200/exhaustive4096/rows.jsonl.xz, one worker process
# per spare CPU core) for SWEEP_SECONDS; on a 4-GPU host GPU 3 meanwhile runs `mmtune bench
# --shapes standard` twice, each in a fresh process (BENCH=0: no bench, every GPU sweeps). The
# sweep's rows stay in /tmp/sweep between calls on a machine still held, and are copied to OUT_DIR.
#   bash studies/gpu_step16.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_step16.sh OUT_DIR}
sweep=/tmp/sweep
mkdir -p "$out" "$sweep"
[ -s "$sweep/rows.jsonl" ] || xz -dc studies/h200/exhaustive4096/rows.jsonl.xz > "$sweep/rows.jsonl" 2>/dev/null
gpus=$(nvidia-smi -L | wc -l); [ "${BENCH:-1}" = 1 ] && gpus=3
python3 studies/exhaustive.py --family vector --shape 4096x4096x4096 --gpus $gpus --workers $((($(nproc) - 2) / gpus)) \
  --seconds "${SWEEP_SECONDS:-520}" --out "$sweep" > "$out/sweep.log" 2>&1 &
if [ "${BENCH:-1}" = 1 ]; then
  for run in bench bench_rerun; do
    mkdir -p "$out/$run"
    CUDA_VISIBLE_DEVICES=3 MMTUNE_CACHE="$out/$run/cache.db" timeout 280 python3 -m autotune bench --shapes standard \
      --out "$out/$run" 2>&1 | grep -v Warning | tee "$out/$run.txt"
  done
fi
wait
cp "$sweep"/rows.jsonl "$sweep"/exhaustive.json "$out/" 2>/dev/null
tail -n 30 "$out/sweep.log"
