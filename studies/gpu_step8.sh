#!/usr/bin/env bash
# Step 8 of docs/performance.md in one device call: the top vector configs with 32-bit tile
# fetches, a sample of split-K configs, the seed's tables (mmtune sweep) and the kernel tests.
#   bash studies/gpu_step8.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_step8.sh OUT_DIR}
mkdir -p "$out"
timeout 150 python3 studies/ladder.py --configs studies/h200/vector_top12.json \
  --shapes 4096x4096x4096,1024x1024x1024 --out "$out/fetch" 2>&1 | tee "$out/fetch.txt"
timeout 220 python3 studies/ladder.py --family splitk --sample 40 --top 6 \
  --shapes 1024x1024x1024,16384x64x16384,256x8192x8192,8192x8192x256,2048x2048x2048 \
  --out "$out/splitk" 2>&1 | tee "$out/splitk.txt"
timeout 130 python3 -m autotune sweep --out "$out/sweep" 2>&1 | tee "$out/sweep.txt"
MMTUNE_TEST_GPU=1 timeout 60 python3 -m pytest -q -x tests/test_kernels.py -p no:cacheprovider 2>&1 | tail -5 | tee "$out/gpu_tests.txt"
