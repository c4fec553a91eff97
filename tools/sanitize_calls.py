"""The calls ``tools/sanitize.sh`` runs under compute-sanitizer: every kernel family and every
shipped tile config, on shapes with edge tiles and with whole tiles, each result checked.

    python tools/sanitize_calls.py [--quick] [--part K/N] [--list]

1. The tiled GEMM: every config of ``tuned_configs.SEARCH_SPACE`` and ``tiled.DEFAULT_CONFIGS``
   (float32 and float64) on a whole-tile shape and on an edge shape, row-major and with a
   transposed A, and a batch of products with a broadcast operand.
2. The loop orders (``mnk``, ``nmk``, ``kmn``, ``knm``) on an edge shape, and the skinny
   kernel (float32 and float64) with every way it loads its operands, whole steps and edges.
3. The triple product: ``naive``, ``unfused`` and ``fused`` in both orders, the fused kernel under
   each of ``SMALL_FUSED_CONFIGS`` and the tuned tiles, with stream-K where ``fused_workers``
   picks it (N = 1536 on a 132-SM GPU), plus an empty inner dimension (zeros, no product).
4. The tensor-core kernels at their default tiles: ``mma`` under every preset it runs (bf16,
   f16, TF32, and the float32 splits ``BF16_BF16_F32_X3``/``_X6``/``_X9``, ``TF32_TF32_F32_X3``)
   and, on a Hopper GPU, the ``wgmma`` kernels (bf16, f16, TF32, 3xTF32), on an edge shape and
   a whole-tile shape, row-major and with A column-major: their tiles filled by TMA through
   host-encoded tensor maps where the strides allow, by ``cp.async`` elsewhere. Then the
   ``wgmma`` kernel through tensor maps it builds itself on the device (XLA's kernel call,
   launched here on Numba arrays with a workspace), and every split preset on operands with
   infinite elements.

Each case is one call whose result is checked. ``--quick`` keeps one tile config per dtype (a
smoke run); ``--part K/N`` runs the K-th of N contiguous parts of the cases, so that N
processes (one per GPU) share a run; ``--match REGEX`` keeps the cases whose names match;
``--list`` prints the cases. Exits non-zero if any
result is wrong; compute-sanitizer's own exit code reports what it found.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable

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
SPLIT_PRESETS = [name for name, preset in PRESETS.items() if preset.parts > 1]
# A case: (what it computes, a thunk that makes the call and returns what is wrong, or None).
Case = tuple[str, Callable[[], str | None]]


def _within(out, expected: np.ndarray, bound: float) -> str | None:
    """None where ``out`` is ``expected`` (float64) within ``bound`` (relative, Frobenius)."""
    error = relative_error(out, expected)
    return None if error <= bound else f"relative error {error:.3g} > {bound:.3g}"


def _operand(rows, cols, dtype, transposed=False):
    x = RNG.standard_normal((cols, rows) if transposed else (rows, cols)).astype(dtype)
    on_device = cuda.to_device(x)
    if transposed:
        return x.T, numba_gemm.transpose_view(on_device)
    return x, on_device


def tiled(configs_by_dtype) -> list[Case]:
    cases = []
    for dtype, configs in configs_by_dtype.items():
        for config in configs:
            whole = (config.block_m, config.block_n * 2, config.block_k * 4)
            assert whole_tiles(config, *whole)
            for M, N, K in (whole, (config.block_m + 3, config.block_n - 1, config.block_k + 5)):
                for transposed in (False, True):

                    def run(dtype=dtype, config=config, M=M, N=N, K=K, transposed=transposed):
                        (a, a_d), (b, b_d) = (
                            _operand(M, K, dtype, transposed),
                            _operand(K, N, dtype),
                        )
                        out = numba_gemm.matmul(a_d, b_d, algorithm="tiled", config=config)
                        return _within(out, a.astype(np.float64) @ b, tolerance(dtype, K))

                    cases.append((f"tiled {config.label()} {dtype.name} {M}x{N}x{K} T={transposed}",
                                  run))  # fmt: skip

    def batched():  # a batch, b broadcast
        a = RNG.standard_normal((3, 70, 50)).astype(np.float32)
        b = RNG.standard_normal((50, 90)).astype(np.float32)
        out = numba_gemm.matmul(cuda.to_device(a), cuda.to_device(b))
        return _within(out, a.astype(np.float64) @ b, tolerance(np.float32, 50))

    return cases + [("tiled batched", batched)]


def loop_orders() -> list[Case]:
    def run(algorithm):
        (a, a_d), (b, b_d) = _operand(45, 37, np.float32), _operand(37, 70, np.float32)
        out = numba_gemm.matmul(a_d, b_d, algorithm=algorithm)
        return _within(out, a.astype(np.float64) @ b, tolerance(np.float32, 37))

    return [(name, lambda name=name: run(name)) for name in ("mnk", "nmk", "kmn", "knm")]


def skinny() -> list[Case]:
    """The skinny kernel, float32 and float64: every way it loads B (rows, runs along k,
    elements) and A (runs, elements), whole steps and edges, and a result run transposed."""
    shapes = {  # (M, N, K, A transposed)
        "rows": (3, 70, 600, False),  # row-major: B's rows and A's runs in 16-byte loads
        "elements": (16, 45, 37, False),  # rows of 45 and 37 elements: misaligned
        "transposed": (300, 5, 520, False),  # N <= 16: B^T's columns are A's rows
        "a columns": (7, 64, 300, True),  # A column-major: A element by element
    }
    cases = []
    for dtype in (np.float32, np.float64):
        for name, (M, N, K, transposed) in shapes.items():

            def run(dtype=dtype, M=M, N=N, K=K, transposed=transposed):
                (a, a_d), (b, b_d) = _operand(M, K, dtype, transposed), _operand(K, N, dtype)
                out = numba_gemm.matmul(a_d, b_d, algorithm="skinny")
                return _within(out, a.astype(np.float64) @ b, tolerance(dtype, K))

            cases.append((f"skinny {name} {np.dtype(dtype).name} {M}x{N}x{K}", run))
    return cases


def triple(quick: bool) -> list[Case]:
    cases = []
    shapes = [(130, 70, 90, 33), (512, 512, 512, 512)] + ([] if quick else [(1536,) * 4])
    for M, K1, K2, N in shapes:
        runs = [(algorithm, None) for algorithm in ("fused", "unfused")]
        if max(K2, N) <= 1024:
            runs.append(("naive", None))
        if not quick:
            runs += [("fused", config) for config in SMALL_FUSED_CONFIGS[np.dtype(np.float32)]]
        for algorithm, config in runs:
            for order in ("left", "right"):

                def run(M=M, K1=K1, K2=K2, N=N, algorithm=algorithm, config=config, order=order):
                    (a, a_d), (b, b_d), (c, c_d) = (
                        _operand(r, s, np.float32) for r, s in ((M, K1), (K1, K2), (K2, N))
                    )
                    out = numba_gemm.triple(
                        a_d, b_d, c_d, algorithm=algorithm, order=order, config=config
                    )
                    expected = a.astype(np.float64) @ b @ c
                    return _within(out, expected, tolerance(np.float32, K1 + K2))

                label = config and config.label()
                cases.append((f"triple {algorithm} {order} {label} {M}x{K1}x{K2}x{N}", run))

    def zeros():  # K1 = 0: every element 0, no product
        shapes = ((5, 0), (0, 3), (3, 4))
        out = numba_gemm.triple(*(cuda.to_device(np.ones(s, np.float32)) for s in shapes))
        return "not zeros" if np.any(out.copy_to_host()) else None

    return cases + [("triple K1 = 0", zeros)]


def _hopper() -> bool:
    return cuda.get_current_device().compute_capability[0] == 9


def tensor_cores() -> list[Case]:
    runs = [("mma", BFLOAT16, "BF16_BF16_F32"), ("mma", FLOAT16, "F16_F16_F32")]
    runs += [("mma", FLOAT32, preset) for preset in ("TF32_TF32_F32", *SPLIT_PRESETS)]
    if _hopper():
        runs += [
            ("wgmma", dtype, preset)
            for dtype, preset in (
                (BFLOAT16, "BF16_BF16_F32"),
                (FLOAT16, "F16_F16_F32"),
                (FLOAT32, "TF32_TF32_F32"),
                (FLOAT32, "TF32_TF32_F32_X3"),
            )
        ]
    cases = []
    for algorithm, dtype, preset in runs:
        for M, N, K in ((130, 197, 70), (256, 256, 256)):  # cp.async; TMA (host maps)
            for layout in ("row", "a_col"):

                def run(algorithm=algorithm, dtype=dtype, preset=preset, shape=(M, N, K),
                        layout=layout):  # fmt: skip
                    a, b = make_operands(*shape, dtype, layout, RNG, to_device=True)
                    out = poisoned(shape[:2], dtype, to_device=True)
                    numba_gemm.matmul(a, b, out, precision=preset, algorithm=algorithm)
                    bound = preset_tolerance(PRESETS[preset], dtype, shape[2])
                    return _within(out, reference(a, b), bound)

                cases.append((f"{algorithm} {preset} {M}x{N}x{K} {layout}", run))
    if _hopper():
        for dtype in (BFLOAT16, FLOAT32):
            for shape in ((136, 200, 72), (256, 256, 256)):  # edges; whole tiles
                name = f"wgmma device maps {dtype.name} {'x'.join(map(str, shape))}"
                cases.append((name, functools.partial(_device_maps, shape, dtype)))
    for preset in SPLIT_PRESETS:
        algorithms = ("mma", "wgmma") if preset == "TF32_TF32_F32_X3" and _hopper() else ("mma",)
        for algorithm in algorithms:
            run = functools.partial(_infinities, preset, algorithm)
            cases.append((f"{algorithm} {preset} with inf", run))
    return cases


def _device_maps(shape, dtype):
    """The ``wgmma`` kernel as XLA's kernel call runs it: each CTA completes the tensor-map
    templates with the operands' addresses and publishes them to its slots of a workspace."""
    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe
    from numba_gemm.launch import launch_kernel
    from numba_gemm.launch.tensor_maps import map_workspace

    M, N, K = shape
    preset = PRESETS["TF32_TF32_F32" if dtype == FLOAT32 else "BF16_BF16_F32"]
    a, b = make_operands(M, N, K, dtype, "row", RNG, to_device=True)
    out = poisoned((M, N), FLOAT32, to_device=True)
    workspaces = []

    def workspace(nbytes):
        # Zeroed, though each CTA writes its slots before anything reads them: initcheck does
        # not count tensormap.cp_fenceproxy's writes as initialising them, and sees the proxy
        # fence and the TMA unit after it read uninitialised memory (1024 reports of 4-byte
        # reads by warp 0 of every CTA, every result right).
        workspaces.append(cuda.to_device(np.zeros(nbytes, np.uint8)))
        return map_workspace(nbytes, workspaces[-1])

    launch = plan(describe(a, "a"), describe(b, "b"), describe(out, "out"), "wgmma", None,
                  preset, "device", workspace)  # fmt: skip
    launch_kernel(launch)
    return _within(out, reference(a, b), preset_tolerance(preset, dtype, K, FLOAT32))


