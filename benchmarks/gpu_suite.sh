#!/usr/bin/env bash
# On a GPU machine, from the repository root: the whole test suite on the real GPU
# (gpu-marked tests included), the demo, the benchmarks, the MLP trained through
# jax_bridge against lax, the triple product against torch and JAX, each pipe's multiply-add
# rate with few warps (fma_throughput.py), back-to-back calls with programmatic dependent
# launch on and off (launch_overlap.py), host time per call (call_overhead.py), a model's
# training step and its products through the bridge and lax (models.py), every shape class
# against cuBLAS (shapes.py), whether a method's place in interleaved rounds changes its time
# (timing_order.py), and (where ncu exists) the L2 measurement of CTA orders. The
# results table prints last; results go to $NUMBA_GEMM_RESULTS_DIR (default
# benchmarks/results/), logs to the same folder (default /tmp). PY selects the interpreter
# (default: python3 with the tree importable).
# SKIP_TESTS=1 skips the test suite (to re-run only the measurements), ONLY_TESTS=1 stops
# after it and the demo; BENCHMARKS picks benchmark files (default: all of benchmarks/).
# The tests run in TEST_SHARDS pytest processes at once (default: the CPU count less 2, at
# most 14), since compiling the kernels takes most of their time: several times faster than
# one process on a 16-core machine. Processes take runs of consecutive tests (four times as many
# runs as processes), so that the tests of one function, which mostly share kernels, compile them
# once. TEST_PART=k/n runs the k-th of n parts of the suite; the demo runs with part 1 only.
# TEST_SECONDS stops the tests (and the demo) after that many seconds; every test's outcome is
# in tests.log, the ids of those passed or skipped in tests_done.txt and of the others in
# tests_left.txt (both in the logs' folder); TEST_DONE=<a tests_done.txt> runs only the tests
# not in it, so that a suite larger than a command's time limit runs whole over several
# commands. On a machine of several GPUs the parts run at once, one per GPU, and then the
# tests of several GPUs (tests/test_gpu_devices.py, and tests/test_sharding.py: the bridge
# under jax's sharding; both skip where one GPU is visible) with every GPU visible; on the device
# machine's 4-GPU kind (64 cores):
#   for k in 1 2 3 4; do CUDA_VISIBLE_DEVICES=$((k-1)) TEST_SHARDS=14 TEST_PART=$k/4 \
#     ONLY_TESTS=1 NUMBA_GEMM_RESULTS_DIR=/tmp/part$k bash benchmarks/gpu_suite.sh & done; wait
#   bash benchmarks/multi_gpu_tests.sh  # one pytest process per test function, then the example
# and on its 2-GPU kinds (32 cores) two such rounds of two parts (TEST_SHARDS=14). On one GPU,
# in commands of at most 10 minutes:
#   TEST_SECONDS=540 ONLY_TESTS=1 NUMBA_GEMM_RESULTS_DIR=/tmp/r bash benchmarks/gpu_suite.sh
#   TEST_DONE=/tmp/r/tests_done.txt TEST_SECONDS=540 ...  # again, until tests_left.txt is empty
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
unset NUMBA_ENABLE_CUDASIM JAX_PLATFORMS
RESULTS=${NUMBA_GEMM_RESULTS_DIR:-benchmarks/results}
LOG_DIR=${NUMBA_GEMM_RESULTS_DIR:-/tmp}
mkdir -p "$LOG_DIR"
tests=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  cpus=$(nproc)
  shards=${TEST_SHARDS:-$(( cpus > 16 ? 14 : (cpus > 3 ? cpus - 2 : 1) ))}
  work="$LOG_DIR/suite" && rm -rf "$work" && mkdir -p "$work"
  "$PY" -m pytest --collect-only -q -p no:cacheprovider tests > "$work/collected" 2>&1
  grep "::" "$work/collected" > "$work/all"
  if [ -n "${TEST_PART:-}" ]; then
    [[ "$TEST_PART" =~ ^([0-9]+)/([0-9]+)$ ]] && (( BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= BASH_REMATCH[2] )) \
      || { echo "TEST_PART must be k/n with 1 <= k <= n; got '$TEST_PART'"; exit 2; }
    total=$(wc -l < "$work/all")
    awk -v k="${BASH_REMATCH[1]}" -v n="${BASH_REMATCH[2]}" -v total="$total" \
      'NR > int((k - 1) * total / n) && NR <= int(k * total / n)' "$work/all" \
      > "$work/part" && mv "$work/part" "$work/all"
  fi
  [ -s "$work/all" ] || { echo "pytest collected no tests:"; tail -n 20 "$work/collected"; tests=1; }
  if [ -n "${TEST_DONE:-}" ]; then  # resume: the ids of an earlier run's tests_done.txt are not run
    [ -f "$TEST_DONE" ] || { echo "TEST_DONE: no file '$TEST_DONE'"; exit 2; }
    grep -vxFf "$TEST_DONE" "$work/all" > "$work/todo" || true
  else
    cp "$work/all" "$work/todo"
  fi
  # four chunks per process, taken as processes free up: a long function holds one process while
  # the others go on, and most processes end (printing their failures) before a deadline
  split -n "l/$(( 4 * shards ))" "$work/todo" "$work/chunk."
  export PY DEADLINE=$(( $(date +%s) + ${TEST_SECONDS:-86400} ))
  run_chunk() {  # one chunk's tests in one pytest process, stopped at the deadline
    local left=$(( DEADLINE - $(date +%s) )) ids
    [ -s "$1" ] && (( left > 0 )) || return 0  # an empty chunk would run every test
    mapfile -t ids < "$1"  # test ids may hold spaces
    # faulthandler: a process that crashes (at exit too) prints its Python stacks to its log
    PYTHONFAULTHANDLER=1 timeout "$left" "$PY" -m pytest -v -rfEs --tb=short -p no:cacheprovider \
      "${ids[@]}" > "$1.log" 2>&1
    printf '\npytest exit %s\n' "$?" >> "$1.log"  # on a line of its own after a killed test
  }
  export -f run_chunk
  ls "$work"/chunk.* 2> /dev/null | grep -v "\.log$" | xargs -P "$shards" -I{} bash -c 'run_chunk "$1"' _ {}
  cat "$work"/chunk.*.log > "$LOG_DIR/tests.log" 2> /dev/null
  # each test's outcome from pytest's verbose lines; those done (passed or skipped) go to
  # tests_done.txt, with an earlier run's (TEST_DONE) where resumed
  sed -nE 's/^(.+::.+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)( .*)?$/\2 \1/p' \
    "$LOG_DIR/tests.log" | sort -u > "$work/outcomes"
  { [ -n "${TEST_DONE:-}" ] && cat "$TEST_DONE"
    sed -nE 's/^(PASSED|SKIPPED|XFAIL) //p' "$work/outcomes"; } | sort -u > "$work/done"
  mv "$work/done" "$LOG_DIR/tests_done.txt"
  grep -vxFf "$LOG_DIR/tests_done.txt" "$work/all" > "$LOG_DIR/tests_left.txt" || true
  grep -q "^pytest exit [^0]" "$LOG_DIR/tests.log" && tests=1
  [ -s "$LOG_DIR/tests_left.txt" ] && tests=1
  echo "$(wc -l < "$work/all") tests${TEST_PART:+ (part $TEST_PART)}, $(wc -l < "$work/todo") run" \
    "in $shards processes: $(grep -c "^PASSED" "$work/outcomes") passed," \
    "$(grep -c "^SKIPPED" "$work/outcomes") skipped, $(grep -cE "^(FAILED|ERROR)" "$work/outcomes")" \
    "failed; $(wc -l < "$LOG_DIR/tests_left.txt") not done (tests_left.txt)"
  grep -hE "^(FAILED|ERROR) |^pytest exit [^0]|^Fatal Python error" "$LOG_DIR/tests.log" | sort | uniq -c \
    | sort -rn | head -n 40
  if [[ "${TEST_PART:-1/1}" == 1/* ]] && [ -z "${TEST_DONE:-}" ]; then
    left=$(( DEADLINE - $(date +%s) ))  # the demo keeps to TEST_SECONDS' deadline too
    if (( left > 0 )); then
      timeout "$left" "$PY" -m numba_gemm demo || tests=1
    else
      echo "demo not run: TEST_SECONDS' deadline passed"; tests=1
    fi
  fi
fi
[ "${ONLY_TESTS:-0}" = 1 ] && { echo "tests exit $tests"; exit "$tests"; }
"$PY" -m pytest -q -p no:cacheprovider ${BENCHMARKS:-benchmarks} --benchmark-columns=median,min,rounds \
  > "$LOG_DIR/benchmarks.log" 2>&1
bench=$?
grep -E "^(FAILED|ERROR)|passed|failed" "$LOG_DIR/benchmarks.log" | tail -n 5
"$PY" benchmarks/mlp_training.py --results "$RESULTS" > "$LOG_DIR/mlp_training.log" 2>&1
mlp=$?
grep -E "largest relative|Error" "$LOG_DIR/mlp_training.log"
"$PY" benchmarks/triple_product.py --results "$RESULTS" > "$LOG_DIR/triple_product.log" 2>&1
triple=$?
"$PY" benchmarks/fma_throughput.py --results "$RESULTS" > "$LOG_DIR/fma_throughput.log" 2>&1
fma=$?
"$PY" benchmarks/launch_overlap.py --results "$RESULTS" > "$LOG_DIR/launch_overlap.log" 2>&1
overlap=$?
"$PY" benchmarks/call_overhead.py --out "$RESULTS" > "$LOG_DIR/call_overhead.log" 2>&1
calls=$?
"$PY" benchmarks/models.py --products --out "$RESULTS" > "$LOG_DIR/models.log" 2>&1
models=$?
"$PY" benchmarks/shapes.py --out "$RESULTS" > "$LOG_DIR/shapes.log" 2>&1
shapes=$?
"$PY" benchmarks/timing_order.py --out "$RESULTS" > "$LOG_DIR/timing_order.log" 2>&1
order=$?
"$PY" benchmarks/sharding.py --out "$RESULTS" > "$LOG_DIR/sharding.log" 2>&1  # 1, 2, 4 GPUs
sharding=$?
l2=0
if command -v ncu > /dev/null; then
  ncu --clock-control none --kernel-name regex:tiled --csv \
    --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    "$PY" benchmarks/l2_ordering.py run > "$LOG_DIR/ncu_l2.csv" 2> "$LOG_DIR/ncu_l2.log"
  "$PY" benchmarks/l2_ordering.py summarize "$LOG_DIR/ncu_l2.csv" "$RESULTS"
  l2=$?
fi
"$PY" -m numba_gemm bench --results "$RESULTS"
grep -E "warps per SM|layout|Error" "$LOG_DIR/fma_throughput.log"
sed -n '/^Back-to-back calls/,$p' "$LOG_DIR/launch_overlap.log"
sed -n '/^D = A @ B @ C/,$p' "$LOG_DIR/triple_product.log"
cat "$LOG_DIR/call_overhead.log" "$LOG_DIR/models.log" "$LOG_DIR/shapes.log" \
  "$LOG_DIR/timing_order.log" "$LOG_DIR/sharding.log"
echo "tests exit $tests, benchmarks exit $bench, mlp exit $mlp, triple exit $triple," \
  "fma exit $fma, overlap exit $overlap, calls exit $calls, models exit $models," \
  "shapes exit $shapes, timing order exit $order, sharding exit $sharding, l2 exit $l2"
[ "$tests" = 0 ] && [ "$bench" = 0 ] && [ "$mlp" = 0 ] && [ "$triple" = 0 ] && [ "$fma" = 0 ] \
  && [ "$overlap" = 0 ] && [ "$calls" = 0 ] && [ "$models" = 0 ] && [ "$shapes" = 0 ] \
  && [ "$order" = 0 ] && [ "$sharding" = 0 ] && [ "$l2" = 0 ]
