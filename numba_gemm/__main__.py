"""``python -m numba_gemm demo | model | tune | bench``.

- ``demo``: run every algorithm on random inputs in several layouts, check it
  against NumPy float64 and print error, time and TFLOP/s. Without a GPU it
  says so and runs on the Numba CUDA simulator at a small size.
- ``model``: print seed 001's traffic table (4 loop orders x 3 cache scenarios).
- ``tune``: time the tiled kernel's config space for one shape on this GPU and
  store the winner in the tuning cache (``numba_gemm.autotune``).
- ``bench``: the results table and plot from the committed benchmark JSON.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import sys


def gpu_present() -> bool:
    """Whether the CUDA driver sees a GPU, asked without importing Numba."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return (
        libcuda.cuInit(0) == 0
        and libcuda.cuDeviceGetCount(ctypes.byref(count)) == 0
        and count.value > 0
    )


def _use_simulator_without_gpu() -> bool:
    """Select the simulator (before Numba loads) when there is no GPU; True if simulated.
    Simulated kernels take host buffers, so JAX then runs on the CPU too."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        if gpu_present():
            return False
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    return True


def demo(args) -> int:
    simulated = _use_simulator_without_gpu()
    import numpy as np

    from . import ALGORITHMS, choose_algorithm, describe, matmul
    from .api import TENSOR_CORE_ALGORITHMS
    from .kernels.hopper import WGMMA_CC
    from .launch import compute_capability
    from .precision import BFLOAT16, resolve
    from .precision import tolerance as preset_tolerance
    from .reference import make_operands, poisoned, reference, relative_error
    from .timing import median_seconds

    if simulated:
        print(
            "No CUDA GPU found: running on the Numba CUDA simulator (slow, small sizes, "
            "times are the simulator's)."
        )
        size, reps = args.size or 24, 1
    else:
        from .timing import device_name

        print(f"GPU: {device_name()}")
        size, reps = args.size or 1024, 5
    M, N, K = size, size + 3, size - 5 if size > 8 else size  # non-square, odd: edges are exercised
    rng = np.random.default_rng(args.seed)
    layouts = ("row", "col", "a_col", "b_col")
    rate = "" if simulated else f" {'TFLOP/s':>8}"  # the simulator's times measure Python
    header = (
        f"{'algorithm':12} {'M x N x K':>16} {'layout':7} {'rel. error':>10} {'time':>10}{rate}"
    )
    print(header)
    print("-" * len(header))
    checks, failures = 0, 0
    # (algorithm, operand dtype, precision, rows of C): the FFMA algorithms in float32 (the
    # skinny kernel on one row: a decode step's token), the tensor cores in bfloat16 and at
    # float32 accuracy from TF32 products (also on wgmma on Hopper and the simulator)
    runs = [
        (a, np.float32, None, 1 if a == "skinny" else M)
        for a in ALGORITHMS
        if a not in TENSOR_CORE_ALGORITHMS[1:]
    ]
    runs += [("mma", BFLOAT16, None, M), ("mma", np.float32, "TF32_TF32_F32_X3", M)]
    cc = compute_capability()
    if cc is None or cc[0] == WGMMA_CC[0]:
        runs += [("wgmma", BFLOAT16, None, M), ("wgmma", np.float32, "TF32_TF32_F32_X3", M)]
    for algorithm, dtype, precision, rows in runs:
        for layout in layouts:
            a, b = make_operands(rows, N, K, dtype, layout, rng, to_device=not simulated)
            out = poisoned((rows, N), dtype, to_device=not simulated, layout=layout)
            run = functools.partial(matmul, a, b, out, algorithm=algorithm, precision=precision)
            seconds = median_seconds(run, warmup=1, reps=reps)
            error = relative_error(out, reference(a, b))
            preset = resolve(precision, dtype)
            if algorithm == "auto":
                name = f"auto:{choose_algorithm(describe(a), describe(b))}"
            elif preset.tensor_cores:
                short = {"BF16_BF16_F32": "bf16", "TF32_TF32_F32_X3": "3xtf32"}[preset.name]
                name = f"{algorithm}:{short}"
            else:
                name = algorithm
            ok = error <= preset_tolerance(preset, dtype, K)
            checks, failures = checks + 1, failures + (not ok)
            print(
                f"{name:12} {f'{rows} x {N} x {K}':>16} {layout:7} {error:10.2e} "
                f"{_rate(seconds, rows, N, K, simulated)}{'' if ok else '  FAILED'}"
            )
    print(
        "layouts: row = A, B, C row-major; col = all column-major (transposed views); "
        "a_col / b_col = only A / only B column-major; mma:bf16 / wgmma:bf16 = bfloat16 "
        "operands on the tensor cores through mma.sync / Hopper's wgmma, mma:3xtf32 / "
        "wgmma:3xtf32 = float32 accuracy from three TF32 products"
    )
    for more_checks, more_failures in (
        _demo_triple(size, rng, simulated, reps),
        _demo_bridge(M, N, K, rng, simulated, reps),
    ):
        checks, failures = checks + more_checks, failures + more_failures
    if failures:
        print(f"\nFAILED: {failures} of {checks} results outside their tolerance (marked above)")
    else:
        print(f"\nPASSED: all {checks} results within their tolerance of float64 NumPy")
    return 1 if failures else 0


def _rate(seconds: float, M: int, N: int, K: int, simulated: bool) -> str:
    """The time column, and on a GPU the TFLOP/s column, of a demo row."""
    time = f"{seconds * 1e3:8.3f}ms"
    return time if simulated else f"{time} {2 * M * N * K / seconds / 1e12:8.3g}"


def _demo_triple(size: int, rng, simulated: bool, reps: int) -> tuple[int, int]:
    """Seed 003's triple product D = A @ B @ C, every algorithm and order, on a rectangular
    chain; returns (results checked, failures)."""
    import numpy as np

    from . import triple
    from .reference import (
        make_triple_operands,
        poisoned,
        relative_error,
        tolerance,
        triple_reference,
    )
    from .timing import median_seconds
    from .triple_product import TRIPLE_ALGORITHMS, choose_order, choose_triple_algorithm

    M, K1, K2, N = size, size // 2 + 1, size + 7, size - 3 if size > 8 else size
    print(
        f"\ntriple product D = A @ B @ C (seed 003), A {M} x {K1}, B {K1} x {K2}, C {K2} x {N}; "
        f"order='auto' picks {choose_order(M, K1, K2, N)}"
    )
    header = f"{'algorithm':12} {'order':6} {'layout':7} {'rel. error':>10} {'time':>10}"
    print(header)
    print("-" * len(header))
    checks, failures = 0, 0
    for algorithm in TRIPLE_ALGORITHMS:
        for order in ("left", "right"):
            for layout in ("row", "mixed"):
                a, b, c = make_triple_operands(
                    M, K1, K2, N, np.float32, layout, rng, to_device=not simulated
                )
                out = poisoned((M, N), np.float32, to_device=not simulated)
                try:
                    run = functools.partial(triple, a, b, c, out, algorithm=algorithm, order=order)
                    seconds = median_seconds(run, warmup=1, reps=reps)
                except ValueError as refusal:
                    if algorithm != "naive":
                        raise
                    # Seed 003's kernel runs one thread per column: past 1024 it refuses, as
                    # documented (at the GPU's default size, K2 = 1031).
                    print(f"{algorithm:12} {order:6} {layout:7} refused: {refusal}")
                    continue
                error = relative_error(out, triple_reference(a, b, c))
                ok = error <= tolerance(np.float32, K1) + tolerance(np.float32, K2)
                checks, failures = checks + 1, failures + (not ok)
                sizes = (M, K1, K2, N) if order == "left" else (N, K2, K1, M)
                name = (
                    f"auto:{choose_triple_algorithm(*sizes)}" if algorithm == "auto" else algorithm
                )
                print(
                    f"{name:12} {order:6} {layout:7} {error:10.2e} "
                    f"{seconds * 1e3:8.3f}ms{'' if ok else '  FAILED'}"
                )
    print("layouts: row = all row-major; mixed = A column-major, B strided, C row-major")
    return checks, failures


def _demo_bridge(M: int, N: int, K: int, rng, simulated: bool, reps: int) -> tuple[int, int]:
    """The same products through ``jax_bridge`` inside ``jax.jit``; returns (results checked,
    failures)."""
    import jax
    import numpy as np

    import jax_bridge

    from .reference import relative_error, tolerance
    from .timing import median_seconds

    lowerings = ("simulator",) if simulated else jax_bridge.LOWERINGS
    print(
        f"\njax_bridge.matmul inside jax.jit (JAX on {jax.default_backend()}; transposes are "
        "flags, read through strides)"
    )
    rate = "" if simulated else f" {'TFLOP/s':>8}"
    header = f"{'lowering':9} {'M x N x K':>16} {'flags':7} {'rel. error':>10} {'time':>10}{rate}"
    print(header)
    print("-" * len(header))
    checks, failures = 0, 0
    for lowering in lowerings:
        for transpose_a, transpose_b in (
            (False, False),
            (True, True),
            (True, False),
            (False, True),
        ):
            a = rng.standard_normal((K, M) if transpose_a else (M, K)).astype(np.float32)
            b = rng.standard_normal((N, K) if transpose_b else (K, N)).astype(np.float32)
            fn = jax.jit(
                functools.partial(
                    jax_bridge.matmul,
                    transpose_a=transpose_a,
                    transpose_b=transpose_b,
                    lowering="native" if lowering == "simulator" else lowering,
                )
            )
            x, y = jax.device_put(a), jax.device_put(b)
            run = functools.partial(_blocked, fn, x, y)
            seconds = median_seconds(run, warmup=1, reps=reps)
            ref = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b)
            error = relative_error(fn(x, y), ref)
            ok = error <= tolerance(np.float32, K)
            checks, failures = checks + 1, failures + (not ok)
            flags = f"{'T' if transpose_a else 'N'}{'T' if transpose_b else 'N'}"
            print(
                f"{lowering:9} {f'{M} x {N} x {K}':>16} {flags:7} {error:10.2e} "
                f"{_rate(seconds, M, N, K, simulated)}{'' if ok else '  FAILED'}"
            )
    print("flags: N / T = a, b as stored / transposed (transpose_a, transpose_b)")
    return checks, failures


def _blocked(fn, *args):
    """``fn(*args)``, waited for: a jitted call's time includes its GPU work."""
    return fn(*args).block_until_ready()


