#!/usr/bin/env bash
# Step 25 on a GPU (issue 19), one device call:
#   bash studies/gpu_step25.sh OUT ab          the write-back against the step-24 kernels (`head`, carried in
#                                              .old/, made by `git archive b5e7450 kernels | tar -x -C .old`):
#                                              every shipped record's config at its shape, and every candidate at
#                                              six probe shapes for the variants named in PROBED. Step 25 ran it on
#                                              its experimental tree, where WB_SCALAR=1 (`scalar`) and
#                                              WB_REDS_ONLY=1 (`reds`) switched parts of the change off (see
#                                              docs/performance.md, step 25); the committed kernels have no
#                                              switches, so there every variant but `head` runs the kept code
#   bash studies/gpu_step25.sh OUT table I/N   part I of N of the training table (studies/step24_table.py):
#                                              seeded shapes of seeds 2222 4444 5555 6666 7777 and 24 skinny
#                                              shapes of seed 7, none of the bench's suites; the kernel store
#                                              in /tmp/store25 is kept for the next part while the machine is warm
#   bash studies/gpu_step25.sh OUT tune SHAPE... `mmtune tune --trials 10` per shape, which tries the shape rule's
#                                              guesses, the measured table's 4 best candidates and the shipped
#                                              record first; the bests exported to OUT/.../tuned.json for
#                                              `mmtune promote`
#   bash studies/gpu_step25.sh OUT retime      the shipped records made stale by today's code re-timed
#                                              (`mmtune warm --retime`), exported to OUT/.../retimed.json
#   bash studies/gpu_step25.sh OUT peers SUITE...  `mmtune bench --peers` per suite
#   bash studies/gpu_step25.sh OUT tests       the kernel tests and the call path's GPU tests on the GPU (those
#                                              TESTS selects, as pytest -k)
# Installs the wheels carried in .whl (gpu-wheelhouse.sh) into the image's python3 first; results are
# packed into OUT/step25.tgz.
set -uo pipefail
dest=${1:?usage: gpu_step25.sh OUT table I/N | peers SUITE...}; shift
out=/tmp/step25
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_CACHE="$out/cache.db"
quiet() { grep -v "Warning\|warn(\|choice = lookup" ; }
# the environment of an A/B variant (see `ab` above)
variant_env() {
  case "$1" in
    head) env=(PYTHONPATH=.old) ;;
    scalar) env=(WB_SCALAR=1) ;;
    reds) env=(WB_REDS_ONLY=1) ;;
    *) env=() ;;
  esac
}
probes="1000x1000x1000 1500x1500x1500 2500x800x600 600x700x6000 40x3000x6000 5000x7000x80"
while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    table)
      slice=${1:?table needs I/N}; shift
      name=table-${slice/\//of}
      left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step24_table.py --out "$out/$name.json" --store /tmp/store25 \
        --seeds 2222 4444 5555 6666 7777 --count 20 --skinny 7 --skinny-count 24 --part "$slice" \
        --seconds $(( left - 15 )) 2>&1 | quiet | tee "$out/$name.txt"
      ;;
    tune)
      while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do
        IFS=x read -r m n k <<< "$1"; shift
        timeout 50 python3 -m autotune tune --m "$m" --n "$n" --k "$k" --trials 10 --timeout 30 2>&1 | quiet \
          | tail -n 2 | tee -a "$out/tune.txt"
      done
      python3 -m autotune export --out "$out/tuned.json"
      python3 -m autotune best 2>&1 | quiet > "$out/best.txt"
      ;;
    ab)
      for variant in ${WRITE_BACKS:-head scalar reds wide}; do
        variant_env "$variant"
        echo "== $variant records" | tee -a "$out/ab.txt"
        env "${env[@]}" timeout 150 python3 studies/step23_table.py --out "$out/ab-$variant-records.json" \
          --label "$variant" --store "/tmp/store-$variant" --records 2>&1 | quiet | tee -a "$out/ab.txt"
      done
      for variant in ${PROBED:-}; do
        variant_env "$variant"
        echo "== $variant probes" | tee -a "$out/ab.txt"
        env "${env[@]}" timeout 100 python3 studies/step24_table.py --out "$out/ab-$variant-probes.json" \
          --store "/tmp/store-$variant" --shapes $probes --seconds 80 2>&1 | quiet | tee -a "$out/ab.txt"
      done
      ;;
    retime)
      timeout 300 python3 -m autotune warm --retime --arch sm_90 2>&1 | quiet | tee "$out/retime.txt"
      python3 -m autotune export --out "$out/retimed.json"
      ;;
    tests)
      MMTUNE_CACHE="$out/cache-tests.db" MMTUNE_TEST_GPU=1 timeout 450 python3 -m pytest -q -p no:cacheprovider \
        tests/test_kernels.py tests/test_gpu_calls.py -k "${TESTS:-}" 2>&1 | tail -n 30 | tee -a "$out/gpu_tests.txt"
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
tar czf "$dest/step25.tgz" -C "$out" . && ls -la "$dest"
