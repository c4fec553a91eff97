#!/usr/bin/env bash
# On a machine of several GPUs, every GPU visible: the tests of several GPUs (two devices at
# least: tests/test_gpu_devices.py, and tests/test_sharding.py, the bridge under jax's
# sharding), one pytest process per test function, so that a crash (an abort in XLA's
# compile) costs one function and the others still report; then the tensor-parallel example
# (examples/tensor_parallel_mlp.py: its losses against lax's). Exit status 1 if any failed.
# Each function's whole log goes to $NUMBA_GEMM_RESULTS_DIR/multi_gpu/ (default /tmp); pytest
# captures Python's streams only, so that the message of an abort in XLA's C++ reaches the log.
# JOBS functions run at once (default 1; they share the GPUs, whose memory XLA then takes as
# needed). PY selects the interpreter (default: python3 with the tree importable).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export NCCL_NVLS_ENABLE=0  # NVLink multicast off on these hosts
unset NUMBA_ENABLE_CUDASIM JAX_PLATFORMS
LOGS=${NUMBA_GEMM_RESULTS_DIR:-/tmp}/multi_gpu
mkdir -p "$LOGS" && rm -f "$LOGS"/*.log
run_function() {  # one test function in its own process; its log, then its exit status
  local log="$LOGS/${1//[\/:]/_}.log"
  "$PY" -m pytest -q -rfE --tb=short --capture=sys -p no:cacheprovider "$1" > "$log" 2>&1
  echo "pytest exit $?" >> "$log"
  grep -E "passed|failed|skipped|^FAILED|^ERROR|Fatal|Check failed|^pytest exit" "$log" \
    | tail -n 12 | sed "s|^|$1: |"
}
export -f run_function
export PY LOGS
for file in tests/test_gpu_devices.py tests/test_sharding.py; do
  "$PY" -m pytest --collect-only -q -p no:cacheprovider "$file" | grep "::" | sed 's/\[.*//' \
    | sort -u
done | xargs -P "${JOBS:-1}" -I{} bash -c 'run_function "$1"' _ {}
status=0
grep -L "^pytest exit 0$" "$LOGS"/*.log | grep -q . && status=1  # a function failed or crashed
"$PY" examples/tensor_parallel_mlp.py || status=1
echo "multi-GPU tests exit $status"
exit "$status"
