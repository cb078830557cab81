#!/usr/bin/env bash
# Issue 18 item 5 and issue 19: `mmtune bench --peers` (mmtune's matmul, torch.matmul, the Triton
# FP32 peer and CuPy, on torch tensors in one process) over each suite given (default: wide, then
# seeded), each in a fresh process with an empty cache, so every mmtune config comes from the
# shipped records. Installs nothing: torch, Triton and CuPy as the image has them (a missing one
# is reported absent). Triton autotunes its 12 configs at every new shape; its compile cache
# (~/.triton) stays between calls on a machine still held. One suite per device call keeps each
# under the 10-minute limit.
#   TESTS=1 runs the GPU-only tests of the timing and the peers first;
#   BENCH=1 also runs the plain `mmtune bench --shapes standard` (cuBLAS now on device time).
#   bash studies/gpu_peers.sh OUT_DIR [SUITE ...]
set -uo pipefail
out=${1:?usage: gpu_peers.sh OUT_DIR [SUITE ...]}; shift
[ $# -gt 0 ] || set -- wide seeded
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)" 2>&1 | tail -n 1
if [ "${TESTS:-0}" = 1 ]; then
  MMTUNE_TEST_GPU=1 timeout 300 python3 -m pytest -q tests/test_measure.py tests/test_peers.py 2>&1 | tail -n 15 | tee "$out/tests.txt"
fi
if [ "${BENCH:-0}" = 1 ]; then
  mkdir -p "$out/bench"
  MMTUNE_CACHE="$out/bench/cache.db" timeout 300 python3 -m autotune bench --shapes standard --out "$out/bench" 2>&1 \
    | grep -v Warning | tee "$out/bench.txt"
fi
for suite in "$@"; do
  mkdir -p "$out/$suite"
  start=$(date +%s)
  MMTUNE_CACHE="$out/$suite/cache.db" timeout "${SUITE_SECONDS:-560}" python3 -m autotune bench --peers --shapes "$suite" \
    --out "$out/$suite" 2>&1 | grep -v Warning | tee "$out/$suite.txt"
  echo "$suite: $(( $(date +%s) - start )) s" | tee -a "$out/$suite.txt"
done
