"""The calls ``tools/sanitize.sh`` runs under compute-sanitizer: every kernel family and every
shipped tile config, on shapes with edge tiles and with whole tiles, each result checked.

    python tools/sanitize_calls.py [--quick]

1. The tiled GEMM: every config of ``tuned_configs.SEARCH_SPACE`` and ``tiled.DEFAULT_CONFIGS``
   (float32 and float64) on a whole-tile shape and on an edge shape, row-major and with a
   transposed A, and a batch of products with a broadcast operand.
2. The loop orders (``mnk``, ``nmk``, ``kmn``, ``knm``) on an edge shape.
3. The triple product: ``naive``, ``unfused`` and ``fused`` in both orders, the fused kernel under
   each of ``SMALL_FUSED_CONFIGS`` and the tuned tiles, with stream-K where ``fused_workers``
   picks it (N = 1536 on a 132-SM GPU), plus an empty inner dimension (zeros, no product).
4. The tensor-core kernels at their default tiles: ``mma`` (bf16, TF32, 3xTF32, the bf16
   six-product split) and, on a Hopper GPU, both ``wgmma`` kernels (bf16, f16, TF32, 3xTF32),
   on an edge shape and a whole-tile shape, row-major and with A column-major.

``--quick`` keeps one config per dtype (for a smoke run). Exits non-zero if any result is wrong;
compute-sanitizer's own exit code reports what it found.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from numba import cuda

import numba_gemm
from numba_gemm.kernels.tiled import DEFAULT_CONFIGS, whole_tiles
from numba_gemm.precision import BFLOAT16, FLOAT16, FLOAT32, PRESETS
from numba_gemm.precision import tolerance as preset_tolerance
from numba_gemm.reference import (
    make_operands,
    poisoned,
    reference,
    relative_error,
    tolerance,
)
from numba_gemm.triple_product import SMALL_FUSED_CONFIGS
from numba_gemm.tuned_configs import SEARCH_SPACE

RNG = np.random.default_rng(0)


def _operand(rows, cols, dtype, transposed=False):
    x = RNG.standard_normal((cols, rows) if transposed else (rows, cols)).astype(dtype)
    on_device = cuda.to_device(x)
    if transposed:
        return x.T, numba_gemm.transpose_view(on_device)
    return x, on_device


def _check(what: str, result, expected, bound: float, failures: list) -> None:
    error = relative_error(result, expected)
    if not error <= bound:
        failures.append(f"{what}: relative error {error:.3g}")
    print(f"checked {what}", flush=True)  # progress: a run cut short shows what it covered


def tiled(configs_by_dtype, failures: list) -> int:
    calls = 0
    for dtype, configs in configs_by_dtype.items():
        for config in configs:
            whole = (config.block_m, config.block_n * 2, config.block_k * 4)
            for M, N, K in (whole, (config.block_m + 3, config.block_n - 1, config.block_k + 5)):
                assert whole_tiles(config, *whole)
                for transposed in (False, True):
                    (a, a_d), (b, b_d) = _operand(M, K, dtype, transposed), _operand(K, N, dtype)
                    out = numba_gemm.matmul(a_d, b_d, algorithm="tiled", config=config)
                    what = f"tiled {config.label()} {dtype.name} {M}x{N}x{K} T={transposed}"
                    _check(what, out, a.astype(np.float64) @ b, tolerance(dtype, K), failures)
                    calls += 1
    a = RNG.standard_normal((3, 70, 50)).astype(np.float32)
    b = RNG.standard_normal((50, 90)).astype(np.float32)
    out = numba_gemm.matmul(cuda.to_device(a), cuda.to_device(b))  # a batch, b broadcast
    _check("batched", out, a.astype(np.float64) @ b, tolerance(np.float32, 50), failures)
    return calls + 1


def loop_orders(failures: list) -> int:
    (a, a_d), (b, b_d) = _operand(45, 37, np.float32), _operand(37, 70, np.float32)
    for algorithm in ("mnk", "nmk", "kmn", "knm"):
        out = numba_gemm.matmul(a_d, b_d, algorithm=algorithm)
        _check(algorithm, out, a.astype(np.float64) @ b, tolerance(np.float32, 37), failures)
    return 4


def triple(quick: bool, failures: list) -> int:
    calls = 0
    shapes = [(130, 70, 90, 33), (512, 512, 512, 512)] + ([] if quick else [(1536,) * 4])
    for M, K1, K2, N in shapes:
        (a, a_d), (b, b_d), (c, c_d) = (
            _operand(r, s, np.float32) for r, s in ((M, K1), (K1, K2), (K2, N))
        )
        expected = a.astype(np.float64) @ b @ c
        runs = [(algorithm, None) for algorithm in ("fused", "unfused")]
        if max(K2, N) <= 1024:
            runs.append(("naive", None))
        if not quick:
            runs += [("fused", config) for config in SMALL_FUSED_CONFIGS[np.dtype(np.float32)]]
        for algorithm, config in runs:
            for order in ("left", "right"):
                out = numba_gemm.triple(
                    a_d, b_d, c_d, algorithm=algorithm, order=order, config=config
                )
                what = f"triple {algorithm} {order} {config and config.label()} {M}x{K1}x{K2}x{N}"
                _check(what, out, expected, tolerance(np.float32, K1 + K2), failures)
                calls += 1
    zeros = numba_gemm.triple(
        *(cuda.to_device(np.ones(s, np.float32)) for s in ((5, 0), (0, 3), (3, 4)))
    )
    if np.any(zeros.copy_to_host()):
        failures.append("triple with K1 = 0 is not zeros")
    return calls + 1


def tensor_cores(failures: list) -> int:
    cases = [
        ("mma", BFLOAT16, "BF16_BF16_F32"),
        ("mma", FLOAT32, "TF32_TF32_F32"),
        ("mma", FLOAT32, "TF32_TF32_F32_X3"),
        ("mma", FLOAT32, "BF16_BF16_F32_X6"),
    ]
    if cuda.get_current_device().compute_capability[0] == 9:
        cases += [
            ("wgmma", dtype, preset)
            for dtype, preset in (
                (BFLOAT16, "BF16_BF16_F32"),
                (FLOAT16, "F16_F16_F32"),
                (FLOAT32, "TF32_TF32_F32"),
                (FLOAT32, "TF32_TF32_F32_X3"),
            )
        ]
    calls = 0
    for algorithm, dtype, preset in cases:
        for M, N, K in ((130, 197, 70), (256, 256, 256)):
            for layout in ("row", "a_col"):
                a, b = make_operands(M, N, K, dtype, layout, RNG, to_device=True)
                out = poisoned((M, N), dtype, to_device=True)
                numba_gemm.matmul(a, b, out, precision=preset, algorithm=algorithm)
                bound = preset_tolerance(PRESETS[preset], dtype, K)
                what = f"{algorithm} {preset} {M}x{N}x{K} {layout}"
                _check(what, out, reference(a, b), bound, failures)
                calls += 1
    return calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one tile config per dtype")
    args = parser.parse_args(argv)
    configs = {
        dtype: (DEFAULT_CONFIGS[dtype],) if args.quick else (*space, DEFAULT_CONFIGS[dtype])
        for dtype, space in SEARCH_SPACE.items()
    }
    failures: list = []
    calls = tiled(configs, failures) + loop_orders(failures) + triple(args.quick, failures)
    calls += tensor_cores(failures)
    cuda.synchronize()
    print(f"{calls} calls checked, {len(failures)} wrong")
    for failure in failures:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
