"""Every shape class against cuBLAS: the user's ``numba_gemm.matmul`` on PyTorch tensors
against ``torch.matmul`` at the same precision, in the same run.

    python benchmarks/shapes.py [--cases f32 tf32 bf16] [--classes skinny ...] [--out DIR]

**Shapes** (:data:`SHAPES`, by class):

- ``skinny`` and ``square-ish``: M in {1, 16, 128, 1024, 8192} against a model's projections,
  (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)}: one token of a decode
  step up to a prefill's batch (M <= 16 is skinny: bound by reading B once);
- ``small-k``: 8192 x 8192 x 64; ``large-k``: 1024 x 1024 x 65536 (a small output over a long
  k loop); ``tall-skinny``: 65536 x 256 x 1024;
- ``batched``: attention-like products, batch 64 of 2048 x 2048 x 128 (scores) and of
  2048 x 128 x 2048 (scores @ values).

**Cases** (:data:`CASES`): ``f32``, float32 exactly (the FFMA kernels; cuBLAS with TF32 off);
``tf32``, float32 at ``TF32_TF32_F32`` (cuBLAS TF32); ``bf16``, bfloat16 operands and result
(cuBLAS bf16). Row-major operands, a fresh random draw per row.

**Timing**: interleaved rounds of back-to-back calls on the CUDA event clock
(``numba_gemm.timing.interleaved_medians``), after each result is checked against a float64
product (``numba_gemm.precision.tolerance``; a row that fails is written with its error and
no times). Skinny rows (M <= 16) also report ``bandwidth_fraction``: the bytes the product
must move (A and B read once, C written once) per second of our call, over the device's copy
bandwidth measured in the same run (bytes read plus bytes written by a 2 GiB device-to-device
copy).

Writes ``<out>/shapes/<device>.json``: ``device``, ``copy_bandwidth_bytes_per_s`` and
``rows``, each ``{"class", "M", "N", "K", "batch", "dtype", "precision", "ours_s", "cublas_s",
"ratio", "error", "cublas_error", "bandwidth_fraction"}`` with ``ratio = cublas_s / ours_s``
(``bandwidth_fraction`` None where M > 16).
"""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

import numpy as np

SKINNY_M = 16  # M up to this is bound by reading B once
PROJECTIONS = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))


def _shapes() -> list[tuple[str, int, int, int, int]]:
    """(class, batch, M, N, K) of every row, in order."""
    rows = [
        ("skinny" if m <= SKINNY_M else "projection", 1, m, n, k)
        for m in (1, 16, 128, 1024, 8192)
        for n, k in PROJECTIONS
    ]
    return rows + [
        ("small-k", 1, 8192, 8192, 64),
        ("large-k", 1, 1024, 1024, 65536),
        ("tall-skinny", 1, 65536, 256, 1024),
        ("batched", 64, 2048, 2048, 128),
        ("batched", 64, 2048, 128, 2048),
    ]


SHAPES = _shapes()
CLASSES = tuple(dict.fromkeys(row[0] for row in SHAPES))
CASES = {  # name -> (operand dtype, precision preset, torch's float32 matmul precision)
    "f32": ("float32", "F32_F32_F32", "highest"),
    "tf32": ("float32", "TF32_TF32_F32", "high"),
    "bf16": ("bfloat16", "BF16_BF16_F32", "highest"),
}


def moved_bytes(batch: int, M: int, N: int, K: int, itemsize: int) -> int:
    """Bytes a product must move at the least: A and B read once, C written once."""
    return batch * (M * K + K * N + M * N) * itemsize


def relative_errors(results: tuple, reference) -> list[float]:
    """||x - reference||_F / ||reference||_F of each of ``results`` (NaN where x has one)."""
    import torch

    norm = torch.linalg.norm(reference)
    return [float(torch.linalg.norm(x.double() - reference) / norm) for x in results]


class Operands(NamedTuple):
    """A row's PyTorch operands and outputs (``out`` NaN at first), our call's ``precision``
    argument and ``cublas()``, ``torch.matmul`` into ``peer_out`` at the case's precision."""

    a: object
    b: object
    out: object
    peer_out: object
    precision: str | None
    cublas: object


def operands(case: str, shape: tuple) -> Operands:
    """Fresh random row-major operands of ``shape`` (class, batch, M, N, K) for ``case``."""
    import torch

    _, batch, M, N, K = shape
    dtype_name, preset_name, peer_precision = CASES[case]
    torch_dtype = getattr(torch, dtype_name)
    lead = (batch,) if batch > 1 else ()
    generator = torch.Generator(device="cuda").manual_seed(M * 31 + N * 7 + K + batch)
    a = torch.randn((*lead, M, K), device="cuda", generator=generator).to(torch_dtype)
    b = torch.randn((*lead, K, N), device="cuda", generator=generator).to(torch_dtype)
    out = torch.full((*lead, M, N), float("nan"), device="cuda", dtype=torch_dtype)
    peer_out = torch.empty_like(out)

    def cublas():
        torch.set_float32_matmul_precision(peer_precision)
        torch.matmul(a, b, out=peer_out)

    precision = None if case == "f32" else preset_name  # exact float32: the default
    return Operands(a, b, out, peer_out, precision, cublas)


