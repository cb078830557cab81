#!/usr/bin/env bash
# Step 21 on a GPU (issue 19), one device call per part:
#   bash studies/gpu_step21.sh OUT route [SHAPE]    studies/step21_route.py: registers of cuda.jit's build, the
#                                                   PTX-linked cubin and the LTO-linked one
#   bash studies/gpu_step21.sh OUT timing [SHAPES]  studies/step21_timing.py: one config timed by the tuner's
#                                                   protocol, Numba's launcher, the store's cubin and matmul
#   bash studies/gpu_step21.sh OUT order [ARGS]     studies/step21_order.py: the tile order's group height
#                                                   against the shipped configs of large and mid shapes
#   bash studies/gpu_step21.sh OUT peers SUITE...   `mmtune bench --peers` per suite, configs from the shipped
#                                                   records (exact rows, or the model for the rest)
# Installs the wheels carried in .whl (gpu-wheelhouse.sh) into the image's python3 first; results are
# packed into OUT/PART.tgz.
set -uo pipefail
dest=${1:?usage: gpu_step21.sh OUT route|timing|order|peers [ARGS...]}; part=${2:?}; shift 2
out=/tmp/step21
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_KERNELS=/tmp/step21-kernels
quiet() { grep -v "Warning\|warn(" ; }

case "$part" in
  route)
    python3 studies/step21_route.py "$@" 2>&1 | quiet | tee "$out/route.txt"
    ;;
  timing)
    MMTUNE_CACHE="$out/cache-timing.db" timeout 400 python3 studies/step21_timing.py --out "$out/timing.json" "$@" 2>&1 \
      | quiet | tee "$out/timing.txt"
    ;;
  order)
    MMTUNE_CACHE="$out/cache-order.db" timeout 400 python3 studies/step21_order.py --out "$out/order.json" "$@" 2>&1 \
      | quiet | tee "$out/order.txt"
    ;;
  peers)  # step 20's part, on today's code
    exec bash studies/gpu_step20.sh "$dest" peers "$@"
    ;;
esac
tar czf "$dest/$part.tgz" --exclude='*-kernels' -C "$out" . && ls -la "$dest"
