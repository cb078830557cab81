#!/usr/bin/env bash
# Step 23 on a GPU (issue 19), one device call:
#   bash studies/gpu_step23.sh OUT ab      the C write-back A/B: step 22's kernels (carried in .old/, made by
#                                          `git archive 11307c3 kernels | tar -x -C .old`), the scalar
#                                          write-back and 16-byte stores (MMTUNE_C_STORE=wide), each on every
#                                          shipped record's config and on four small-K probe shapes
#   bash studies/gpu_step23.sh OUT table   the training table: every candidate on 40 shapes of the seeded
#                                          generator (seeds 2222 3333 4444, none of the bench's suites)
#   bash studies/gpu_step23.sh OUT retime  the shipped records re-timed on today's kernels (`mmtune warm --retime`),
#                                          exported to OUT/.../tuned.json for `mmtune promote`
#   bash studies/gpu_step23.sh OUT peers SUITE...  `mmtune bench --peers` per suite, with the re-timed rows
#   parts run in the order given: `bash studies/gpu_step23.sh OUT retime peers wide`
# Installs the wheels carried in .whl (gpu-wheelhouse.sh) into the image's python3 first; results are
# packed into OUT/step23.tgz.
set -uo pipefail
dest=${1:?usage: gpu_step23.sh OUT ab|table...}; shift
out=/tmp/step23
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_CACHE="$out/cache.db"
quiet() { grep -v "Warning\|warn(\|choice = lookup" ; }
probes="4000x3000x48 2500x6016x96 7000x900x24 1504x1504x200"
for part in "$@"; do
  case "$part" in
    retime)
      timeout 300 python3 -m autotune warm --retime --arch sm_90 2>&1 | quiet | tee "$out/retime.txt"
      python3 -m autotune export --out "$out/tuned.json"
      python3 -m autotune best 2>&1 | quiet > "$out/best.txt"
      ;;
    peers) ;;
    wide|seeded|standard|coverage)
      mkdir -p "$out/$part"
      t0=$(date +%s)
      timeout "${SUITE_SECONDS:-300}" python3 -m autotune bench --peers --shapes "$part" --out "$out/$part" 2>&1 | quiet \
        | tee "$out/$part.txt"
      echo "$part: $(( $(date +%s) - t0 )) s" | tee -a "$out/$part.txt"
      ;;
    ab)
      for variant in old scalar wide; do
        env=(); [ "$variant" = old ] && env=(PYTHONPATH=.old); [ "$variant" = wide ] && env=(MMTUNE_C_STORE=wide)
        for set in records probes; do
          what=(--records); [ "$set" = probes ] && what=(--shapes $probes)
          echo "== $variant $set" | tee -a "$out/ab.txt"
          env "${env[@]}" timeout 200 python3 studies/step23_table.py --out "$out/ab-$variant-$set.json" --label "$variant" \
            --store "/tmp/store-$variant" "${what[@]}" 2>&1 | quiet | tee -a "$out/ab.txt"
        done
      done
      ;;
    table)
      left=$(( ${DEADLINE:-560} - ($(date +%s) - start) ))
      timeout "$left" python3 studies/step23_table.py --out "$out/table.json" --label scalar --store /tmp/store-scalar \
        --seeds 2222 3333 4444 --count 20 --seconds $(( left - 20 )) 2>&1 | quiet | tee "$out/table.txt"
      ;;
  esac
done
tar czf "$dest/step23.tgz" -C "$out" . && ls -la "$dest"
