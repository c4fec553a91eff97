"""Benchmark results as a table and a plot: ``python -m numba_gemm bench``.

Reads the JSON files the benchmark suite writes (``benchmarks/results/``),
keeps the newest measurement of each (device, algorithm, layout, variant,
shape), and prints, per row: time, TFLOP/s, the ratio to cuBLAS
(``jnp.matmul(precision="highest")``, measured in the same run as the row)
and the share of the FP32 peak. ``--plot`` draws TFLOP/s against size for
every algorithm and cuBLAS (needs matplotlib: ``pip install numba-gemm[plot]``).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["FP32_PEAK_TFLOPS", "load_rows", "format_table", "plot", "main"]

# H100 SXM and H200: 132 SMs x 128 FP32 lanes x 2 flops (FMA) x 1.98 GHz boost clock.
FP32_PEAK_TFLOPS = 66.9
DEFAULT_RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _shape(row: dict) -> tuple[int, int, int]:
    size = row.get("size")
    return row.get("M", size), row.get("N", size), row.get("K", size)


def load_rows(source: str | Path | None = None, device: str | None = None) -> list[dict]:
    """Rows of every results file under ``source`` (a file or a folder), newest per key."""
    source = Path(source) if source else DEFAULT_RESULTS
    files = sorted(source.rglob("*.json")) if source.is_dir() else [source]
    if not files:
        raise FileNotFoundError(f"no results JSON in {source}; run the benchmarks first "
                                f"(make bench on a GPU machine)")
    newest: dict = {}
    for path in files:
        data = json.loads(path.read_text())
        if not isinstance(data.get("device"), dict) or not all("kind" in r for r in data.get("rows", [])):
            continue  # not a benchmark run (e.g. the ncu L2 measurements beside them)
        name = data["device"].get("name", "unknown")
        if device and name != device:
            continue
        for row in data["rows"]:
            row = {**row, "device": name, "date": data["date"], "file": path.name}
            key = (name, row["algorithm"], row["layout"], row.get("variant", ""), _shape(row),
                   row["dtype"])
            if key not in newest or newest[key]["date"] <= row["date"]:
                newest[key] = row
    return sorted(newest.values(), key=lambda r: (r["device"], r["kind"] != "peer", r["algorithm"],
                                                   r["layout"], r.get("variant", ""), _shape(r)))


def format_table(rows: list[dict]) -> str:
    """One line per row: algorithm, layout, variant, M x N x K, ms, TFLOP/s, x cuBLAS, % of peak."""
    header = (f"{'algorithm':12} {'layout':7} {'variant':10} {'M x N x K':>18} {'ms':>9} "
              f"{'TFLOP/s':>8} {'x cuBLAS':>8} {'% peak':>7}")
    lines = []
    for device in dict.fromkeys(r["device"] for r in rows):
        lines += [f"{device} (fp32 peak {FP32_PEAK_TFLOPS} TFLOP/s; cuBLAS = jnp.matmul "
                  f"precision='highest', same run)", header, "-" * len(header)]
        for r in (r for r in rows if r["device"] == device):
            ratio = f"{r['vs_peer']:8.3f}" if r.get("vs_peer") else f"{'':8}"
            lines.append(f"{r['algorithm']:12} {r['layout']:7} {r.get('variant', ''):10} "
                         f"{'x'.join(map(str, _shape(r))):>18} {r['median_s'] * 1e3:9.3f} "
                         f"{r['tflops']:8.2f} {ratio} {100 * r['tflops'] / FP32_PEAK_TFLOPS:6.1f}%")
    return "\n".join(lines)


def draw(lines: list[tuple[str, list, bool]], path: str | Path, *, xlabel: str, ylabel: str,
         title: str, peak: tuple[str, float] | None = None) -> Path:
    """A log-log plot (x in powers of 2) of ``(label, [(x, y), ...], emphasised)`` lines,
    with an optional horizontal ``(label, y)`` line, saved to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("plotting needs matplotlib: pip install 'numba-gemm[plot]'") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points, emphasised in lines:
        ax.plot(*zip(*points), marker="o", label=label, linewidth=2.5 if emphasised else 1)
    if peak:
        ax.axhline(peak[1], color="grey", linestyle=":", label=peak[0])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot(rows: list[dict], path: str | Path) -> Path:
    """TFLOP/s against size (square fp32 row-major problems) per algorithm, cuBLAS included."""
    devices = list(dict.fromkeys(r["device"] for r in rows))
    lines = []
    for device in devices:
        square = [r for r in rows if r["device"] == device and r["layout"] == "row"
                  and not r.get("variant") and r["dtype"] == "float32" and len(set(_shape(r))) == 1]
        for algorithm in dict.fromkeys(r["algorithm"] for r in square):
            points = sorted((r["size"], r["tflops"]) for r in square if r["algorithm"] == algorithm)
            label = "cuBLAS (jnp.matmul, highest)" if algorithm == "jnp.matmul" else algorithm
            if len(devices) > 1:
                label += f" ({device})"
            lines.append((label, points, algorithm in ("tiled", "jnp.matmul")))
    return draw(lines, path, xlabel="M = N = K", ylabel="TFLOP/s (fp32)",
                title=f"numba-gemm on {', '.join(devices)}: row-major operands",
                peak=("FP32 peak", FP32_PEAK_TFLOPS))


def main(args) -> int:
    rows = load_rows(args.results, args.device)
    if args.algorithm:
        rows = [r for r in rows if r["algorithm"] in args.algorithm]
    if not rows:
        print(f"no rows{' for ' + args.device if args.device else ''}")
        return 1
    print(format_table(rows))
    if args.plot:
        print(f"plot: {plot(rows, args.plot)}")
    return 0
