"""Seed 004 measured: L2 hit rate and DRAM bytes of row-major vs grouped CTA order (ncu).

Two steps, because the launches must run under Nsight Compute:

    ncu --clock-control none --kernel-name regex:tiled --csv --metrics "$METRICS" \\
        python benchmarks/l2_ordering.py run > ncu.csv
    python benchmarks/l2_ordering.py summarize ncu.csv RESULTS_DIR

with ``METRICS`` the comma-separated names in :data:`METRICS` (``benchmarks/gpu_suite.sh``
runs exactly this). ``run`` launches the tiled kernel once per (shape, group_m) in CASES order
(each specialisation is compiled first, outside the profiled launch); ``summarize``
pairs ncu's rows with the cases, adds numba_gemm.model.problem_dram_bytes (the
seed's ideal-cache count, wave by wave) and writes
``RESULTS_DIR/l2_ordering/<device>.json`` (``timing.results_file``, as every benchmark
names its results) with the device and the versions.
``--clock-control none`` leaves the GPU's clocks as they are (ncu would lock them).
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import replace

import numpy as np

SHAPES = [(8192, 8192, 8192), (4096, 4096, 32768)]
GROUPS = [1, 8]
CASES = [(shape, group) for shape in SHAPES for group in GROUPS]
METRICS = [
    "lts__t_sector_hit_rate.pct",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__time_duration.sum",
]


def run() -> None:
    from numba import cuda

    import numba_gemm
    from numba_gemm.reference import make_operands, poisoned
    from numba_gemm.tuned_configs import config_for_shape

    for (M, N, K), group in CASES:
        config = replace(config_for_shape(M, N, K), group_m=group)
        a, b = make_operands(M, N, K, np.float32, "row", np.random.default_rng(0), to_device=True)
        out = poisoned((M, N), np.float32, to_device=True)
        numba_gemm.matmul(
            a[:8, :8], b[:8, :8], out[:8, :8], algorithm="tiled", config=config
        )  # compile
        cuda.synchronize()
        numba_gemm.matmul(a, b, out, algorithm="tiled", config=config)  # the profiled launch
        cuda.synchronize()
        print(f"launched {M}x{N}x{K} {config.label()}", file=sys.stderr)


def summarize(csv_path: str, results_dir: str) -> None:
    from numba_gemm.model import problem_dram_bytes
    from numba_gemm.timing import device_name, stack_versions, write_results
    from numba_gemm.tuned_configs import config_for_shape

    text = open(csv_path).read()
    table = list(csv.DictReader(io.StringIO(text[text.index('"ID"') :])))
    launches = {}  # ID -> {metric: value}; the small compile launches are the even IDs
    for row in table:
        launches.setdefault(int(row["ID"]), {})[row["Metric Name"]] = float(
            row["Metric Value"].replace(",", "")
        )
    ids = sorted(launches)[1::2]  # each case: a tiny compile-and-warm launch, then the real one
    import numba.cuda as cuda

    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT if not cuda.config.ENABLE_CUDASIM else 132
    rows = []
    for ((M, N, K), group), launch in zip(CASES, ids):
        config = config_for_shape(M, N, K)
        measured = launches[launch]
        rows.append(
            {
                "M": M,
                "N": N,
                "K": K,
                "group_m": group,
                "config": replace(config, group_m=group).label(),
                "l2_hit_pct": measured["lts__t_sector_hit_rate.pct"],
                "dram_read_bytes": measured["dram__bytes_read.sum"],
                "dram_write_bytes": measured["dram__bytes_write.sum"],
                "kernel_s": measured["gpu__time_duration.sum"] * 1e-9,
                "model_dram_bytes_one_cta_per_sm": problem_dram_bytes(
                    M, N, K, config.block_m, config.block_n, config.block_k, 4, sms, group
                ),
                "compulsory_bytes": 4 * (M * K + K * N + M * N),
            }
        )
    device = "simulator" if cuda.config.ENABLE_CUDASIM else device_name()
    out_path = write_results(
        results_dir,
        device,
        "l2_ordering",
        {
            "versions": stack_versions(),
            "tool": "ncu --clock-control none",
            "metrics": METRICS,
            "rows": rows,
        },
    )
    print(f"results: {out_path}")
    for r in rows:
        print(
            f"{r['M']}x{r['N']}x{r['K']} group_m={r['group_m']}: L2 hit {r['l2_hit_pct']:.1f}%, "
            f"DRAM read {r['dram_read_bytes'] / 1e9:.2f} GB "
            f"(model {r['model_dram_bytes_one_cta_per_sm'] / 1e9:.2f}, "
            f"compulsory {r['compulsory_bytes'] / 1e9:.2f}), {r['kernel_s'] * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run()
    elif sys.argv[1:2] == ["summarize"] and len(sys.argv) == 4:
        summarize(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
