#!/usr/bin/env bash
# Step 32 on a GPU device (the `device` tool), from the repository root:
#   bash studies/gpu_step32.sh OUT adds SHAPE...   split-K and stream-K at shapes with unaligned C, adding
#                                              by groups and by columns (studies/step32_adds.py)
#   bash studies/gpu_step32.sh OUT table I/N   part I of N of the measured table's adding candidates at its
#                                              shapes with unaligned C (studies/step32_table.py)
#   bash studies/gpu_step32.sh OUT tune SHAPE...   `mmtune tune --trials N` per shape (TRIALS, default 10)
#   bash studies/gpu_step32.sh OUT retime      every shipped record re-timed on these kernels (`mmtune warm --retime`)
#   bash studies/gpu_step32.sh OUT tests       the kernel tests and the call path's GPU tests (TESTS selects, as -k)
#   bash studies/gpu_step32.sh OUT SUITE...    `mmtune bench --peers` per suite
# The shared parts are studies/gpu_parts.sh's; results are packed into OUT/step32.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step32 "${1:?usage: gpu_step32.sh OUT adds SHAPE... | table I/N | tune SHAPE... | retime | tests | SUITE...}"
shift
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    adds)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step32_adds.py --out "$out/adds.json" --store /tmp/store-step32 \
        --shapes "${taken[@]}" --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/adds.txt"
      ;;
    table) part_slice studies/step32_table.py "${1:?table needs I/N}"; shift ;;
    *) part_common "$part" "$@"; shift "$used" ;;
  esac
done
gpu_finish
