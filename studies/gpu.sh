#!/usr/bin/env bash
# A study's parts on a GPU device (the `device` tool), from the repository root, in the order given:
#
#   bash studies/gpu.sh OUT PART [ARG...] [PART [ARG...]]...
#
#   table I/N              part I of N of the measured table's training run (studies/table.py measure):
#                          every candidate at step 25's 124 shapes (seeded generator, seeds 2222 4444
#                          5555 6666 7777, and 24 skinny shapes of seed 7; none of the bench's suites)
#   retable WHAT I/N       part I of N of the shipped table's candidates timed again, anchored
#                          (studies/table.py retime --changed WHAT: stream, unaligned, unaligned-c or
#                          wgmma-unaligned)
#   extend FAMILY I/N      part I of N of FAMILY's tiles added to the shipped table (or TABLE), anchored,
#                          and ODD_COUNT (default 0) large shapes with unaligned rows added with every
#                          tile (studies/table.py extend --family FAMILY --odd-count ODD_COUNT)
#   records LABEL          every shipped record's config at its shape (studies/table.py records), into
#                          ab-LABEL-records.json; with KERNELS=DIR the kernels of DIR (e.g. .old/, made
#                          by `git archive COMMIT kernels | tar -x -C .old`) instead of the checkout's
#   probes LABEL SHAPE...  every candidate at SHAPEs (studies/table.py measure --shapes), into
#                          ab-LABEL-probes.json; KERNELS as for records
#   tune SHAPE...          `mmtune tune --trials TRIALS` (default 10) per shape (FAMILIES: --family
#                          options; DTYPE), then the cache exported to tuned.json and `mmtune best`
#   retime                 the stale shipped records re-timed (`mmtune warm --retime`), exported to
#                          retimed.json for `mmtune promote`
#   bench                  `mmtune bench --shapes standard` against cuBLAS (bench.json, bench.png)
#   tests                  the kernel tests and the call path's GPU tests (TESTS selects, as pytest -k;
#                          TEST_FILES replaces the files)
#   py SCRIPT NAME ARG...  python3 SCRIPT ARG... --out /tmp/STEP/NAME (NAME a file like call_path.json or
#                          a folder, as SCRIPT's --out takes), its output in NAME.txt less any extension;
#                          takes the rest of the line, so it comes last
#   SUITE                  `mmtune bench --peers --shapes SUITE` (wide, seeded, standard, coverage, or
#                          shapes MxNxK,...) for at most SUITE_SECONDS (default 300), mmtune's kernels of
#                          precision PRECISION where set (into SUITE-PRECISION; a list of shapes over 80
#                          characters into shapes-HASH-PRECISION); `peers` is a no-op word
#                          (`peers wide seeded`)
#
# STEP (default `run`) names the work folder /tmp/STEP and the pack OUT/STEP.tgz; DEADLINE (default
# 570) is the seconds after the start past which the table parts start no new shape. Installs the
# wheels carried in .whl into the image's python3 first; the cache is /tmp/STEP/cache.db, so a tune
# or retime part's rows serve the parts after it. `bash studies/gpu_peers.sh` is the peers run alone.
set -uo pipefail
dest=${1:?usage: gpu.sh OUT PART [ARG...]...}; shift
step=${STEP:-run}
out=/tmp/$step
mkdir -p "$out" "$dest"
export PYTHONUNBUFFERED=1 NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0
start=$(date +%s)
python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
export MMTUNE_CACHE="$out/cache.db"

quiet() { grep -v "Warning\|warn(\|choice = lookup" ; }
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - start) )); }
# shapes ARG...: the leading MxNxK arguments, into the array `taken`
shapes() { taken=(); while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do taken+=("$1"); shift; done; }
# with_kernels CMD...: CMD with KERNELS first on PYTHONPATH, if set
with_kernels() { if [ -n "${KERNELS:-}" ]; then PYTHONPATH="$KERNELS${PYTHONPATH:+:$PYTHONPATH}" "$@"; else "$@"; fi; }

