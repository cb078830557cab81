#!/usr/bin/env bash
# Step 31 on a GPU device (the `device` tool), from the repository root:
#   bash studies/gpu_step31.sh OUT pitch SHAPE...  odd shapes next to their aligned twins and the padding copies
#                                              (studies/step31_pitch.py)
#   bash studies/gpu_step31.sh OUT table I/N   part I of N of the measured table's changed candidates at its
#                                              unaligned shapes (studies/step31_table.py)
#   bash studies/gpu_step31.sh OUT tune SHAPE...   `mmtune tune --trials N` per shape (TRIALS, default 10)
#   bash studies/gpu_step31.sh OUT retime      every shipped record re-timed on these kernels (`mmtune warm --retime`)
#   bash studies/gpu_step31.sh OUT tests       the kernel tests and the call path's GPU tests (TESTS selects, as -k)
#   bash studies/gpu_step31.sh OUT SUITE...    `mmtune bench --peers` per suite
# The shared parts are studies/gpu_parts.sh's; results are packed into OUT/step31.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step31 "${1:?usage: gpu_step31.sh OUT pitch SHAPE... | table I/N | tune SHAPE... | retime | tests | SUITE...}"
shift
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    pitch)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step31_pitch.py --out "$out/pitch.json" --store /tmp/store-step31 \
        --shapes "${taken[@]}" --seconds $(( left - 40 )) 2>&1 | quiet | tee -a "$out/pitch.txt"
      ;;
    table) part_slice studies/step31_table.py "${1:?table needs I/N}"; shift ;;
    *) part_common "$part" "$@"; shift "$used" ;;
  esac
done
gpu_finish
