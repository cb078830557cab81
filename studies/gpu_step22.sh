#!/usr/bin/env bash
# Step 22 on a GPU (issue 19), one device call per part:
#   bash studies/gpu_step22.sh OUT unaligned [ARGS]  studies/step22_unaligned.py: unaligned operands through the
#                                                    untested narrow path against the tested path everywhere
#   bash studies/gpu_step22.sh OUT transfer [ARGS]   studies/step22_transfer.py: every shipped config and lookup's
#                                                    pick on validation shapes nobody tuned, against cuBLAS
#   bash studies/gpu_step22.sh OUT tune|peers ...    step 20's parts on today's code (studies/gpu_step20.sh)
# Installs the wheels carried in .whl (gpu-wheelhouse.sh) into the image's python3 first; results are
# packed into OUT/PART.tgz.
set -uo pipefail
dest=${1:?usage: gpu_step22.sh OUT unaligned|transfer|tune|peers [ARGS...]}; part=${2:?}; shift 2
case "$part" in
  tune|peers|tests|loo) exec bash studies/gpu_step20.sh "$dest" "$part" "$@" ;;
esac
out=/tmp/step22
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_KERNELS=/tmp/step22-kernels
quiet() { grep -v "Warning\|warn(" ; }

case "$part" in
  unaligned)
    MMTUNE_CACHE="$out/cache-unaligned.db" timeout "${PART_SECONDS:-450}" python3 studies/step22_unaligned.py \
      --out "$out/unaligned.json" "$@" 2>&1 | quiet | tee "$out/unaligned.txt"
    ;;
  transfer)
    MMTUNE_CACHE="$out/cache-transfer.db" timeout "${PART_SECONDS:-540}" python3 studies/step22_transfer.py \
      --out "$out/transfer.json" --rows "$out/rows.json" "$@" 2>&1 | quiet | tee "$out/transfer.txt"
    ;;
esac
tar czf "$dest/$part.tgz" --exclude='*-kernels' -C "$out" . && ls -la "$dest"
