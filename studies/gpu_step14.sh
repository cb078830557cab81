#!/usr/bin/env bash
# Step 14 of docs/performance.md in one device call: two fragment sets x 16-byte global fetches over
# the leading unrolled vector configs of step 13, at 4096^3, 2048^3 and 1024^3; ncu stall reasons of
# the 256x128 16x8 tile with both (step 13 profiled it with neither); the GPU correctness tests
# (the committed step14/gpu_tests.txt is a later, complete run of the same two files alone).
#   bash studies/gpu_step14.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_step14.sh OUT_DIR}
mkdir -p "$out"
python3 studies/variants.py studies/h200/step14/vector_base.json fragments wide_fetch > /tmp/vector_configs.json
timeout 330 python3 studies/ladder.py --configs /tmp/vector_configs.json \
  --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --out "$out/vector" 2>&1 | tee "$out/vector.txt"
ncu_sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats"
stalls="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__inst_executed_pipe_fma.sum"
config='{"bm": 256, "bn": 128, "bk": 8, "tm": 16, "tn": 8, "pad": 4, "stages": 1, "unroll": true, "fragments": 2, "wide_fetch": true, "min_blocks": 1}'
timeout 60 ncu --clock-control none $ncu_sections $stalls -k 'regex:matmul' --launch-skip 2 --launch-count 1 \
  python3 studies/profile_one.py vector "$config" 4096x4096x4096 > "$out/ncu_vector.txt" 2>&1
tail -n 3 "$out/ncu_vector.txt"
MMTUNE_TEST_GPU=1 timeout 420 python3 -m pytest -q -x tests/test_kernels.py tests/test_runtime.py -p no:cacheprovider 2>&1 \
  | tail -5 | tee "$out/gpu_tests.txt"
