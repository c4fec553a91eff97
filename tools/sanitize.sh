#!/usr/bin/env bash
# compute-sanitizer's four tools (memcheck, racecheck, synccheck, initcheck) over every kernel
# family and shipped tile config (tools/sanitize_calls.py), on a GPU machine, from the
# repository root. The tools run at once, one process each; each writes its log to
# $SANITIZE_LOGS (default /tmp/sanitize) and the summary table prints last. Exit status: 0 when
# every tool reports 0 errors and every result is right.
#
#   bash tools/sanitize.sh [--quick] [--part K/N]
#
# --quick: one tile config per dtype; --part K/N: the K-th of N parts of the calls;
# SANITIZE_TOOLS="racecheck initcheck" runs only those tools. On a machine
# of several GPUs the parts run at once, one per GPU, each with its own logs:
#   for k in 1 2; do CUDA_VISIBLE_DEVICES=$((k-1)) SANITIZE_LOGS=/tmp/sanitize-$k \
#     bash tools/sanitize.sh --part $k/2 & done; wait
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
LOGS=${SANITIZE_LOGS:-/tmp/sanitize}
mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset NUMBA_ENABLE_CUDASIM
# Numba's own launches allocate through cuMemAlloc; the library's pool through
# cuMemAllocFromPoolAsync, which compute-sanitizer tracks too (no pool-specific flag needed).
read -ra TOOLS <<< "${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}"
for tool in "${TOOLS[@]}"; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check no)
  compute-sanitizer --tool "$tool" "${extra[@]}" --print-limit 100 --error-exitcode 3 \
    "$PY" tools/sanitize_calls.py "$@" > "$LOGS/$tool.log" 2>&1 &
done
wait
status=0
printf '%-10s %-8s %s\n' tool exit summary
for tool in "${TOOLS[@]}"; do
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|calls checked" "$LOGS/$tool.log" | tr '\n' ' ')
  errors=$(grep -oE "(ERROR|RACECHECK) SUMMARY: [0-9]+" "$LOGS/$tool.log" | grep -oE "[0-9]+$" | head -1)
  wrong=$(grep -oE "[0-9]+ wrong" "$LOGS/$tool.log" | grep -oE "^[0-9]+")
  [ "${errors:-x}" = 0 ] && [ "${wrong:-x}" = 0 ] || status=1
  printf '%-10s %-8s %s\n' "$tool" "$([ "${errors:-x}" = 0 ] && echo ok || echo FAIL)" "$summary"
done
[ "$status" = 0 ] || { echo "logs: $LOGS"; tail -n 30 "$LOGS"/*.log; }
exit "$status"
