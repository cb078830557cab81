#!/usr/bin/env bash
# Step 19 on a GPU (issues 17 and 18), one device call per part:
#   bash studies/gpu_step19.sh OUT calls   GPU tests of the call path, per-call cost and fresh-process
#                                          time (studies/call_path.py), then `mmtune tune --m 1024
#                                          --n 1024 --k 1024` with the defaults and a fresh cache, timed
#   bash studies/gpu_step19.sh OUT records re-time the shipped records of this GPU model on today's
#                                          code (`mmtune warm --retime`) and export them for
#                                          `mmtune promote`, then the same timed tune
#   bash studies/gpu_step19.sh OUT peers SUITE...
#                                          `mmtune bench --peers` per suite with the cache of the
#                                          records part if present, else an empty one (so configs come
#                                          from the shipped records, served to this GPU by its match)
# Installs the wheels carried in .whl (gpu-wheelhouse.sh) into the image's python3 first.
# Everything is written under /tmp/step19 and packed into OUT/PART.tgz at the end (the device
# tool brings back few files); the kernel store stays out of the pack.
set -uo pipefail
dest=${1:?usage: gpu_step19.sh OUT calls|records|fresh|peers [SUITE...]}; part=${2:?}; shift 2
out=/tmp/step19
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_KERNELS=/tmp/step19-kernels

timed_tune() {  # the README's main command, defaults only, on an empty cache (shipped records stay)
  local dir="$out/tune1024"; rm -rf "$dir"; mkdir -p "$dir"
  local start=$(date +%s.%N)
  MMTUNE_CACHE="$dir/cache.db" timeout 240 python3 -m autotune tune --m 1024 --n 1024 --k 1024 2>&1 \
    | grep -v "Warning\|warn(" | tail -n 6 | tee "$dir/tune.txt"
  echo "wall: $(python3 -c "import time; print(round(time.time() - $start, 1))") s (jobs default: $(python3 -c 'import os; print(len(os.sched_getaffinity(0)))') cores)" | tee -a "$dir/tune.txt"
}

case "$part" in
  calls)
    MMTUNE_CACHE="$out/cache-tests.db" MMTUNE_TEST_GPU=1 timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/test_gpu_calls.py tests/test_measure.py 2>&1 | tail -n 25 | tee "$out/gpu_tests.txt"
    MMTUNE_CACHE="$out/cache-calls.db" timeout 200 python3 studies/call_path.py --out "$out/call_path.json" 2>&1 \
      | grep -v "Warning\|warn(" | tee "$out/call_path.txt"
    timed_tune
    ;;
  records)
    MMTUNE_CACHE="$out/records/cache.db" timeout 300 python3 -m autotune warm --retime --arch sm_90 2>&1 \
      | grep -v "Warning\|warn(" | tee "$out/retime.txt"
    MMTUNE_CACHE="$out/records/cache.db" python3 -m autotune export --out "$out/retimed.json"
    timed_tune
    ;;
  fresh)  # where a fresh process's first call spends its time
    MMTUNE_CACHE="$out/cache-calls.db" timeout 200 python3 studies/call_path.py --calls 200 --out "$out/call_path.json" \
      --profile "$out/fresh_profile.txt" 2>&1 | grep -v "Warning\|warn(" | tee "$out/call_path.txt"
    ;;
  peers)
    for suite in "$@"; do
      mkdir -p "$out/$suite"
      [ -f "$out/records/cache.db" ] && cp "$out/records/cache.db" "$out/$suite/cache.db"
      start=$(date +%s)
      MMTUNE_CACHE="$out/$suite/cache.db" timeout "${SUITE_SECONDS:-420}" python3 -m autotune bench --peers \
        --shapes "$suite" --out "$out/$suite" 2>&1 | grep -v "Warning\|warn(" | tee "$out/$suite.txt"
      echo "$suite: $(( $(date +%s) - start )) s" | tee -a "$out/$suite.txt"
    done
    ;;
esac
tar czf "$dest/$part.tgz" -C "$out" . && ls -la "$dest"
