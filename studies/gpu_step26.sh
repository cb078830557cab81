#!/usr/bin/env bash
# Step 26 on a GPU (issue 19), one device call:
#   bash studies/gpu_step26.sh OUT table I/N   part I of N of the training table (studies/step24_table.py) on
#                                              step 25's shapes (seeded shapes of seeds 2222 4444 5555 6666
#                                              7777, 24 skinny shapes of seed 7), so that each candidate's speed
#                                              there compares with step 25's table (studies/step26_compare.py);
#                                              step 26 ran it, and `probe`, on a tree with
#                                              studies/h200/step26/skewed-reads.patch applied
#   bash studies/gpu_step26.sh OUT probe SHAPE... every candidate of the table at these shapes alone
#   bash studies/gpu_step26.sh OUT tune SHAPE... `mmtune tune --trials N` per shape (TRIALS, default 10), which
#                                              tries the shape rule's guesses, the measured table's 4 best
#                                              candidates and the shipped record first; the bests exported to
#                                              OUT/.../tuned.json for `mmtune promote`
#   bash studies/gpu_step26.sh OUT retime      the shipped records made stale by today's code re-timed
#                                              (`mmtune warm --retime`), exported to OUT/.../retimed.json
#   bash studies/gpu_step26.sh OUT peers SUITE...  `mmtune bench --peers` per suite
#   bash studies/gpu_step26.sh OUT wheel       the wheel built from the checkout, installed (not editable) in place
#                                              of the editable install, then studies/call_path.py run from /tmp
#                                              (outside the checkout) on an empty kernel store
#   bash studies/gpu_step26.sh OUT tests       the kernel tests and the call path's GPU tests on the GPU (those
#                                              TESTS selects, as pytest -k)
# The shared parts are studies/gpu_parts.sh's; results are packed into OUT/step26.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_parts.sh"
gpu_start step26 "${1:?usage: gpu_step26.sh OUT table I/N | probe SHAPE... | tune SHAPE... | retime | wheel | tests | SUITE...}"
shift
shapes() { taken=(); while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do taken+=("$1"); shift; done; }
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    table) part_table "${1:?table needs I/N}"; shift ;;
    probe)
      shapes "$@"; shift ${#taken[@]}
      timeout 400 python3 studies/step24_table.py --out "$out/probe.json" --store /tmp/store-step26 --shapes "${taken[@]}" \
        2>&1 | quiet | tee "$out/probe.txt"
      ;;
    tune) shapes "$@"; shift ${#taken[@]}; part_tune "${taken[@]}" ;;
    retime) part_retime ;;
    tests) part_tests ;;
    wheel)
      repo=$(pwd)
      rm -rf /tmp/wheel && python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/wheel . 2>&1 | tail -n 3
      python3 -m pip install -q --no-index --find-links .whl --force-reinstall --no-deps /tmp/wheel/mmtune-*.whl 2>&1 \
        | grep -v "^WARNING" | tail -n 3
      (cd /tmp && python3 -c "import autotune, kernels; print('installed at', autotune.__file__, kernels.__file__)" \
        && MMTUNE_KERNELS=/tmp/wheel-store timeout 300 python3 "$repo/studies/call_path.py" --out "$out/wheel-call-path.json" \
        --calls 1000) 2>&1 | quiet | tee "$out/wheel.txt"
      ;;
    peers) ;;
    *) part_peers "$part" ;;
  esac
done
gpu_finish
