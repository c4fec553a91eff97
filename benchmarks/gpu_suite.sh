#!/usr/bin/env bash
# On a GPU machine, from the repository root: the whole test suite on the real GPU
# (gpu-marked tests included), then the benchmarks. The benchmark table prints last;
# results go to $NUMBA_GEMM_RESULTS_DIR (default benchmarks/results/).
# PY selects the interpreter (default: python3 with the project importable from the tree).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
unset NUMBA_ENABLE_CUDASIM JAX_PLATFORMS
"$PY" -m pytest -q -p no:cacheprovider tests 2>&1 | tail -n 25
tests=${PIPESTATUS[0]}
"$PY" -m pytest -q -p no:cacheprovider benchmarks --benchmark-columns=median,min,rounds 2>&1
bench=${PIPESTATUS[0]}
echo "tests exit $tests, benchmarks exit $bench"
[ "$tests" = 0 ] && [ "$bench" = 0 ]
