#!/usr/bin/env bash
# Step 30 on a GPU device (the `device` tool), from the repository root:
#   bash studies/gpu_step30.sh OUT streamk SHAPE...  stream-K configs (kernels.streamk) of the record's, lookup's and
#                                              the measured table's TILES best tiles (default 4) with 1-4 workers
#                                              per SM, next to the record, lookup's pick and cuBLAS
#                                              (studies/step30_streamk.py)
#   bash studies/gpu_step30.sh OUT table I/N   part I of N of the measured table's stream-K candidates
#                                              (studies/step30_table.py)
#   bash studies/gpu_step30.sh OUT tune SHAPE...   `mmtune tune --trials N` per shape (TRIALS, default 10)
#   bash studies/gpu_step30.sh OUT retime      every shipped record re-timed on these kernels (`mmtune warm --retime`)
#   bash studies/gpu_step30.sh OUT tests       the kernel tests and the call path's GPU tests (TESTS selects, as -k)
#   bash studies/gpu_step30.sh OUT SUITE...    `mmtune bench --peers` per suite
# The shared parts are studies/gpu_parts.sh's; results are packed into OUT/step30.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step30 "${1:?usage: gpu_step30.sh OUT streamk SHAPE... | tune SHAPE... | retime | tests | SUITE...}"
shift
shapes() { taken=(); while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do taken+=("$1"); shift; done; }
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    streamk)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step30_streamk.py --out "$out/streamk.json" --store /tmp/store-step30 \
        --shapes "${taken[@]}" --tiles "${TILES:-4}" --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/streamk.txt"
      ;;
    table)
      slice=${1:?table needs I/N}; shift
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step30_table.py --out "$out/table-${slice/\//of}.json" --store /tmp/store-step30 \
        --part "$slice" --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/table-${slice/\//of}.txt"
      ;;
    tune) shapes "$@"; shift ${#taken[@]}; part_tune "${taken[@]}" ;;
    retime) part_retime ;;
    tests) part_tests ;;
    *) part_peers "$part" ;;
  esac
done
gpu_finish
