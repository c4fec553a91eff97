"""Programmatic dependent launch on and off: back-to-back calls, N = 256 to 2048.

    python benchmarks/launch_overlap.py [--sizes 256 512 ...] [--results DIR]

On a GPU of compute capability 9.0 or later the tiled and fused kernels wait for the launch
ahead of them (``griddepcontrol.wait``) and are launched with programmatic stream
serialization, so that a launch starts as the last CTAs of the one ahead exit
(``numba_gemm.launch.devices.OVERLAP_LAUNCHES``, ``docs/design/launch-and-timing.md``). For
each size and each of ``numba_gemm.triple`` fused and unfused and ``numba_gemm.matmul``'s tiled
kernel, on N x N float32 operands, this prepares one call with ``OVERLAP_LAUNCHES`` off and one
with it on (each on its own arrays, so each keeps its own prepared launches), checks both against
float64 with a poisoned output, and times them through the public calls in interleaved rounds
(``numba_gemm.timing.interleaved_medians``: round r of every variant before round r + 1 of any).
Writes ``<DIR>/launch_overlap/<device>.json`` and prints a table last.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

SIZES = (256, 512, 1024, 2048)
ROUNDS, ROUND_S, WARMUP = 15, 0.02, 3
METHODS = ("fused", "unfused", "matmul")


def _call(method: str, arrays: tuple):
    """The public call that ``method`` names, on ``arrays`` (operands, then the output)."""
    import numba_gemm

    if method == "matmul":
        a, b, _, out = arrays
        return lambda: numba_gemm.matmul(a, b, out, algorithm="tiled")
    a, b, c, out = arrays
    return lambda: numba_gemm.triple(a, b, c, out, algorithm=method)


def measure(n: int, rng) -> list[dict]:
    from numba import cuda

    from numba_gemm.launch import devices
    from numba_gemm.prepared import PREPARED_CAPACITY, forget_prepared_calls
    from numba_gemm.reference import reference, relative_error, tolerance
    from numba_gemm.timing import host_seconds, interleaved_medians

    host = [rng.standard_normal((n, n)).astype(np.float32) for _ in range(3)]
    references = {"matmul": reference(host[0], host[1])}
    references["fused"] = references["unfused"] = references["matmul"] @ host[2]
    # Each variant's calls are prepared (planned) under its setting and launched from the
    # prepared-calls caches afterwards, whatever the setting then: at most 4 entries per cache.
    assert PREPARED_CAPACITY >= 2 * 2
    forget_prepared_calls()
    fns, errors = {}, {}
    for overlap in (False, True):
        devices.OVERLAP_LAUNCHES = overlap
        for method in METHODS:
            arrays = (
                *(cuda.to_device(x) for x in host),
                cuda.to_device(np.full((n, n), np.nan, np.float32)),
            )  # poison
            fn = _call(method, arrays)
            fn()  # prepares under this setting
            error = relative_error(arrays[3], references[method])
            if not error <= 2 * tolerance(np.float32, n):
                raise AssertionError(
                    f"{method} at N = {n}, overlap {overlap}: relative error {error:.3e}"
                )
            fns[method, overlap], errors[method, overlap] = fn, error
    devices.OVERLAP_LAUNCHES = True
    programmatic = devices.programmatic_launch()
    medians, rounds, calls = interleaved_medians(fns, rounds=ROUNDS, round_s=ROUND_S, warmup=WARMUP)
    rows = []
    for method in METHODS:
        plain, overlapped = (method, False), (method, True)
        ratios = [p / o for p, o in zip(rounds[plain], rounds[overlapped])]
        row = {
            "size": n,
            "method": method,
            "programmatic": programmatic,
            "plain_s": medians[plain],
            "overlapped_s": medians[overlapped],
            "speedup": medians[plain] / medians[overlapped],
            "round_speedups": [min(ratios), max(ratios)],
            "calls_per_round": [calls[plain], calls[overlapped]],
            "plain_host_s": host_seconds(fns[plain]),
            "overlapped_host_s": host_seconds(fns[overlapped]),
            "relative_errors": [errors[plain], errors[overlapped]],
        }
        rows.append(row)
        print(
            f"N = {n:5d}  {method:8s} plain {row['plain_s'] * 1e6:9.2f} us  overlapped "
            f"{row['overlapped_s'] * 1e6:9.2f} us  {row['speedup']:.3f}x",
            flush=True,
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from numba_gemm.timing import device_name, stack_versions, write_results

    rng = np.random.default_rng(args.seed)
    rows = [row for n in args.sizes for row in measure(n, rng)]
    device = device_name()
    path = write_results(
        args.results,
        device,
        "launch_overlap",
        {
            "versions": stack_versions(),
            "timing": f"median over {ROUNDS} rounds (about {ROUND_S * 1e3:.0f} ms each, calls per "
            "round calibrated on the fastest of three batches) of back-to-back public "
            "calls, per call, plain and overlapped rounds interleaved; CUDA events after a "
            "context-wide synchronize (numba_gemm.timing); float32. host_s: the host's "
            "time per call alone (numba_gemm.timing.host_seconds)",
            "rows": rows,
        },
    )

    print(
        f"\nBack-to-back calls on {device}: plain launches against programmatic dependent "
        f"launch ({'on' if rows and rows[0]['programmatic'] else 'not available'} here)"
    )
    print(
        f"{'N':>5} {'method':8} {'plain us':>9} {'overl. us':>9} {'speed-up':>9} "
        f"{'rounds':>13} {'host us':>13}"
    )
    for r in rows:
        print(
            f"{r['size']:5d} {r['method']:8} {r['plain_s'] * 1e6:9.2f} "
            f"{r['overlapped_s'] * 1e6:9.2f} {r['speedup']:8.3f}x "
            f"{r['round_speedups'][0]:6.3f}-{r['round_speedups'][1]:.3f} "
            f"{r['plain_host_s'] * 1e6:6.1f}/{r['overlapped_host_s'] * 1e6:.1f}"
        )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
