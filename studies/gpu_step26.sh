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
# Installs the wheels carried in .whl (gpu-wheelhouse.sh) into the image's python3 first; results are
# packed into OUT/step26.tgz.
set -uo pipefail
dest=${1:?usage: gpu_step26.sh OUT table I/N | peers SUITE...}; shift
out=/tmp/step26
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_CACHE="$out/cache.db"
quiet() { grep -v "Warning\|warn(\|choice = lookup" ; }
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    table)
      slice=${1:?table needs I/N}; shift
      name=table-${slice/\//of}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step24_table.py --out "$out/$name.json" --store /tmp/store26 \
        --seeds 2222 4444 5555 6666 7777 --count 20 --skinny 7 --skinny-count 24 --part "$slice" \
        --seconds $(( left - 15 )) 2>&1 | quiet | tee "$out/$name.txt"
      ;;
    probe)
      shapes=()
      while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do shapes+=("$1"); shift; done
      timeout 400 python3 studies/step24_table.py --out "$out/probe.json" --store /tmp/store26 --shapes "${shapes[@]}" \
        2>&1 | quiet | tee "$out/probe.txt"
      ;;
    tune)
      while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do
        IFS=x read -r m n k <<< "$1"; shift
        timeout $(( ${TRIALS:-10} * 4 + 20 )) python3 -m autotune tune --m "$m" --n "$n" --k "$k" --trials "${TRIALS:-10}" --timeout 30 2>&1 | quiet \
          | tail -n 2 | tee -a "$out/tune.txt"
      done
      python3 -m autotune export --out "$out/tuned.json"
      python3 -m autotune best 2>&1 | quiet > "$out/best.txt"
      ;;
    retime)
      timeout 300 python3 -m autotune warm --retime --arch sm_90 2>&1 | quiet | tee "$out/retime.txt"
      python3 -m autotune export --out "$out/retimed.json"
      ;;
    tests)
      MMTUNE_CACHE="$out/cache-tests.db" MMTUNE_TEST_GPU=1 timeout 450 python3 -m pytest -q -p no:cacheprovider \
        tests/test_kernels.py tests/test_gpu_calls.py -k "${TESTS:-}" 2>&1 | tail -n 30 | tee -a "$out/gpu_tests.txt"
      ;;
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
    *)
      mkdir -p "$out/$part"
      t0=$(date +%s)
      timeout "${SUITE_SECONDS:-300}" python3 -m autotune bench --peers --shapes "$part" --out "$out/$part" 2>&1 | quiet \
        | tee "$out/$part.txt"
      echo "$part: $(( $(date +%s) - t0 )) s" | tee -a "$out/$part.txt"
      ;;
  esac
done
tar czf "$dest/step26.tgz" -C "$out" . && ls -la "$dest"