def _infinities(preset: str, algorithm: str) -> str | None:
    """A split preset on operands with infinite elements: NaN, +inf and -inf exactly where
    NumPy's product has them, the finite elements within the preset's tolerance."""
    a, b = make_operands(70, 130, 96, FLOAT32, "row", RNG)
    a[1, 3], a[2, 5], b[4, 1] = np.inf, -np.inf, np.inf
    out = numba_gemm.matmul(cuda.to_device(a), cuda.to_device(b), precision=preset,
                            algorithm=algorithm).copy_to_host()  # fmt: skip
    with np.errstate(invalid="ignore"):
        expected = a.astype(np.float64) @ b
    special = ~np.isfinite(expected)
    if not (np.isnan(out) == np.isnan(expected)).all() or not np.array_equal(
        out[special], expected[special], equal_nan=True
    ):
        return "NaN or inf where NumPy's product has none, or none where it has"
    return _within(
        out[~special], expected[~special], preset_tolerance(PRESETS[preset], FLOAT32, 96)
    )


def cases(quick: bool) -> list[Case]:
    configs = {
        dtype: (DEFAULT_CONFIGS[dtype],) if quick else (*space, DEFAULT_CONFIGS[dtype])
        for dtype, space in SEARCH_SPACE.items()
    }
    return tiled(configs) + loop_orders() + skinny() + triple(quick) + tensor_cores()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one tile config per dtype")
    parser.add_argument("--part", default="1/1", help="K/N: the K-th of N parts of the cases")
    parser.add_argument("--list", action="store_true", help="print the cases and stop")
    parser.add_argument("--match", help="only the cases (of the part) whose names match REGEX")
    args = parser.parse_args(argv)
    part = re.fullmatch(r"(\d+)/(\d+)", args.part)
    if not part or not 1 <= int(part[1]) <= int(part[2]):
        parser.error(f"--part must be K/N with 1 <= K <= N; got {args.part!r}")
    every = cases(args.quick)
    # Contiguous parts: a config's cases, which share its compiled kernels, stay together.
    size = -(-len(every) // int(part[2]))
    chosen = every[(int(part[1]) - 1) * size : int(part[1]) * size]
    if args.match:
        chosen = [case for case in chosen if re.search(args.match, case[0])]
    if args.list:
        print("\n".join(name for name, _ in chosen))
        return 0
    failures = []
    for name, run in chosen:
        wrong = run()
        if wrong:
            failures.append(f"{name}: {wrong}")
        print(f"checked {name}", flush=True)  # progress: a run cut short shows what it covered
    cuda.synchronize()
    print(f"{len(chosen)} calls checked, {len(failures)} wrong")
    for failure in failures:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
