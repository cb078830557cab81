#!/usr/bin/env bash
# Step 28 on a GPU device (the `device` tool), from the repository root:
#   bash studies/gpu_step28.sh OUT sweep SHAPE...  every feasible config of FAMILY (default tf32x3; instructions MMA,
#                                              block tiles BM, BN, BK, stages STAGES, splits SPLITS; defaults the
#                                              family's, 64-256, 16 32, 3 4, 1) at these shapes, next to the
#                                              shipped record and cuBLAS (studies/step27_dmma.py)
#   bash studies/gpu_step28.sh OUT tune SHAPE...   `mmtune tune --dtype DTYPE --trials N` per shape (DTYPE, default
#                                              float32; TRIALS, default 10); the bests exported to tuned.json
#   bash studies/gpu_step28.sh OUT retime      every shipped record re-timed on these kernels (`mmtune warm --retime`)
#   bash studies/gpu_step28.sh OUT tests       the kernel tests and the call path's GPU tests (TESTS selects, as -k)
#   bash studies/gpu_step28.sh OUT SUITE...    `mmtune bench --peers` per suite
# The shared parts are studies/gpu_parts.sh's; results are packed into OUT/step28.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step28 "${1:?usage: gpu_step28.sh OUT sweep SHAPE... | tune SHAPE... | retime | tests | SUITE...}"
shift
shapes() { taken=(); while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do taken+=("$1"); shift; done; }
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    sweep)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step27_dmma.py --family "${FAMILY:-tf32x3}" --out "$out/sweep-${FAMILY:-tf32x3}.json" \
        --store /tmp/store-step28 --shapes "${taken[@]}" ${MMA:+--mma $MMA} --bk ${BK:-16 32} --bm ${BM:-64 128 256} \
        --bn ${BN:-64 128 256} --stages ${STAGES:-3 4} --splits ${SPLITS:-1} --top ${TOP:-8} --seconds $(( left - 20 )) 2>&1 \
        | quiet | tee -a "$out/sweep-${FAMILY:-tf32x3}.txt"
      ;;
    tune) shapes "$@"; shift ${#taken[@]}; part_tune "${taken[@]}" ;;
    retime) part_retime ;;
    tests) part_tests ;;
    *) part_peers "$part" ;;
  esac
done
gpu_finish
