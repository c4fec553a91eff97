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
# one process on a 16-core machine. Parts and processes take runs of consecutive tests, so that
# the tests of one function, which mostly share kernels, compile them once. TEST_PART=k/n runs
# the k-th of n parts of the suite, so that each part fits a time limit per command; the demo runs with
# part 1 only. On a machine of several GPUs the parts run at once, one per GPU, and then the
# tests of several GPUs (tests/test_gpu_devices.py, and tests/test_sharding.py: the bridge
# under jax's sharding; both skip where one GPU is visible) with every GPU visible; on the device machine's 4-GPU kind (64 cores):
#   for k in 1 2 3 4; do CUDA_VISIBLE_DEVICES=$((k-1)) TEST_SHARDS=14 TEST_PART=$k/4 \
#     ONLY_TESTS=1 NUMBA_GEMM_RESULTS_DIR=/tmp/part$k bash benchmarks/gpu_suite.sh & done; wait
#   bash benchmarks/multi_gpu_tests.sh  # one pytest process per test function, then the example
# and on its 2-GPU kinds (32 cores) two such rounds of two parts (TEST_SHARDS=14).
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
  ids=$(mktemp -d)
  "$PY" -m pytest --collect-only -q -p no:cacheprovider tests > "$ids/collected" 2>&1
  grep "::" "$ids/collected" > "$ids/all"
  if [ -n "${TEST_PART:-}" ]; then
    [[ "$TEST_PART" =~ ^([0-9]+)/([0-9]+)$ ]] && (( BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= BASH_REMATCH[2] )) \
      || { echo "TEST_PART must be k/n with 1 <= k <= n; got '$TEST_PART'"; exit 2; }
    total=$(wc -l < "$ids/all")
    awk -v k="${BASH_REMATCH[1]}" -v n="${BASH_REMATCH[2]}" -v total="$total" \
      'NR > int((k - 1) * total / n) && NR <= int(k * total / n)' "$ids/all" \
      > "$ids/part" && mv "$ids/part" "$ids/all"
  fi
  [ -s "$ids/all" ] || { echo "pytest collected no tests:"; tail -n 20 "$ids/collected"; tests=1; }
  split -n "l/$shards" "$ids/all" "$ids/shard."
  for shard in "$ids"/shard.*; do
    [ -s "$shard" ] || continue  # an empty shard would run pytest's default: every test
    mapfile -t shard_ids < "$shard"  # test ids may hold spaces
    # faulthandler: a process that crashes (at exit too) prints its Python stacks to its log
    ( PYTHONFAULTHANDLER=1 "$PY" -m pytest -q -rfEs -p no:cacheprovider "${shard_ids[@]}" \
        > "$shard.log" 2>&1; echo "pytest exit $?" >> "$shard.log" ) &
  done
  wait
  cat "$ids"/shard.*.log > "$LOG_DIR/tests.log" 2> /dev/null
  grep -q "^pytest exit [^0]" "$LOG_DIR/tests.log" && tests=1
  echo "$(wc -l < "$ids/all") tests${TEST_PART:+ (part $TEST_PART)} in $shards processes:"
  grep -hE "^(FAILED|ERROR|SKIPPED)|passed|failed|^pytest exit [^0]|^Fatal Python error" \
    "$ids"/shard.*.log 2> /dev/null | tail -n 40
  rm -rf "$ids"
  if [[ "${TEST_PART:-1/1}" == 1/* ]]; then
    "$PY" -m numba_gemm demo || tests=1
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
