#!/usr/bin/env bash
# Step 13 of docs/performance.md in one device call: unrolled k-steps x two blocks per SM over the
# top vector and splitk configs, then ncu on the 256x128 8x8 tile rolled and unrolled, the unrolled
# 16x8 tile (with stall reasons) and cuBLAS.
#   bash studies/gpu_step13.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_step13.sh OUT_DIR}
mkdir -p "$out"
python3 studies/variants.py studies/h200/step13/vector_base.json unroll min_blocks > /tmp/vector_configs.json
python3 studies/variants.py studies/h200/step13/splitk_base.json unroll min_blocks > /tmp/splitk_configs.json
timeout 380 python3 studies/ladder.py --configs /tmp/vector_configs.json \
  --shapes 4096x4096x4096,1024x1024x1024 --out "$out/vector" 2>&1 | tee "$out/vector.txt"
timeout 80 python3 studies/ladder.py --configs /tmp/splitk_configs.json \
  --shapes 1024x1024x1024 --out "$out/splitk" 2>&1 | tee "$out/splitk.txt"
ncu_sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats"
stalls="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__inst_executed_pipe_fma.sum"
for unroll in false true; do
  config="{\"bm\": 256, \"bn\": 128, \"bk\": 8, \"tm\": 8, \"tn\": 8, \"pad\": 4, \"stages\": 1, \"unroll\": $unroll, \"min_blocks\": 1}"
  name=$([ $unroll = true ] && echo unrolled || echo rolled)
  timeout 50 ncu --clock-control none $ncu_sections -k 'regex:matmul' --launch-skip 2 --launch-count 1 \
    python3 studies/profile_one.py vector "$config" 4096x4096x4096 > "$out/ncu_256x128_8x8_$name.txt" 2>&1
done
config='{"bm": 256, "bn": 128, "bk": 8, "tm": 16, "tn": 8, "pad": 4, "stages": 1, "unroll": true, "min_blocks": 1}'
timeout 50 ncu --clock-control none $ncu_sections $stalls -k 'regex:matmul' --launch-skip 2 --launch-count 1 \
  python3 studies/profile_one.py vector "$config" 4096x4096x4096 > "$out/ncu_vector.txt" 2>&1
timeout 50 ncu --clock-control none $ncu_sections $stalls -k 'regex:gemm' --launch-skip 1 --launch-count 1 \
  python3 studies/profile_one.py vector "$config" 4096x4096x4096 > "$out/ncu_cublas.txt" 2>&1
for f in "$out"/ncu_*.txt; do tail -n 3 "$f"; done
