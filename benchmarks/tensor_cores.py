"""The tensor-core kernels against cuBLAS (through PyTorch) at the same precision, same run.

    python benchmarks/tensor_cores.py [--sizes 1024 4096 8192] [--cases bf16 tf32 ...]
        [--config 128,128,32,2,2,4,8] [--out benchmarks/results]

For each case (operand dtype and precision preset) and square size: numba-gemm's launch (the
plan ``matmul`` makes, launched as its prepared calls launch it) and ``torch.matmul`` on the
same operands, interleaved rounds of back-to-back calls on the CUDA event clock
(``numba_gemm.timing``), and each result's relative error against a float64 product. cuBLAS's
peer: bf16 and f16 products as they are, TF32 with ``torch.set_float32_matmul_precision("high")``,
float32 (the peer of the float32-accurate presets) with ``"highest"``.
"""

from __future__ import annotations

import argparse

import numpy as np

CASES = {  # name -> (operand dtype, preset, the peer's dtype, the peer's float32 precision)
    "bf16": ("bfloat16", "BF16_BF16_F32", "bfloat16", "highest"),
    "f16": ("float16", "F16_F16_F32", "float16", "highest"),
    "tf32": ("float32", "TF32_TF32_F32", "float32", "high"),
    "tf32x3": ("float32", "TF32_TF32_F32_X3", "float32", "highest"),
    "bf16x3": ("float32", "BF16_BF16_F32_X3", "float32", "highest"),
    "bf16x6": ("float32", "BF16_BF16_F32_X6", "float32", "highest"),
    "bf16x9": ("float32", "BF16_BF16_F32_X9", "float32", "highest"),
    "f32": ("float32", "F32_F32_F32", "float32", "highest"),
}


def measure(case: str, n: int, config=None) -> dict:
    import torch

    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe
    from numba_gemm.launch import PreparedLaunch
    from numba_gemm.precision import BFLOAT16, resolve
    from numba_gemm.timing import interleaved_medians

    dtype_name, preset_name, peer_dtype, peer_precision = CASES[case]
    torch_dtype = getattr(torch, peer_dtype)
    generator = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn((n, n), device="cuda", generator=generator).to(torch_dtype)
    b = torch.randn((n, n), device="cuda", generator=generator).to(torch_dtype)
    c = torch.full((n, n), float("nan"), device="cuda", dtype=torch_dtype)
    peer_out = torch.empty_like(c)
    preset = resolve(preset_name, BFLOAT16 if dtype_name == "bfloat16" else np.dtype(dtype_name))
    launch = plan(describe(a, "a"), describe(b, "b"), describe(c, "out"), "auto", config, preset)
    ours = PreparedLaunch(launch, 0)

    def peer():
        torch.set_float32_matmul_precision(peer_precision)
        torch.matmul(a, b, out=peer_out)

    timed = interleaved_medians({"numba_gemm": ours, "cublas": peer}, rounds=9, round_s=0.05)
    torch.cuda.synchronize()
    reference = a.double() @ b.double()

    def error(x):
        return float(torch.linalg.norm(x.double() - reference) / torch.linalg.norm(reference))

    flops = 2 * n**3
    ours_s, peer_s = timed.medians["numba_gemm"], timed.medians["cublas"]
    return {
        "case": case,
        "preset": preset.name,
        "dtype": dtype_name,
        "size": n,
        "config": config.label() if config else "default",
        "numba_gemm_tflops": flops / ours_s / 1e12,
        "cublas_tflops": flops / peer_s / 1e12,
        "ratio": peer_s / ours_s,
        "numba_gemm_error": error(c),
        "cublas_error": error(peer_out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--config", help="an MmaConfig as 7 comma-separated ints")
    parser.add_argument("--out", help="write <out>/tensor_cores/<device>.json")
    args = parser.parse_args()
    from numba_gemm.kernels.mma import MmaConfig
    from numba_gemm.timing import device_name, stack_versions, write_results

    config = MmaConfig(*map(int, args.config.split(","))) if args.config else None
    rows = []
    for case in args.cases:
        for n in args.sizes:
            row = measure(case, n, config if case != "f32" else None)
            rows.append(row)
            print(
                f"{case:7s} {n:5d}: {row['numba_gemm_tflops']:7.1f} TFLOP/s, cuBLAS "
                f"{row['cublas_tflops']:7.1f} ({row['ratio']:.3f}x); error {row['numba_gemm_error']:.2e}"
                f" (cuBLAS {row['cublas_error']:.2e})",
                flush=True,
            )
    if args.out:
        path = write_results(
            args.out,
            device_name(),
            "tensor_cores",
            {"stack": stack_versions("torch"), "rows": rows},
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
