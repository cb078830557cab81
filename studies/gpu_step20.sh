#!/usr/bin/env bash
# Step 20 on a GPU (issue 19, and issue 18's 64-bit offsets), one device call per part:
#   bash studies/gpu_step20.sh OUT tests         GPU tests: the call path (layouts, tall and wide grids,
#                                                > 2**32 elements, deterministic mode) and the kernels
#                                                in every layout and in dynamic shared memory
#   bash studies/gpu_step20.sh OUT tune SHAPE... `mmtune tune` per shape (MxNxK or a suite's name), TRIALS
#                                                trials each (default 32) of DTYPE (default float32), no
#                                                new tune after DEADLINE seconds (default 480); with RETIME=1
#                                                the stale shipped rows re-timed too; rows exported to
#                                                OUT/tuned.json for `mmtune promote`
#   bash studies/gpu_step20.sh OUT paths [ARGS]  studies/step20_paths.py: layouts, deterministic mode, big grids
#   bash studies/gpu_step20.sh OUT loo           studies/loo.py: the cost model's leave-one-out accuracy
#   bash studies/gpu_step20.sh OUT peers SUITE...  `mmtune bench --peers` per suite, configs from the
#                                                shipped records (exact rows, or the model for the rest)
# Installs the wheels carried in .whl (gpu-wheelhouse.sh) into the image's python3 first. Everything
# is written under /tmp/step20 and packed into OUT/PART.tgz (the device tool brings back few files).
set -uo pipefail
dest=${1:?usage: gpu_step20.sh OUT tests|tune|paths|loo|peers [ARGS...]}; part=${2:?}; shift 2
out=/tmp/step20
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_KERNELS=/tmp/step20-kernels
quiet() { grep -v "Warning\|warn(" ; }

case "$part" in
  tests)
    MMTUNE_CACHE="$out/cache-tests.db" MMTUNE_TEST_GPU=1 timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/test_gpu_calls.py 2>&1 | tail -n 30 | tee "$out/gpu_tests.txt"
    MMTUNE_CACHE="$out/cache-tests.db" MMTUNE_TEST_GPU=1 timeout 240 python3 -m pytest -q -p no:cacheprovider \
      tests/test_kernels.py -k "transposed or dynamic_shared" 2>&1 | tail -n 30 | tee "$out/kernel_tests.txt"
    ;;
  tune)
    start=$(date +%s)
    MMTUNE_TEST_GPU=1 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py -k dynamic_shared 2>&1 \
      | tail -n 3 | tee "$out/dynamic_check.txt"
    shapes=$(python3 -c "
import sys
from autotune.records import suites
found = suites()
print(' '.join(s for a in sys.argv[1:] for s in (found[a] if a in found else [a])))" "$@")
    for shape in $shapes; do
      if (( $(date +%s) - start > ${DEADLINE:-480} )); then echo "deadline: $shape not tuned" | tee -a "$out/tune.txt"; continue; fi
      IFS=x read -r m n k <<< "$shape"
      t0=$(date +%s)
      MMTUNE_CACHE="$out/cache.db" timeout 150 python3 -m autotune tune --m "$m" --n "$n" --k "$k" \
        --trials "${TRIALS:-32}" --dtype "${DTYPE:-float32}" 2>&1 | quiet | tail -n 2 | tee -a "$out/tune.txt"
      echo "$shape: $(( $(date +%s) - t0 )) s" | tee -a "$out/tune.txt"
    done
    if [ -n "${RETIME:-}" ]; then  # the shipped rows measured on older kernel code, re-timed on today's
      MMTUNE_CACHE="$out/cache.db" timeout "${RETIME_SECONDS:-200}" python3 -m autotune warm --retime --arch sm_90 2>&1 | quiet | tee "$out/retime.txt"
    fi
    MMTUNE_CACHE="$out/cache.db" python3 -m autotune export --out "$out/tuned.json"
    MMTUNE_CACHE="$out/cache.db" python3 -m autotune best 2>&1 | quiet > "$out/best.txt"
    ;;
  paths)
    MMTUNE_CACHE="$out/cache-paths.db" timeout 420 python3 studies/step20_paths.py --out "$out/paths.json" "$@" 2>&1 \
      | quiet | tee "$out/paths.txt"
    ;;
  loo)
    MMTUNE_CACHE="$out/cache-loo.db" timeout "${LOO_SECONDS:-300}" python3 studies/loo.py --out "$out/loo.json" 2>&1 | quiet | tee "$out/loo.txt"
    ;;
  peers)
    for suite in "$@"; do
      mkdir -p "$out/$suite"
      [ -f "$out/cache.db" ] && cp "$out/cache.db" "$out/$suite/cache.db"  # the tune part's rows, if any
      start=$(date +%s)
      MMTUNE_CACHE="$out/$suite/cache.db" timeout "${SUITE_SECONDS:-300}" python3 -m autotune bench --peers \
        --shapes "$suite" --out "$out/$suite" 2>&1 | quiet | tee "$out/$suite.txt"
      echo "$suite: $(( $(date +%s) - start )) s" | tee -a "$out/$suite.txt"
    done
    ;;
esac
tar czf "$dest/$part.tgz" --exclude='*-kernels' -C "$out" . && ls -la "$dest"
