#!/usr/bin/env bash
# Step 27 on a GPU device (the `device` tool), from the repository root:
#   bash studies/gpu_step27.sh OUT dmma SHAPE...   every feasible `dmma` config (instructions MMA, block tiles BM, BN,
#                                              BK, stages STAGES, splits SPLITS; defaults all, 64-256, 8-32, 3 4, 1)
#                                              at these float64 shapes, next
#                                              to the shipped float64 record and cuBLAS (studies/step27_dmma.py)
#   bash studies/gpu_step27.sh OUT tune SHAPE...   `mmtune tune --dtype DTYPE --trials N` per shape (DTYPE, default
#                                              float32; TRIALS, default 10); the bests exported to tuned.json
#   bash studies/gpu_step27.sh OUT bench64 SHAPE...  `mmtune bench --dtype float64` at these shapes, against cuBLAS's
#                                              DGEMM, with the records tuned before it in this call
#   bash studies/gpu_step27.sh OUT tests       the kernel tests and the call path's GPU tests (TESTS selects, as -k)
#   bash studies/gpu_step27.sh OUT SUITE...    `mmtune bench --peers` per suite
# The shared parts are studies/gpu_parts.sh's; results are packed into OUT/step27.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step27 "${1:?usage: gpu_step27.sh OUT dmma SHAPE... | tune SHAPE... | bench64 SHAPE... | tests | SUITE...}"
shift
shapes() { taken=(); while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do taken+=("$1"); shift; done; }
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    dmma)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step27_dmma.py --out "$out/dmma.json" --store /tmp/store-step27 \
        --shapes "${taken[@]}" --mma ${MMA:-m8n8k4 m16n8k4 m16n8k8 m16n8k16} --bk ${BK:-8 16 32} --bm ${BM:-64 128 256} --bn ${BN:-64 128 256} --stages ${STAGES:-3 4} \
        --splits ${SPLITS:-1} --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/dmma.txt"
      ;;
    tune) shapes "$@"; shift ${#taken[@]}; part_tune "${taken[@]}" ;;
    bench64)
      shapes "$@"; shift ${#taken[@]}
      list=$(IFS=,; echo "${taken[*]}")
      timeout 300 python3 -m autotune bench --dtype float64 --no-seeds --shapes "$list" --out "$out/bench64" 2>&1 \
        | quiet | tee "$out/bench64.txt"
      ;;
    tests) part_tests ;;
    *) part_peers "$part" ;;
  esac
done
gpu_finish