def error_bound(case: str, K: int) -> float:
    """The relative error a row's result may have: the case's preset's tolerance at K."""
    from numba_gemm.precision import BFLOAT16, resolve, tolerance

    dtype_name, preset_name, _ = CASES[case]
    dtype = BFLOAT16 if dtype_name == "bfloat16" else np.dtype(dtype_name)
    return tolerance(resolve(preset_name, dtype), dtype, K)


def measure(case: str, shape: tuple, bandwidth: float | None) -> dict:
    """One row: ``shape`` (class, batch, M, N, K) under ``case``, ours against cuBLAS."""
    import numba_gemm

    kind, batch, M, N, K = shape
    dtype_name, preset_name, _ = CASES[case]
    a, b, out, peer_out, precision, cublas = operands(case, shape)

    def ours():
        numba_gemm.matmul(a, b, out, precision=precision)

    ours()
    cublas()
    errors = relative_errors((out, peer_out), a.double() @ b.double())
    row = {
        "class": kind, "M": M, "N": N, "K": K, "batch": batch, "dtype": dtype_name,
        "precision": preset_name, "error": errors[0], "cublas_error": errors[1],
    }  # fmt: skip
    bound = error_bound(case, K)
    if not row["error"] <= bound:  # NaN fails too
        return {**row, "ours_s": None, "cublas_s": None, "ratio": None,
                "bandwidth_fraction": None, "failed": f"error above {bound:.1e}"}  # fmt: skip
    from numba_gemm.timing import interleaved_medians

    medians = interleaved_medians({"ours": ours, "cublas": cublas}, rounds=9, round_s=0.05).medians
    moved = moved_bytes(batch, M, N, K, a.element_size())
    skinny = M <= SKINNY_M and bandwidth
    return {
        **row,
        "ours_s": medians["ours"],
        "cublas_s": medians["cublas"],
        "ratio": medians["cublas"] / medians["ours"],
        "bandwidth_fraction": moved / medians["ours"] / bandwidth if skinny else None,
    }


def summary(rows: list[dict]) -> dict:
    """Per case (dtype, precision): rows, the lowest ratio and the geometric mean of ratios
    (over rows that passed their check), and the failed rows."""
    by_case: dict = {}
    for row in rows:
        by_case.setdefault((row["dtype"], row["precision"]), []).append(row)
    result = {}
    for (dtype, precision), group in by_case.items():
        ratios = [r["ratio"] for r in group if r["ratio"] is not None]
        result[f"{dtype} {precision}"] = {
            "rows": len(group),
            "failed": sum(r["ratio"] is None for r in group),
            "lowest_ratio": min(ratios) if ratios else None,
            "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
        }
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--classes", nargs="+", default=list(CLASSES), choices=list(CLASSES))
    parser.add_argument("--out", help="write <out>/shapes/<device>.json")
    args = parser.parse_args(argv)
    from numba_gemm.timing import copy_bandwidth, device_name, stack_versions, write_results

    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write)", flush=True)
    rows = []
    for case in args.cases:
        for shape in SHAPES:
            if shape[0] not in args.classes:
                continue
            rows.append(measure(case, shape, bandwidth))
            row = rows[-1]
            if args.out:  # after every row: a run cut short keeps what it measured
                write_results(args.out, device_name(), "shapes", {
                    "stack": stack_versions("torch"), "copy_bandwidth_bytes_per_s": bandwidth,
                    "rows": rows, "summary": summary(rows),
                })  # fmt: skip
            size = f"{row['batch']} x " if row["batch"] > 1 else ""
            times = (
                f"{row['ours_s'] * 1e6:9.1f} us, cuBLAS {row['cublas_s'] * 1e6:9.1f} us "
                f"({row['ratio']:.2f}x)"
                if row["ratio"] is not None
                else row["failed"]
            )
            fraction = row["bandwidth_fraction"]
            print(
                f"{case:4s} {row['class']:11s} {size}{row['M']} x {row['N']} x {row['K']}: "
                f"{times}; error {row['error']:.1e}"
                + (f"; {fraction:.0%} of copy bandwidth" if fraction else ""),
                flush=True,
            )
    for case, figures in summary(rows).items():
        print(case, figures)


if __name__ == "__main__":
    main()
