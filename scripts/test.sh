#!/usr/bin/env bash
# Sets up everything, then runs every test: the C++ suite through CTest (an ASan+UBSan build, and
# a ThreadSanitizer build of the CPU thread pool's tests), the libFuzzer
# targets for a bounded time (SPECDEC_FUZZ_SECONDS per target, default 45; SPECDEC_SKIP_FUZZ=1
# skips them) and the Python suite through pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
JOBS="$(nproc)"

# Test-only Debian packages: qemu-user runs the native device as CPUs with less than this one
# (tests/python/test_native_emulated_cpus.py); gdb prints a crashed run's native stacks (below).
missing=""
for pkg in qemu-user gdb; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "== installing Debian packages for the tests:$missing"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# Test-only Python packages: Ray Serve for `specdec serve --ray` (tests/python/test_ray_serve.py),
# the version pyproject's `ray` extra pins.
echo "== installing Ray Serve for the tests (specdec[ray])"
.venv/bin/python -m pip install -q --disable-pip-version-check "ray[serve]==2.60.0"

# llama.cpp's vocabulary files and token vectors, for the C++ and Python tokenizer tests: from the
# pinned llama-cpp-python sdist (pip download, sha256 checked), fetched once into the specdec cache.
echo "== llama.cpp's test vectors (llama-cpp-python sdist, cached)"
.venv/bin/python tests/python/llamacpp_sdist.py

# The C++ suite runs once, in the build that catches the most: AddressSanitizer +
# UndefinedBehaviorSanitizer (on the library), assertions on, -O0 but for the few files where the
# tests spend their time (CMakeLists.txt; at -O1 throughout, the build took 2.4x as long, more
# than the faster run saved); each test binary runs whole or in shards (tests/cpp/CMakeLists.txt).
# The optimised build (pip install ., -O3) is what the Python suite runs, the native
# kernels included (test_native_device.py, test_native_emulated_cpus.py, the real models' lossless
# tests). SPECDEC_SKIP_SANITIZE=1 runs CTest in an optimised build instead (build/ctest) and skips
# ThreadSanitizer.
# A failed test runs once more (its first output stays in the log): an OpenCL test has crashed at
# process exit under load after all its assertions passed (PoCL 3.1, once in a full run on a
# 2-vCPU Xeon; 0 of ~180 reruns alone or beside a CPU hog), and LeakSanitizer's exit-time tracer
# has crashed under load on a test that had passed ("Tracer caught signal 11"; 0 of 30 reruns
# alone): the runtime's and the sanitizer's own failures, not wrong results; a test that fails
# twice fails the run.
if [ "${SPECDEC_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== C++ tests and benchmarks' smoke runs under ASan+UBSan (CTest)"
  cmake -S . -B build/asan -G Ninja -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_BUILD_BENCH=ON \
        -DSPECDEC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug > /dev/null
  cmake --build build/asan -j "$JOBS"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan --output-on-failure -j "$JOBS" --repeat until-pass:2

  # ThreadSanitizer: only the self-contained tests are defined in this build (the CPU thread pool,
  # tests/cpp/CMakeLists.txt), a few seconds; libtsan2 comes with g++ (libgcc-12-dev needs it).
  echo "== the CPU thread pool and step program under ThreadSanitizer (CTest)"
  cmake -S . -B build/tsan -G Ninja -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_TSAN=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  cmake --build build/tsan -j "$JOBS" --target cpu_thread_pool_test cpu_program_test
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build/tsan --output-on-failure -j "$JOBS"
else
  echo "== C++ tests (CTest, optimised build)"
  cmake -S . -B build/ctest -G Ninja -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_BUILD_BENCH=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  cmake --build build/ctest -j "$JOBS"
  ctest --test-dir build/ctest --output-on-failure -j "$JOBS" --repeat until-pass:2
fi

if [ "${SPECDEC_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== libFuzzer targets of the model-file readers (ASan+UBSan)"
  bash scripts/fuzz.sh "${SPECDEC_FUZZ_SECONDS:-45}"
fi

echo "== Python tests (pytest)"
# A run that dies of a signal (the process gone, not a failed test) says where (the test running,
# or the one that had just ended), prints the native stacks from its core where gdb and the core
# are there (Python's faulthandler prints nothing when the fault is on a thread whose stack
# overflowed), and goes on once from that test: the suite died once of SIGSEGV, silently, in a CI
# run whose every test until then had passed (stop 54; the same tests passed in full runs and
# 3 x 3 runs alone since). A second crash, a crash after the last test, or a test that failed
# before the crash fails the run.
progress="$(mktemp)"
failures="$progress.failures"
: > "$failures"
print_core_stacks() {
  local core
  core="$(find . -maxdepth 1 -type f -name 'core*' -newer "$progress" 2>/dev/null | head -n 1)"
  if [ -n "$core" ] && command -v gdb > /dev/null; then
    echo "-- the faulting thread, then every thread ($core)"
    gdb -batch -nx -iex "set auto-load python-scripts off" -ex "bt 40" -ex "thread apply all bt 12" \
        .venv/bin/python "$core" 2>&1 | grep -v "^warning: Unexpected size of section" | head -n 600 || true
    rm -f "$core"
  else
    echo "(no core file here or no gdb: core_pattern is $(cat /proc/sys/kernel/core_pattern 2>/dev/null))"
  fi
}
resume=""
rc=0
for attempt in 1 2; do
  rc=0
  ( ulimit -c unlimited 2>/dev/null || true
    SPECDEC_TEST_PROGRESS="$progress" SPECDEC_TEST_FAILURES="$failures" \
      SPECDEC_TEST_RESUME_FROM="$resume" .venv/bin/python -m pytest -q tests/python ) || rc=$?
  [ "$rc" -gt 128 ] || break
  where="$(cat "$progress")"  # "running <test>", "after <test>", "session end" or nothing
  echo "== pytest died of signal $((rc - 128)): ${where:-before its first test}"
  print_core_stacks
  case "$where" in
    "running "* | "after "*) resume="${where#* }" ;;
    *) break ;;
  esac
  if [ "$attempt" -eq 1 ]; then echo "== pytest again, from $resume on"; fi
done
if [ "$rc" -eq 0 ] && [ -s "$failures" ]; then
  echo "== failed before the crash:"
  cat "$failures"
  rc=1
fi
rm -f "$progress" "$failures"
exit "$rc"
