#!/usr/bin/env bash
# On a GPU machine, from the repository root: the whole test suite on the real GPU
# (gpu-marked tests included), then the benchmarks. The benchmark table prints last;
# results go to $NUMBA_GEMM_RESULTS_DIR (default benchmarks/results/), the test log
# to the same folder (default /tmp) as tests.log.
# PY selects the interpreter (default: python3 with the project importable from the tree).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
unset NUMBA_ENABLE_CUDASIM JAX_PLATFORMS
LOG_DIR=${NUMBA_GEMM_RESULTS_DIR:-/tmp}
"$PY" -m pytest -q -p no:cacheprovider tests > "$LOG_DIR/tests.log" 2>&1
tests=$?
grep -E "^(FAILED|ERROR)|passed|failed" "$LOG_DIR/tests.log" | tail -n 20
"$PY" -m numba_gemm demo
"$PY" -m pytest -q -p no:cacheprovider benchmarks --benchmark-columns=median,min,rounds 2>&1
bench=${PIPESTATUS[0]}
echo "tests exit $tests, benchmarks exit $bench"
[ "$tests" = 0 ] && [ "$bench" = 0 ]
