"""Analytic traffic models (pure Python: nothing here imports Numba or the kernels).

- :mod:`.traffic`: seed 001's loop orders under its three cache scenarios.
- :mod:`.waves`: seed 004's L2 model, tile loads of concurrently running CTAs.
"""

from .traffic import CACHES, ERRATA, ORDERS, Traffic, seed_traffic, simulate, traffic
from .waves import problem_dram_bytes, problem_tile_loads, wave_tile_loads

__all__ = [
    "CACHES",
    "ERRATA",
    "ORDERS",
    "Traffic",
    "seed_traffic",
    "simulate",
    "traffic",
    "format_table",
    "wave_tile_loads",
    "problem_tile_loads",
    "problem_dram_bytes",
]


def format_table(M: int, N: int, K: int) -> str:
    """The 12-case table (orders x caches) for one problem size, as text."""
    header = (
        f"{'order':5} {'cache':6} {'A reads':>14} {'B reads':>14} {'C reads':>14} "
        f"{'C writes':>14} {'total':>15} {'flop/elem':>9} {'seed total':>15}"
    )
    lines = [
        f"C = A @ B, M={M} N={N} K={K}: global traffic in elements (x item size for bytes)",
        header,
        "-" * len(header),
    ]
    for order in ORDERS:
        for cache in CACHES:
            t, s = traffic(order, M, N, K, cache), seed_traffic(order, M, N, K, cache)
            mark = "" if s.total == t.total else " *"
            lines.append(
                f"{order:5} {cache:6} {t.a_reads:>14,} {t.b_reads:>14,} {t.c_reads:>14,} "
                f"{t.c_writes:>14,} {t.total:>15,} {t.intensity:>9.3f} {s.total:>15,}{mark}"
            )
    lines.append(
        "* the seed's total omits the C reads of the K-outer orders "
        "(numba_gemm.model.ERRATA lists every erratum)"
    )
    return "\n".join(lines)
