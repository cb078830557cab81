#!/usr/bin/env bash
# Step 33 on a GPU device (the `device` tool), from the repository root:
#   bash studies/gpu_step33.sh OUT peel SHAPE...   each shape whole and with its last M mod BM rows peeled off
#                                              (studies/step33_peel.py)
#   bash studies/gpu_step33.sh OUT rows SHAPE...   products of a few rows: 16-row tiles against lookup's pick
#                                              (studies/step33_rows.py)
#   bash studies/gpu_step33.sh OUT tune SHAPE...   `mmtune tune --trials N` per shape (TRIALS, default 10)
#   bash studies/gpu_step33.sh OUT retime      every shipped record re-timed on these kernels (`mmtune warm --retime`)
#   bash studies/gpu_step33.sh OUT tests       the kernel tests and the call path's GPU tests (TESTS selects, as -k)
#   bash studies/gpu_step33.sh OUT SUITE...    `mmtune bench --peers` per suite
# The shared parts are studies/gpu_parts.sh's; results are packed into OUT/step33.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step33 "${1:?usage: gpu_step33.sh OUT peel SHAPE... | tune SHAPE... | retime | tests | SUITE...}"
shift
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    peel)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step33_peel.py --out "$out/peel.json" --store /tmp/store-step33 \
        --shapes "${taken[@]}" --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/peel.txt"
      ;;
    rows)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step33_rows.py --out "$out/rows.json" --store /tmp/store-step33 \
        --shapes "${taken[@]}" --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/rows.txt"
      ;;
    *) part_common "$part" "$@"; shift "$used" ;;
  esac
done
gpu_finish