# model --simulate executes every loop nest over a simulated cache, in Python: its time grows
# faster than M N K (16^3 takes about a second, 24^3 ten), so larger problems are refused.
SIMULATE_MAX_MACS = 16**3


def model(args) -> int:
    from .model import format_table, simulate, traffic
    from .model.traffic import CACHES, ORDERS

    if args.simulate and args.M * args.N * args.K > SIMULATE_MAX_MACS:
        print(
            f"--simulate executes every loop nest in Python, which at {args.M} x {args.N} x "
            f"{args.K} would take hours: give M N K <= {SIMULATE_MAX_MACS} (e.g. --M 16 --N 16 "
            "--K 16); the table alone needs no --simulate",
            file=sys.stderr,
        )
        return 2
    print(format_table(args.M, args.N, args.K))
    if args.simulate:
        for order in ORDERS:
            for cache in CACHES:
                if traffic(order, args.M, args.N, args.K, cache) != simulate(
                    order, args.M, args.N, args.K, cache
                ):
                    print(f"MISMATCH: {order} {cache}")
                    return 1
        print("simulate() executed every nest and agrees with every row")
    return 0


def tune(args) -> int:
    if _use_simulator_without_gpu():
        print("tune times kernels on a GPU, and none was found", file=sys.stderr)
        return 2
    from .autotune import cache_path
    from .autotune import tune as run_tune

    M = args.M or args.size
    N, K = args.N or M, args.K or M
    run_tune(M, N, K, args.dtype, args.layout, save=args.cache or True)
    print(f"stored in {args.cache or cache_path()}")
    return 0


