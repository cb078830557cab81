#!/usr/bin/env bash
# Step 34 on a GPU device (the `device` tool), from the repository root:
#   bash studies/gpu_step34.sh OUT smallk SHAPE...  products with a short K: vector tiles against lookup's pick
#                                               (studies/step34_smallk.py)
#   bash studies/gpu_step34.sh OUT gemv SHAPE...    products of a few rows: the gemv family against lookup's pick,
#                                               B's rows and B's columns in memory (studies/step34_gemv.py)
#   bash studies/gpu_step34.sh OUT tune SHAPE... | retime | tests | SUITE...   as studies/gpu_parts.sh says
# Results are packed into OUT/step34.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step34 "${1:?usage: gpu_step34.sh OUT smallk SHAPE... | gemv SHAPE... | tune SHAPE... | retime | tests | SUITE...}"
shift
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    smallk)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step34_smallk.py --out "$out/smallk.json" --store /tmp/store-step34 \
        --shapes "${taken[@]}" --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/smallk.txt"
      ;;
    gemv)
      shapes "$@"; shift ${#taken[@]}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step34_gemv.py --out "$out/gemv.json" --store /tmp/store-step34 \
        --shapes "${taken[@]}" --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/gemv.txt"
      ;;
    *) part_common "$part" "$@"; shift "$used" ;;
  esac
done
gpu_finish
