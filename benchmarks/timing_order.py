"""Does a method's place in interleaved rounds change its time? The same call timed twice.

    python benchmarks/timing_order.py [--lead-ins 0 0.25 1] [--out benchmarks/results]

``numba_gemm.timing.interleaved_medians`` runs round r of every method, in a fixed order,
before round r + 1 of any. An H200 once timed the same call (one config, one set of
operands) 8-10% slower in the place right after ``torch.matmul`` than in the place after
that (bf16 128 x 8192 x 8192 split 2 ways: 56 us against 52; 1024 x 1024 x 65536 split 4
ways: 282 against 259), in either order of two names for it. Every benchmark that times ours
against cuBLAS puts one right after the other, so this checks how large that effect is, and
whether ``lead_in`` (untimed calls of a method before each of its rounds) removes it.

For each product (:data:`PRODUCTS`) and lead-in: ``interleaved_medians`` of cuBLAS, then our
call under the name ``after_cublas``, then the same call as ``after_ours``. Reports each
median, ``gap`` = after_cublas / after_ours - 1 (0 where the place does not matter) and the
ratio to cuBLAS in either place. Writes ``<out>/timing_order/<device>.json``.
"""

from __future__ import annotations

import argparse

# (operand dtype, M, N, K): products with split-k (the two that showed the effect), a large
# square one, and a narrow float32 one on the tiled kernel
PRODUCTS = (
    ("bfloat16", 128, 8192, 8192),
    ("bfloat16", 1024, 1024, 65536),
    ("bfloat16", 4096, 4096, 4096),
    ("float32", 16, 8192, 8192),
)


def measure(dtype_name: str, M: int, N: int, K: int, lead_in: float) -> dict:
    """One row: the medians of cuBLAS and of our call in the two places, at ``lead_in``."""
    import torch

    import numba_gemm
    from numba_gemm.timing import interleaved_medians

    torch_dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn((M, K), device="cuda", generator=generator).to(torch_dtype)
    b = torch.randn((K, N), device="cuda", generator=generator).to(torch_dtype)
    out, peer_out = (torch.empty((M, N), device="cuda", dtype=torch_dtype) for _ in range(2))
    torch.set_float32_matmul_precision("highest")  # float32 exactly on both sides

    def ours():
        numba_gemm.matmul(a, b, out)

    fns = {
        "cublas": lambda: torch.matmul(a, b, out=peer_out),
        "after_cublas": ours,
        "after_ours": ours,
    }
    medians = interleaved_medians(fns, rounds=9, round_s=0.04, lead_in=lead_in).medians
    return {
        "dtype": dtype_name, "M": M, "N": N, "K": K, "lead_in": lead_in,
        **{f"{name}_s": seconds for name, seconds in medians.items()},
        "gap": medians["after_cublas"] / medians["after_ours"] - 1,
        "ratio_after_cublas": medians["cublas"] / medians["after_cublas"],
        "ratio_after_ours": medians["cublas"] / medians["after_ours"],
    }  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lead-ins", nargs="+", type=float, default=[0.0, 0.25, 1.0])
    parser.add_argument("--out", help="write <out>/timing_order/<device>.json")
    args = parser.parse_args(argv)
    from numba_gemm.timing import device_name, stack_versions, write_results

    rows = []
    for product in PRODUCTS:
        for lead_in in args.lead_ins:
            row = measure(*product, lead_in)
            rows.append(row)
            print(
                f"{row['dtype']:8s} {row['M']} x {row['N']} x {row['K']}, lead-in {lead_in:g}: "
                f"cuBLAS {row['cublas_s'] * 1e6:.1f} us, ours after cuBLAS "
                f"{row['after_cublas_s'] * 1e6:.1f} us ({row['ratio_after_cublas']:.2f}x), "
                f"after ours {row['after_ours_s'] * 1e6:.1f} us "
                f"({row['ratio_after_ours']:.2f}x): gap {row['gap']:+.1%}",
                flush=True,
            )
    if args.out:
        path = write_results(args.out, device_name(), "timing_order",
                             {"stack": stack_versions("torch"), "rows": rows})  # fmt: skip
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
