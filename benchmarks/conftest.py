"""Benchmark session: device facts, a measured copy bandwidth, and the results file.

Every benchmark records its median (CUDA-event clock, see numba_gemm.timing)
through the ``record`` fixture. At the end of the session the rows, each with
its ratio against the peer measured in the same run, go to
``$NUMBA_GEMM_RESULTS_DIR`` (default ``benchmarks/results/``), one file per suite
(``<suite>/<device>.json``, replacing that suite's last run on the device), and a
short table is printed last.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_ROWS: list[dict] = []
_SESSION: dict = {}


@pytest.fixture(scope="session")
def device_info():
    from numba import cuda

    from numba_gemm.timing import device_name

    device = cuda.get_current_device()
    info = {
        "name": device_name(),
        "compute_capability": list(device.compute_capability),
        "multiprocessors": device.MULTIPROCESSOR_COUNT,
        "driver": ".".join(map(str, cuda.cudadrv.driver.driver.get_version())),
    }
    _SESSION["device"] = info
    return info


@pytest.fixture(scope="session")
def copy_bandwidth(device_info):
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written)."""
    from numba_gemm.timing import copy_bandwidth

    bandwidth = copy_bandwidth()
    _SESSION["copy_bandwidth_bytes_per_s"] = bandwidth
    return bandwidth


@pytest.fixture
def record(device_info, request):
    """record(benchmark, **fields): keep the benchmark's median with its description.

    Fields: kind ("peer" or "numba"), algorithm, layout, dtype, and either size
    (M = N = K) or M, N, K; optionally variant and anything else worth keeping.
    ``calls``: products per benchmarked call (a chain inside one jit), to report
    per product. ``baseline``: the algorithm of another row of this suite, shape and
    dtype, to compare with besides cuBLAS (``vs_baseline``, ``over_baseline_s``).
    """
    suite = request.node.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")

    def _record(benchmark, calls: int = 1, **fields):
        stats = benchmark.stats
        _ROWS.append(
            {
                **fields,
                "suite": suite,
                "median_s": stats.stats.median / calls,
                "min_s": stats.stats.min / calls,
                "calls": calls,
                "rounds": stats.stats.rounds,
                "iterations": stats.iterations,
            }
        )

    return _record


def _shape(row: dict) -> tuple[int, int, int]:
    size = row.get("size")
    return row.get("M", size), row.get("N", size), row.get("K", size)


def _with_ratios(rows: list[dict]) -> list[dict]:
    """Add TFLOP/s, speed relative to the same suite's same-shape peer (cuBLAS via
    jnp.matmul) and, where a row names one, to its baseline row."""
    peers = {
        (r["suite"], _shape(r), r["dtype"]): r["median_s"] for r in rows if r["kind"] == "peer"
    }
    medians = {
        (r["suite"], _shape(r), r["dtype"], r["algorithm"], r.get("variant", "")): r["median_s"]
        for r in rows
    }
    for r in rows:
        M, N, K = _shape(r)
        r["tflops"] = 2 * M * N * K / r["median_s"] / 1e12
        peer = peers.get((r["suite"], _shape(r), r["dtype"]))
        r["vs_peer"] = peer / r["median_s"] if peer else None
        if r.get("baseline"):
            base = medians[
                (
                    r["suite"],
                    _shape(r),
                    r["dtype"],
                    r["baseline"],
                    r.get("baseline_variant", r.get("variant", "")),
                )
            ]
            r["vs_baseline"] = base / r["median_s"]
            r["over_baseline_s"] = r["median_s"] - base
    return rows


def pytest_sessionfinish(session, exitstatus):
    from numba_gemm.timing import stack_versions, write_results

    if not _ROWS:
        return
    rows = _with_ratios(_ROWS)
    device = _SESSION.get("device", {}).get("name", "unknown")
    out_dir = Path(os.environ.get("NUMBA_GEMM_RESULTS_DIR", Path(__file__).parent / "results"))
    versions = stack_versions("pytest-benchmark")
    paths = []
    for suite in sorted({r["suite"] for r in rows}):
        paths.append(
            write_results(
                out_dir,
                device,
                suite,
                {
                    "device": _SESSION.get("device"),  # the session's record, not only the name
                    "versions": versions,
                    "copy_bandwidth_bytes_per_s": _SESSION.get("copy_bandwidth_bytes_per_s"),
                    "timing": "pytest-benchmark medians over calibrated rounds of back-to-back "
                    "calls (median_s is per call); timer numba_gemm.timing.device_clock (CUDA "
                    "events after a context-wide synchronize)",
                    "rows": [r for r in rows if r["suite"] == suite],
                },
            )
        )
    _SESSION["paths"] = [str(p) for p in paths]


def _against_baseline(row: dict) -> str:
    if not row.get("baseline"):
        return ""
    return (
        f"  {row['vs_baseline']:.3f}x {row['baseline']} "
        f"({row['over_baseline_s'] * 1e6:+.2f} us per product)"
    )


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    if not _ROWS:
        return
    write = terminalreporter.write_line
    write("")
    bandwidth = _SESSION.get("copy_bandwidth_bytes_per_s")
    write(
        f"numba-gemm benchmarks on {_SESSION.get('device', {}).get('name')}"
        + (f" (copy bandwidth {bandwidth / 1e12:.2f} TB/s)" if bandwidth else "")
    )
    header = (
        f"{'algorithm':12} {'layout':7} {'variant':10} {'M x N x K':>17} {'ms':>9} {'TFLOP/s':>8} "
        f"{'x cuBLAS':>8} {'model ms: none':>14} {'vector':>8} {'full':>8}"
    )
    write(header)
    for r in sorted(
        _ROWS,
        key=lambda r: (_shape(r), r["kind"], r["algorithm"], r["layout"], r.get("variant", "")),
    ):
        model = r.get("model_s") or {}
        ratio = f"{r['vs_peer']:8.3f}" if r.get("vs_peer") else f"{'':8}"
        cells = "".join(
            f"{model[c] * 1e3:{w}.2f}"
            for c, w in (("none", 15), ("vector", 9), ("full", 9))
            if c in model
        )
        write(
            f"{r['algorithm']:12} {r['layout']:7} {r.get('variant', ''):10} "
            f"{'x'.join(map(str, _shape(r))):>17} {r['median_s'] * 1e3:9.3f} "
            f"{r['tflops']:8.3f} {ratio}{cells}{_against_baseline(r)}"
        )
    for path in _SESSION.get("paths", ()):
        write(f"results: {path}")
