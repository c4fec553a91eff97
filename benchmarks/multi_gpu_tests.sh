#!/usr/bin/env bash
# On a machine of several GPUs, every GPU visible: the tests of several GPUs (two devices at
# least: tests/test_gpu_devices.py, and tests/test_sharding.py, the bridge under jax's
# sharding), one pytest process per test function, so that a crash (an abort in XLA's
# compile) costs one function and the others still report; then the tensor-parallel example
# (examples/tensor_parallel_mlp.py: its losses against lax's). Exit status 1 if any failed.
# PY selects the interpreter (default: python3 with the tree importable).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export NCCL_NVLS_ENABLE=0  # NVLink multicast off on these hosts
unset NUMBA_ENABLE_CUDASIM JAX_PLATFORMS
status=0
for file in tests/test_gpu_devices.py tests/test_sharding.py; do
  functions=$("$PY" -m pytest --collect-only -q -p no:cacheprovider "$file" | grep "::" \
    | sed 's/\[.*//' | sort -u)
  for function in $functions; do
    "$PY" -m pytest -q -rfE -p no:cacheprovider "$function" 2>&1 | tail -n 15 \
      | grep -E "passed|failed|skipped|^FAILED|^ERROR|Fatal" | sed "s|^|$function: |"
    [ "${PIPESTATUS[0]}" -le 0 ] || status=1
  done
done
"$PY" examples/tensor_parallel_mlp.py || status=1
echo "multi-GPU tests exit $status"
exit "$status"