while [ $# -gt 0 ]; do
  part=$1; shift
  case "$part" in
    table)
      slice=${1:?table needs I/N}; shift
      name=table-${slice/\//of}; t=$(left)
      timeout "$t" python3 studies/table.py measure --out "$out/$name.json" --store "/tmp/store-$step" \
        --seeds 2222 4444 5555 6666 7777 --count 20 --skinny 7 --skinny-count 24 --part "$slice" \
        --seconds $(( t - 20 )) 2>&1 | quiet | tee -a "$out/$name.txt"
      ;;
    retable)
      what=${1:?retable needs stream, unaligned, unaligned-c or wgmma-unaligned}; slice=${2:?retable needs I/N}; shift 2
      name=table-${slice/\//of}; t=$(left)
      timeout "$t" python3 studies/table.py retime --changed "$what" --out "$out/$name.json" --store "/tmp/store-$step" \
        --part "$slice" --seconds $(( t - 20 )) 2>&1 | quiet | tee -a "$out/$name.txt"
      ;;
    extend)
      family=${1:?extend needs FAMILY and I/N}; slice=${2:?extend needs FAMILY and I/N}; shift 2
      name=extend-$family-${slice/\//of}; t=$(left)
      timeout "$t" python3 studies/table.py extend --family "$family" --odd-count "${ODD_COUNT:-0}" \
        ${TABLE:+--table "$TABLE"} --out "$out/$name.json" --store "/tmp/store-$step" --part "$slice" \
        --seconds $(( t - 20 )) 2>&1 | quiet | tee -a "$out/$name.txt"
      ;;
    records)
      label=${1:?records needs a label}; shift
      echo "== $label records" | tee -a "$out/ab.txt"
      with_kernels timeout 200 python3 studies/table.py records --out "$out/ab-$label-records.json" --label "$label" \
        --store "/tmp/store-$label" 2>&1 | quiet | tee -a "$out/ab.txt"
      ;;
    probes)
      label=${1:?probes needs a label}; shift
      shapes "$@"; shift ${#taken[@]}
      echo "== $label probes" | tee -a "$out/ab.txt"
      with_kernels timeout 200 python3 studies/table.py measure --out "$out/ab-$label-probes.json" \
        --store "/tmp/store-$label" --shapes "${taken[@]}" --seconds 150 2>&1 | quiet | tee -a "$out/ab.txt"
      ;;
    tune)
      shapes "$@"; shift ${#taken[@]}
      for shape in "${taken[@]}"; do
        IFS=x read -r m n k <<< "$shape"
        t0=$(date +%s)
        # shellcheck disable=SC2086 # FAMILIES is a list of options
        timeout $(( ${TRIALS:-10} * 4 + 20 )) python3 -m autotune tune --m "$m" --n "$n" --k "$k" \
          --trials "${TRIALS:-10}" ${DTYPE:+--dtype "$DTYPE"} ${FAMILIES:-} --timeout 30 2>&1 | quiet | tail -n 2 \
          | tee -a "$out/tune.txt"
        echo "$shape: $(( $(date +%s) - t0 )) s" | tee -a "$out/tune.txt"
      done
      python3 -m autotune export --out "$out/tuned.json"
      python3 -m autotune best 2>&1 | quiet > "$out/best.txt"
      ;;
    retime)
      timeout "${RETIME_SECONDS:-300}" python3 -m autotune warm --retime --arch sm_90 2>&1 | quiet | tee "$out/retime.txt"
      python3 -m autotune export --out "$out/retimed.json"
      ;;
    bench)
      mkdir -p "$out/bench"
      timeout 300 python3 -m autotune bench --shapes standard --out "$out/bench" 2>&1 | quiet | tee "$out/bench.txt"
      ;;
    tests)
      # shellcheck disable=SC2086 # TEST_FILES is a list of files
      MMTUNE_CACHE="$out/cache-tests.db" MMTUNE_TEST_GPU=1 timeout 450 python3 -m pytest -q -p no:cacheprovider \
        ${TEST_FILES:-tests/test_kernels.py tests/test_gpu_calls.py} -k "${TESTS:-}" 2>&1 | tail -n 30 \
        | tee -a "$out/gpu_tests.txt"
      ;;
    py)
      script=${1:?py needs SCRIPT NAME}; name=${2:?py needs SCRIPT NAME}; shift 2
      timeout "$(left)" python3 "$script" "$@" --out "$out/$name" 2>&1 | quiet | tee -a "$out/${name%.*}.txt"
      set --
      ;;
    peers) ;;
    *)
      run=$part
      [ ${#run} -gt 80 ] && run=shapes-$(printf %s "$part" | md5sum | cut -c1-8)  # a long list of shapes
      run=$run${PRECISION:+-$PRECISION}
      mkdir -p "$out/$run"
      t0=$(date +%s)
      timeout "${SUITE_SECONDS:-300}" python3 -m autotune bench --peers --shapes "$part" ${PRECISION:+--precision "$PRECISION"} \
        --out "$out/$run" 2>&1 | quiet | tee "$out/$run.txt"
      echo "$run: $(( $(date +%s) - t0 )) s" | tee -a "$out/$run.txt"
      ;;
  esac
done
tar czf "$dest/$step.tgz" -C "$out" . && ls -la "$dest"
