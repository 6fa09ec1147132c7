#!/usr/bin/env bash
# Builds the libFuzzer targets of the model-file readers (fuzz/, clang + ASan + UBSan) into
# build/fuzz and runs each for a bounded time on a copy of the committed corpus (so a run never
# grows fuzz/corpus). Fails on any finding: a crash, a sanitizer report, a leak, an uncaught
# exception other than the documented ones, an allocation over MALLOC_LIMIT_MB, an input slower
# than 10 s, or a broken invariant; libFuzzer writes the input to build/fuzz/findings/<target>/.
#
#   scripts/fuzz.sh [SECONDS]     seconds per target (default $SPECDEC_FUZZ_SECONDS, else 60)
#
# Targets run side by side when there are at least two CPUs. Reproduce a finding with
#   build/fuzz/<target> build/fuzz/findings/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${1:-${SPECDEC_FUZZ_SECONDS:-60}}"
MALLOC_LIMIT_MB=256
TARGETS=(gguf safetensors)
BUILD=build/fuzz

echo "== building fuzz targets (clang++, ASan+UBSan) in $BUILD"
cmake -S fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$BUILD" -j "$(nproc)"

run_target() {
  local name="$1" corpus="$BUILD/corpus/$1" findings="$BUILD/findings/$1"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$findings"
  cp fuzz/corpus/"$name"/* "$corpus"/
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/${name}_fuzzer" "$corpus" -dict="fuzz/$name.dict" \
      -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb="$MALLOC_LIMIT_MB" -max_len=32768 -print_final_stats=1 \
      -artifact_prefix="$findings/" > "$BUILD/$name.log" 2>&1
}

echo "== fuzzing ${TARGETS[*]} for ${FUZZ_SECONDS} s each"
declare -A pids status
for name in "${TARGETS[@]}"; do
  if [ "$(nproc)" -ge 2 ]; then
    run_target "$name" & pids[$name]=$!
  else
    status[$name]=0
    run_target "$name" || status[$name]=$?
  fi
done
for name in "${!pids[@]}"; do
  status[$name]=0
  wait "${pids[$name]}" || status[$name]=$?
done

failed=0
for name in "${TARGETS[@]}"; do
  log="$BUILD/$name.log"
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  per_second="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)"
  coverage="$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)"
  if [ "${status[$name]}" -eq 0 ]; then
    echo "${name}_fuzzer: ok, ${runs:-?} runs (${per_second:-?}/s), ${coverage:-cov: ?}"
  else
    failed=1
    echo "${name}_fuzzer: FINDING (exit ${status[$name]}); input in $BUILD/findings/$name/; log:"
    tail -n 60 "$log"
  fi
done
exit "$failed"
