# The parts every step's GPU script runs, sourced by it (from step 26 on; earlier steps' scripts
# keep their own copies, as they ran). gpu_start STEP DEST sets up a device call: the wheels
# carried in .whl installed into the image's python3, the GPU named in $out/gpu.txt, the cache in
# $out; gpu_finish packs $out into DEST/STEP.tgz. Each part_* writes under $out.

gpu_start() {
  step=$1 dest=$2
  out=/tmp/$step
  mkdir -p "$out" "$dest"
  export PYTHONUNBUFFERED=1
  start=$(date +%s)
  python3 -m pip install -q --no-index --no-build-isolation --find-links .whl -e . 2>&1 | grep -v "^WARNING\|already" | tail -n 3
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
  export MMTUNE_CACHE="$out/cache.db"
}

quiet() { grep -v "Warning\|warn(\|choice = lookup" ; }

# part_table I/N: part I of N of the training table of step 25's shapes (studies/step24_table.py),
# timing new shapes until DEADLINE (default 570) seconds after gpu_start
part_table() {
  local slice=$1 name=table-${1/\//of}
  local left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
  timeout "$left" python3 studies/step24_table.py --out "$out/$name.json" --store "/tmp/store-$step" \
    --seeds 2222 4444 5555 6666 7777 --count 20 --skinny 7 --skinny-count 24 --part "$slice" \
    --seconds $(( left - 15 )) 2>&1 | quiet | tee "$out/$name.txt"
}

# part_slice SCRIPT I/N: part I of N of a table study (SCRIPT --part I/N, e.g. studies/step31_table.py),
# timing new shapes until DEADLINE (default 570) seconds after gpu_start
part_slice() {
  local script=$1 slice=$2 name=table-${2/\//of}
  local left=$(( ${DEADLINE:-570} - ($(date +%s) - start) ))
  timeout "$left" python3 "$script" --out "$out/$name.json" --store "/tmp/store-$step" --part "$slice" \
    --seconds $(( left - 20 )) 2>&1 | quiet | tee -a "$out/$name.txt"
}

# part_tune SHAPE...: `mmtune tune --trials TRIALS` (default 10) per shape; the bests exported
part_tune() {
  local m n k
  for shape in "$@"; do
    IFS=x read -r m n k <<< "$shape"
    timeout $(( ${TRIALS:-10} * 4 + 20 )) python3 -m autotune tune --m "$m" --n "$n" --k "$k" --trials "${TRIALS:-10}" ${DTYPE:+--dtype "$DTYPE"} \
      --timeout 30 2>&1 | quiet | tail -n 2 | tee -a "$out/tune.txt"
  done
  python3 -m autotune export --out "$out/tuned.json"
  python3 -m autotune best 2>&1 | quiet > "$out/best.txt"
}

part_retime() {
  timeout 300 python3 -m autotune warm --retime --arch sm_90 2>&1 | quiet | tee "$out/retime.txt"
  python3 -m autotune export --out "$out/retimed.json"
}

part_tests() {
  MMTUNE_CACHE="$out/cache-tests.db" MMTUNE_TEST_GPU=1 timeout 450 python3 -m pytest -q -p no:cacheprovider \
    tests/test_kernels.py tests/test_gpu_calls.py -k "${TESTS:-}" 2>&1 | tail -n 30 | tee -a "$out/gpu_tests.txt"
}

# part_peers SUITE: `mmtune bench --peers` on one suite, for at most SUITE_SECONDS (default 300)
part_peers() {
  mkdir -p "$out/$1"
  local t0=$(date +%s)
  timeout "${SUITE_SECONDS:-300}" python3 -m autotune bench --peers --shapes "$1" --out "$out/$1" 2>&1 | quiet \
    | tee "$out/$1.txt"
  echo "$1: $(( $(date +%s) - t0 )) s" | tee -a "$out/$1.txt"
}

# shapes ARG...: the leading MxNxK arguments, into the array `taken`
shapes() { taken=(); while [ $# -gt 0 ] && [[ "$1" == *x*x* ]]; do taken+=("$1"); shift; done; }

# part_common PART ARG...: the parts every step's script takes (tune SHAPE..., retime, tests, or a
# suite's name); sets `used` to how many of the ARGs it took
part_common() {
  local part=$1; shift
  used=0
  case "$part" in
    tune) shapes "$@"; used=${#taken[@]}; part_tune "${taken[@]}" ;;
    retime) part_retime ;;
    tests) part_tests ;;
    *) part_peers "$part" ;;
  esac
}

gpu_finish() {
  tar czf "$dest/$step.tgz" -C "$out" . && ls -la "$dest"
}
