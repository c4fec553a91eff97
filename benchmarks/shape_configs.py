"""What "auto" picks for each shape of the sweep, against every config it could have picked.

    python benchmarks/shape_configs.py [--cases f32 tf32 bf16] [--classes skinny ...] [--out DIR]

For each row of ``shapes.py`` (its shapes, cases and operands): the user's
``numba_gemm.matmul`` with ``config=`` each candidate (:func:`candidates`) and with the
default config ("auto"), in interleaved rounds with a lead-in (``timing.interleaved_medians``).
Where auto's launch is one of the candidates' (same kernel, grid, block and shared memory),
auto's time is that candidate's. cuBLAS is timed apart, in rounds of its own against auto:
a method timed right after ``torch.matmul`` in a round can read several percent slower
(``timing_order.py``), which would bias auto against its candidates. Each candidate's result
is checked against float64 first; one that fails is recorded with its error and not timed.

Candidates, in the frame the kernel computes (TF32 with row-major operands runs as
C^T = B^T A^T, so its M and N swap):

- float32 exactly (the tiled kernel): the tiles "auto" plans with (the 16 x 128 narrow tiles
  from 2 to 16 rows, else the tuned ones) with 1 to 16 CTAs per tile, and the skinny kernel
  for a matrix-vector product;
- TF32 and bf16 (the wgmma kernel): the tile shapes of :func:`_wgmma_tiles`, each with 1 to
  16 CTAs per tile where the tiles are few enough for a split to fit two waves, and the
  persistent kernel's tiles and the warp-specialised form's (one CTA per tile's k); bf16
  matrix-vector products also on the skinny kernel.

Each row records ``auto`` (which candidate "auto"'s launch is, where it is one), every
candidate's seconds, the ``best`` and ``auto_over_best`` (auto's time over the best's: the
issue's target is at most 1.05 on every row). Writes ``<out>/shape_configs/<device>.json``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import shapes

K_CTAS = (1, 2, 4, 8, 16)
AUTO_WITHIN = 1.05  # auto's time over the best candidate's that counts as a match


def _wgmma_tiles(case: str) -> tuple:
    """The wgmma tile shapes to time for ``case``: "auto"'s and their neighbours, the
    persistent kernel's (as many CTAs per SM as fit their memory) and the default tiles in the
    persistent warp-specialised kernel (refused where TMA cannot copy the operands or store
    C)."""
    from numba_gemm.kernels import hopper as wgmma

    tiles = (
        wgmma.DEFAULT_WGMMA_CONFIG, wgmma.TALL_WGMMA_CONFIG, wgmma.SMALL_WGMMA_CONFIG,
        wgmma.SHORT_K_WGMMA_CONFIG, wgmma.WgmmaConfig(64, 128, 3, 8),
        wgmma.WgmmaConfig(64, 128, 6, 8), wgmma.WgmmaConfig(128, 64, 6, 8),
        wgmma.TINY_WGMMA_CONFIG,
    )  # fmt: skip
    persistent = (wgmma.WgmmaConfig(64, 128, 3, 8, persistent=2),
                  wgmma.WgmmaConfig(128, 128, 3, 8, persistent=1),
                  wgmma.WARP_SPECIALISED_WGMMA_CONFIG)  # fmt: skip
    if case == "tf32":
        return tiles + persistent
    return (
        tiles
        + persistent
        + (
            wgmma.WgmmaConfig(128, 64, 3, 8, persistent=2),
            wgmma.WgmmaConfig(128, 128, 4, 8, persistent=1),
        )
    )


def candidates(case: str, shape: tuple, sms: int) -> list[tuple[str, object]]:
    """``(algorithm, config)`` pairs to time for ``shape`` (class, batch, M, N, K) under
    ``case`` on a GPU of ``sms`` SMs: splits only where tiles x CTAs per tile stay within two
    waves of one CTA per SM (four for the narrow tiles, which share SMs) and every CTA gets
    :data:`split_k.MIN_STEPS_PER_CTA` steps."""
    import numpy as np

    from numba_gemm.kernels.split_k import MIN_STEPS_PER_CTA
    from numba_gemm.kernels.tiled import NARROW_CONFIGS, NARROW_M
    from numba_gemm.kernels.warpgroup import tile_k
    from numba_gemm.launch import cdiv
    from numba_gemm.tuned_configs import config_for_shape

    _, batch, M, N, K = shape
    found = []

    def split(base, block_k, waves):
        tiles = cdiv(M, base.block_m) * cdiv(N, base.block_n) * batch
        for k_ctas in K_CTAS:
            fits = k_ctas == 1 or (
                not (getattr(base, "persistent", 0) or getattr(base, "producers", 0))
                and tiles * k_ctas <= waves * sms
                and cdiv(K, block_k) >= MIN_STEPS_PER_CTA * k_ctas
            )
            if fits:
                found.append(("auto", replace(base, k_ctas=k_ctas)))

    if case == "f32":
        if M == 1:
            found.append(("skinny", None))
        if M <= NARROW_M:
            base = NARROW_CONFIGS[np.dtype(np.float32)]
            split(base, base.block_k, 4)
        else:
            base = config_for_shape(M, N, K)
            split(base, base.block_k * base.split_k, 2)
        return found
    if case == "bf16" and M == 1:  # a matrix-vector product: also the skinny kernel
        found.append(("skinny", None))
    if case == "tf32":  # row-major float32 runs as C^T = B^T A^T
        M, N = N, M
    size = 4 if case == "tf32" else 2
    for base in _wgmma_tiles(case):
        split(base, tile_k(size), 2)
    return found


def _label(algorithm: str, config) -> str:
    return algorithm if config is None else config.label()


def measure(case: str, shape: tuple) -> dict:
    """One row: ``shape`` under ``case``, every candidate against auto and cuBLAS."""
    import numba_gemm
    from numba_gemm.api import describe_matmul, plan, split_k_scratch
    from numba_gemm.launch import multiprocessors
    from numba_gemm.timing import interleaved_medians

    kind, batch, M, N, K = shape
    dtype_name, preset_name, _ = shapes.CASES[case]
    a, b, out, _, precision, cublas = shapes.operands(case, shape)
    reference = a.double() @ b.double()
    bound = shapes.error_bound(case, K)
    product = describe_matmul(a, b, out, precision=precision)
    (part,) = product.parts  # (a, b, out) of the one launch, the batch folded into it

    def launch_of(algorithm, config):
        return plan(*part, algorithm, config, product.preset, scratch=split_k_scratch(0))

    def call_of(algorithm, config):
        def call():
            numba_gemm.matmul(a, b, out, precision=precision, algorithm=algorithm, config=config)

        return call

    auto = launch_of("auto", None)
    fns, errors, auto_is = {}, {}, None
    for algorithm, config in [("auto", None)] + candidates(case, shape, multiprocessors()):
        name = "auto" if (algorithm, config) == ("auto", None) else _label(algorithm, config)
        call = call_of(algorithm, config)
        try:
            launch = launch_of(algorithm, config)
            out.fill_(float("nan"))
            call()
        except ValueError as error:  # a config this shape or device cannot take
            errors[name] = f"refused: {error}"
            continue
        errors[name] = shapes.relative_errors((out,), reference)[0]
        if not errors[name] <= bound:
            errors[name] = f"error {errors[name]:.1e} above {bound:.1e}"
            continue
        same = (launch.kernel, launch.grid, launch.block, launch.shared)
        if name != "auto" and same == (auto.kernel, auto.grid, auto.block, auto.shared):
            auto_is = name
            fns.pop("auto", None)  # auto is timed as its twin
        fns[name] = call
    medians = interleaved_medians(fns, rounds=5, round_s=0.02, lead_in=0.5).medians
    auto_s = medians[auto_is] if auto_is else medians.pop("auto")
    against = interleaved_medians({"cublas": cublas, "auto": call_of("auto", None)}, rounds=5,
                                  round_s=0.02).medians  # fmt: skip
    best, best_s = auto_is or "auto", auto_s  # auto itself, unless a candidate beats it
    if medians and min(medians.values()) < best_s:
        best = min(medians, key=medians.get)
        best_s = medians[best]
    return {
        "class": kind, "M": M, "N": N, "K": K, "batch": batch, "dtype": dtype_name,
        "precision": preset_name, "auto": auto_is, "auto_s": auto_s,
        "best": best, "best_s": best_s, "auto_over_best": auto_s / best_s,
        "cublas_s": against["cublas"], "auto_against_cublas_s": against["auto"],
        "candidates": medians,
        "failed": {name: e for name, e in errors.items() if isinstance(e, str)},
    }  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(shapes.CASES),
                        choices=list(shapes.CASES))  # fmt: skip
    parser.add_argument("--classes", nargs="+", default=list(shapes.CLASSES),
                        choices=list(shapes.CLASSES))  # fmt: skip
    parser.add_argument("--out", help="write <out>/shape_configs/<device>.json")
    args = parser.parse_args(argv)
    from numba_gemm.timing import device_name, stack_versions, write_results

    rows = []
    for case in args.cases:
        for shape in shapes.SHAPES:
            if shape[0] not in args.classes:
                continue
            row = measure(case, shape)
            rows.append(row)
            if args.out:  # after every row: a run cut short keeps what it measured
                within = sum(r["auto_over_best"] <= AUTO_WITHIN for r in rows)
                write_results(args.out, device_name(), "shape_configs", {
                    "stack": stack_versions("torch"), "auto_within": AUTO_WITHIN,
                    "rows_auto_within": within, "rows": rows,
                })  # fmt: skip
            size = f"{row['batch']} x " if row["batch"] > 1 else ""
            print(
                f"{case:4s} {size}{row['M']} x {row['N']} x {row['K']}: auto "
                f"({row['auto'] or 'not a candidate'}) {row['auto_s'] * 1e6:.1f} us, best "
                f"{row['best']} {row['best_s'] * 1e6:.1f} us: {row['auto_over_best']:.2f}; "
                f"cuBLAS {row['cublas_s'] * 1e6:.1f} us"
                + (f"; failed: {row['failed']}" if row["failed"] else ""),
                flush=True,
            )
    within = sum(r["auto_over_best"] <= AUTO_WITHIN for r in rows)
    print(f"auto within {AUTO_WITHIN - 1:.0%} of the best candidate on {within} of {len(rows)}")


if __name__ == "__main__":
    main()