def bench(args) -> int:
    from .report import main as report

    return report(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m numba_gemm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="run and check every algorithm, print a table")
    p_demo.add_argument(
        "--size", type=int, default=None, help="M (default 1024 on a GPU, 24 simulated)"
    )
    p_demo.add_argument("--seed", type=int, default=0)
    p_demo.set_defaults(func=demo)
    p_model = sub.add_parser("model", help="print seed 001's traffic table")
    p_model.add_argument("--M", type=int, default=2048)
    p_model.add_argument("--N", type=int, default=2048)
    p_model.add_argument("--K", type=int, default=2048)
    p_model.add_argument(
        "--simulate",
        action="store_true",
        help="also execute each loop nest and check the closed forms (M N K up to 16^3, e.g. "
        "--M 16 --N 16 --K 16)",
    )
    p_model.set_defaults(func=model)
    p_tune = sub.add_parser("tune", help="autotune the tiled kernel for one shape on this GPU")
    p_tune.add_argument("--size", type=int, default=4096, help="M = N = K unless given apart")
    p_tune.add_argument("--M", type=int, default=None)
    p_tune.add_argument("--N", type=int, default=None)
    p_tune.add_argument("--K", type=int, default=None)
    p_tune.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p_tune.add_argument("--layout", default="row", help="row, col, a_col, b_col or sliced")
    p_tune.add_argument(
        "--cache", default=None, help="JSON cache to update (default: the user cache)"
    )
    p_tune.set_defaults(func=tune)
    p_bench = sub.add_parser("bench", help="results table and plot from benchmarks/results/*.json")
    p_bench.add_argument(
        "--results",
        default=None,
        help="a results JSON file or folder (default: benchmarks/results)",
    )
    p_bench.add_argument("--device", default=None, help="only rows measured on this device")
    p_bench.add_argument(
        "--algorithm",
        action="append",
        default=None,
        help="only this algorithm (repeatable; jnp.matmul is cuBLAS)",
    )
    p_bench.add_argument(
        "--plot",
        default=None,
        help="write a PNG of TFLOP/s against size (needs matplotlib: the 'plot' extra)",
    )
    p_bench.add_argument(
        "--readme",
        action="store_true",
        help="print the README's Performance table (newest run of each suite); with --plot, "
        "draw its plot",
    )
    p_bench.set_defaults(func=bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
