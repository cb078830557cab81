#!/usr/bin/env bash
# Step 15 of docs/performance.md in one device call: tiles copied by cp.async (async_copy) with
# 2 to 4 shared stages against the register path with 1 or 2, over eight leading vector tiles, at
# 4096^3, 2048^3 and 1024^3; then ncu stall reasons of the fastest asynchronous config at 4096^3,
# and the GPU correctness tests of the two families (the committed step15/gpu_tests.txt is a later
# run of all of tests/test_kernels.py; step15/first/ holds this script's run before the unchecked
# copy loop).
#   bash studies/gpu_step15.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_step15.sh OUT_DIR}
mkdir -p "$out"
python3 studies/variants.py studies/h200/step15/vector_base.json async_copy stages > /tmp/vector_configs.json
timeout 420 python3 studies/ladder.py --configs /tmp/vector_configs.json \
  --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --out "$out/vector" 2>&1 | tee "$out/vector.txt"
config=$(python3 -c "
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))['rows'] if r['m'] == 4096 and r['config']['async_copy'] and 'gflops' in r]
print(json.dumps(max(rows, key=lambda r: r['gflops'])['config']))" "$out/vector/ladder.json")
echo "profiling $config"
ncu_sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats"
stalls="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__inst_executed_pipe_fma.sum"
timeout 90 ncu --clock-control none $ncu_sections $stalls -k 'regex:matmul' --launch-skip 2 --launch-count 1 \
  python3 studies/profile_one.py vector "$config" 4096x4096x4096 > "$out/ncu_vector.txt" 2>&1
tail -n 3 "$out/ncu_vector.txt"
MMTUNE_TEST_GPU=1 timeout 300 python3 -m pytest -q -x tests/test_kernels.py -k "vector or splitk" -p no:cacheprovider 2>&1 \
  | tail -5 | tee "$out/gpu_tests.txt"
