"""Benchmark results as tables and plots: ``python -m numba_gemm bench``.

Reads the JSON files the benchmarks write (``benchmarks/results/<suite>/<device>.json``).

- ``bench``: the GEMM suites' rows, newest per (device, algorithm, layout, variant, shape):
  time, TFLOP/s, the ratio to cuBLAS (``jnp.matmul(precision="highest")``, measured in the
  same run as the row) and the share of the FP32 peak; ``--plot`` draws TFLOP/s against size
  for every algorithm and cuBLAS.
- ``bench --readme``: the README's Performance table (:func:`readme_table`): each headline
  result against its peer in the same run, from the newest run of each suite; ``--plot``
  then draws the README's plot (:func:`readme_plot`).

Plots need matplotlib (``pip install 'numba-gemm[plot]'``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

__all__ = [
    "FP32_PEAK_TFLOPS",
    "load_rows",
    "device_matches",
    "format_table",
    "plot",
    "latest_run",
    "readme_rows",
    "readme_table",
    "readme_plot",
    "main",
]

# H100 SXM and H200: 132 SMs x 128 FP32 lanes x 2 flops (FMA) x 1.98 GHz boost clock.
FP32_PEAK_TFLOPS = 66.9
DEFAULT_RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _shape(row: dict) -> tuple[int, int, int]:
    size = row.get("size")
    return row.get("M", size), row.get("N", size), row.get("K", size)


def _words(text: str) -> str:
    """``text`` lower-cased with every run of other characters than letters and digits one
    space: "NVIDIA H200" and "nvidia-h200" read alike."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def device_matches(name: str, wanted: str) -> bool:
    """Whether the device ``name`` is the one a user means by ``wanted``: its words, as
    :func:`_words` reads them, appear in ``name``'s ("H200", "h100", "nvidia-h200")."""
    return f" {_words(wanted)} " in f" {_words(name)} "


def load_rows(source: str | Path | None = None, device: str | None = None) -> list[dict]:
    """Rows of every results file under ``source`` (a file or a folder), newest per key;
    with ``device``, only those of devices it matches (:func:`device_matches`)."""
    source = Path(source) if source else DEFAULT_RESULTS
    if not source.exists():
        raise FileNotFoundError(f"no results file or folder {source}")
    files = sorted(source.rglob("*.json")) if source.is_dir() else [source]
    if not files:
        raise FileNotFoundError(
            f"no results JSON in {source}; run the benchmarks first (make bench on a GPU machine)"
        )
    newest: dict = {}
    for path in files:
        data = json.loads(path.read_text())
        if not isinstance(data.get("device"), dict) or not all(
            "kind" in r for r in data.get("rows", [])
        ):
            continue  # not a benchmark run (e.g. the ncu L2 measurements beside them)
        name = data["device"].get("name", "unknown")
        if device and not device_matches(name, device):
            continue
        for row in data["rows"]:
            row = {**row, "device": name, "date": data["date"], "file": path.name}
            key = (
                name,
                row["algorithm"],
                row["layout"],
                row.get("variant", ""),
                _shape(row),
                row["dtype"],
            )
            if key not in newest or newest[key]["date"] <= row["date"]:
                newest[key] = row
    return sorted(
        newest.values(),
        key=lambda r: (
            r["device"],
            r["kind"] != "peer",
            r["algorithm"],
            r["layout"],
            r.get("variant", ""),
            _shape(r),
        ),
    )


def format_table(rows: list[dict]) -> str:
    """One line per row: algorithm, layout, variant, M x N x K, ms, TFLOP/s, x cuBLAS, % of peak;
    each text column as wide as its widest entry."""
    cells = [
        (
            r["device"],
            r["algorithm"],
            r["layout"],
            r.get("variant", ""),
            "x".join(map(str, _shape(r))),
            f"{r['median_s'] * 1e3:.3f}",
            f"{r['tflops']:.2f}",
            f"{r['vs_peer']:.3f}" if r.get("vs_peer") else "",
            f"{100 * r['tflops'] / FP32_PEAK_TFLOPS:.1f}%",
        )
        for r in rows
    ]
    titles = ("algorithm", "layout", "variant", "M x N x K", "ms", "TFLOP/s", "x cuBLAS", "% peak")
    widths = [max([len(t)] + [len(c[i + 1]) for c in cells]) for i, t in enumerate(titles)]

    def line(values) -> str:  # text columns to the left, numbers to the right
        return " ".join(
            f"{v:<{w}}" if i < 3 else f"{v:>{w}}" for i, (v, w) in enumerate(zip(values, widths))
        )

    header = line(titles)
    lines = []
    for device in dict.fromkeys(c[0] for c in cells):
        lines += [
            f"{device} (fp32 peak {FP32_PEAK_TFLOPS} TFLOP/s; cuBLAS = jnp.matmul "
            f"precision='highest', same run)",
            header,
            "-" * len(header),
        ]
        lines += [line(c[1:]) for c in cells if c[0] == device]
    return "\n".join(lines)


def _plotting():
    """matplotlib's pyplot on the Agg backend, or a ``RuntimeError`` saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("plotting needs matplotlib: pip install 'numba-gemm[plot]'") from None
    return plt


def draw(
    lines: list[tuple[str, list, bool]],
    path: str | Path,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    peak: tuple[str, float] | None = None,
    log_y: bool = True,
) -> Path:
    """A plot of ``(label, [(x, y), ...], emphasised)`` lines, x on a log2 axis labelled with
    its values, y on a log axis (``log_y``) or a linear one from 0, with an optional horizontal
    ``(label, y)`` line, saved to ``path``."""
    plt = _plotting()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _draw_lines(ax, lines, xlabel=xlabel, ylabel=ylabel, title=title, peak=peak, log_y=log_y)
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    """``fig`` laid out, saved to ``path`` as a PNG and closed."""
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    _plotting().close(fig)
    return path


def _draw_lines(ax, lines, *, xlabel, ylabel, title, peak, log_y) -> None:
    """:func:`draw`'s lines on the axes ``ax``."""
    for label, points, emphasised in lines:
        ax.plot(*zip(*points), marker="o", label=label, linewidth=2.5 if emphasised else 1)
    if peak:
        ax.axhline(peak[1], color="grey", linestyle=":", label=peak[0])
    ax.set_xscale("log", base=2)
    xs = sorted({x for _, points, _ in lines for x, _ in points})
    ax.set_xticks(xs, [str(x) for x in xs])
    if log_y:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _square(rows: list[dict]) -> list[dict]:
    """The rows of square float32 products with row-major operands, no variant: the plots'."""
    return [
        r
        for r in rows
        if r["layout"] == "row"
        and not r.get("variant")
        and r["dtype"] == "float32"
        and len(set(_shape(r))) == 1
    ]


def plot(rows: list[dict], path: str | Path) -> Path:
    """TFLOP/s against size (square fp32 row-major problems) per algorithm, cuBLAS included."""
    devices = list(dict.fromkeys(r["device"] for r in rows))
    lines = []
    for device in devices:
        square = _square([r for r in rows if r["device"] == device])
        for algorithm in dict.fromkeys(r["algorithm"] for r in square):
            points = sorted((r["size"], r["tflops"]) for r in square if r["algorithm"] == algorithm)
            label = "cuBLAS (jnp.matmul, highest)" if algorithm == "jnp.matmul" else algorithm
            if len(devices) > 1:
                label += f" ({device})"
            lines.append((label, points, algorithm in ("tiled", "jnp.matmul")))
    return draw(
        lines,
        path,
        xlabel="M = N = K",
        ylabel="TFLOP/s (fp32)",
        title=f"numba-gemm on {', '.join(devices)}: row-major operands",
        peak=("FP32 peak", FP32_PEAK_TFLOPS),
    )


def latest_run(suite: str, results: str | Path | None = None) -> tuple[Path, dict]:
    """(path, contents) of the newest run of ``suite`` on any device: the file of
    ``<results>/<suite>/`` whose ``date`` is latest."""
    folder = Path(results or DEFAULT_RESULTS) / suite
    runs = [(json.loads(p.read_text()), p) for p in sorted(folder.glob("*.json"))]
    if not runs:
        raise FileNotFoundError(f"no results of suite {suite!r} in {folder}; run its benchmark")
    data, path = max(runs, key=lambda run: run[0]["date"])
    return path, data


def _device_name(data: dict) -> str:
    device = data.get("device")
    return device.get("name", "unknown") if isinstance(device, dict) else str(device)


def _where(data: dict) -> str:
    return f"{_device_name(data).removeprefix('NVIDIA ')}, {data['date'][:10]}"


def _pick(rows: list[dict], **fields) -> dict:
    found = [r for r in rows if all(r.get(k) == v for k, v in fields.items())]
    if len(found) != 1:
        raise LookupError(f"expected one row with {fields}; found {len(found)}")
    return found[0]


# The README's Performance table: (suite, sizes) of the headline results.
README_GEMM_SIZES = (1024, 2048, 4096, 8192)
README_TRIPLE_SIZES = (256, 512, 1536, 4096)
README_BRIDGE_SIZES = (512, 4096)
README_BRIDGE_DIRECT_FROM = 4096
README_TRITON_FROM = 4096
# (case, size) of the tensor-core rows: benchmarks/tensor_cores.py's cases
README_TENSOR_CORE_ROWS = (
    ("bf16", 1024),
    ("bf16", 4096),
    ("bf16", 8192),
    ("f16", 4096),
    ("f16", 8192),
    ("tf32", 4096),
    ("tf32x3", 4096),
    ("tf32x3", 8192),
    ("bf16x6", 4096),
)


def readme_rows(results: str | Path | None = None) -> list[dict]:
    """The README's headline results, each against its peer in the same run, from the newest
    run of each suite: the tiled GEMM against cuBLAS (square, row-major), the best loop order
    against cuBLAS, ``triple(algorithm="auto")`` against PyTorch eager and ``jax.jit``, and the
    bridge inside ``jax.jit`` against the same kernel launched directly. Each row: what, peer,
    size, seconds, TFLOP/s, ratio (peer time / time), where (device, date), parameters, and
    the results file it comes from; and a model's training step through the bridge against the
    same step through ``lax``."""
    out = []

    def add(what, peers, size, seconds, peer_seconds, flops, where, parameters, path):
        out.append(
            {
                "what": what,
                "peer": peers,
                "size": size,
                "seconds": seconds,
                "tflops": flops / seconds / 1e12,
                "ratio": [p / seconds for p in peer_seconds],
                "where": where,
                "parameters": parameters,
                "file": path,
            }
        )

    path, data = latest_run("tiled", results)
    for n in README_GEMM_SIZES:
        row = _pick(data["rows"], algorithm="tiled", layout="row", size=n, variant=None)
        peer = _pick(data["rows"], algorithm="jnp.matmul", layout="row", size=n)
        add(
            "`matmul` (tiled)",
            ["cuBLAS"],
            f"{n}^3",
            row["median_s"],
            [peer["median_s"]],
            2 * n**3,
            _where(data),
            f"float32, row-major, tiles {row['config']}",
            path,
        )
    path, data = latest_run("loop_orders", results)
    row = _pick(data["rows"], algorithm="mnk", layout="row", size=2048)
    peer = _pick(data["rows"], algorithm="jnp.matmul", layout="row", size=2048)
    add(
        '`matmul(algorithm="mnk")`',
        ["cuBLAS"],
        "2048^3",
        row["median_s"],
        [peer["median_s"]],
        2 * 2048**3,
        _where(data),
        "float32, row-major, one thread per element",
        path,
    )
    path, data = latest_run("triple_product", results)
    for n in README_TRIPLE_SIZES:
        row = _pick(data["rows"], method="auto", size=n)
        torch = _pick(data["rows"], method="torch", size=n)
        # jax.jit as XLA compiles it by default and without its Triton GEMMs: the faster
        jax = min(
            (r for r in data["rows"] if r["size"] == n and r["method"] in ("jax", "jax, cuBLAS")),
            key=lambda r: r["median_s"],
        )
        add(
            "`triple` (auto)",
            ["PyTorch eager", "`jax.jit`"],
            f"N = {n}",
            row["median_s"],
            [torch["median_s"], jax["median_s"]],
            4 * n**3,
            _where(data),
            f"float32, no TF32, square, row-major; ran {row['config']}",
            path,
        )
    path, data = latest_run("tensor_cores", results)
    for case, n in README_TENSOR_CORE_ROWS:
        row = _pick(data["rows"], case=case, size=n)
        exact = row["preset"].endswith(("_X3", "_X6", "_X9"))
        peers, peer_seconds = ["cuBLAS float32" if exact else "cuBLAS"], [row["cublas_median_s"]]
        # 16-bit cases: the Triton tutorial's kernel too, from 4096 up (below, the time of its
        # Python launch path, which back-to-back calls measure, exceeds the kernel's)
        if "triton_tflops" in row and n >= README_TRITON_FROM:
            peers.append("Triton tutorial")
            peer_seconds.append(2 * n**3 / row["triton_tflops"] / 1e12)
        kernel = {
            "wgmma_kernel": "wgmma",
            "persistent_producer_kernel": "wgmma (persistent, warp-specialised)",
            "wgmma_converting_kernel": "wgmma (converting)",
            "mma_kernel": "mma.sync",
        }.get(row.get("kernel"), "mma.sync")
        # The user's call on PyTorch tensors where the run timed it, else the prepared launch
        called = "call_median_s" in row
        add(
            f'`matmul(precision="{row["preset"]}")`',
            peers,
            f"{n}^3",
            row["call_median_s"] if called else row["median_s"],
            peer_seconds,
            2 * n**3,
            _where(data),
            f"{row['dtype']}, row-major, {kernel}; "
            + ("the call on PyTorch tensors; " if called else "")
            + f"error {row['numba_gemm_error']:.1e} (cuBLAS {row['cublas_error']:.1e})",
            path,
        )
    path, data = latest_run("jax_bridge", results)
    for n in README_BRIDGE_SIZES:
        row = _pick(data["rows"], algorithm="jax_bridge native", variant="chain", size=n)
        peers = {
            "`jnp.matmul`, same jit": _pick(
                data["rows"], algorithm="jnp.matmul", variant="chain", size=n
            )
        }
        if n >= README_BRIDGE_DIRECT_FROM:  # below, a direct launch is bound by its host
            peers["same kernel, direct"] = _pick(
                data["rows"], algorithm="numba direct", variant="per call", size=n
            )
        add(
            "`jax_bridge.matmul` in `jax.jit`",
            list(peers),
            f"{n}^3",
            row["median_s"],
            [peer["median_s"] for peer in peers.values()],
            2 * n**3,
            _where(data),
            "float32, row-major, a chain of products in one jit, per product; "
            "`jnp.matmul` at precision highest",
            path,
        )
    path, data = latest_run("models", results)
    for row in data["rows"]:
        layers, batch = row["layers"], row["batch"]
        add(
            "`jax_bridge.dot_general`, an MLP's training step",
            ["`lax.dot_general`, same step"],
            f"batch {batch}",
            row["bridge_step_s"],
            [row["lax_step_s"]],
            6 * batch * sum(m * n for m, n in zip(layers, layers[1:])),  # forward and backward
            _where(data),
            f"{row['dtype']}, Dense {'-'.join(map(str, layers))}, Adam, default precision; "
            f"losses within {row['loss_max_rel_diff']:.0e} of lax",
            path,
        )
    return out


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _ratio(ratio: float) -> str:
    return f"**{ratio:.3f}x**" if ratio < 0.1 else f"**{ratio:.2f}x**"


def readme_table(results: str | Path | None = None) -> str:
    """The README's Performance table (markdown) from :func:`readme_rows`."""
    rows = readme_rows(results)
    base = Path(results or DEFAULT_RESULTS).resolve().parent.parent
    lines = [
        "| what | size | time | TFLOP/s | peer (same run) | speed-up | GPU, date | parameters |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['what']} | {r['size']} | {_time(r['seconds'])} | {r['tflops']:.1f} | "
            f"{' / '.join(r['peer'])} | {' / '.join(_ratio(x) for x in r['ratio'])} | "
            f"{r['where']} | {r['parameters']} |"
        )
    files = sorted({str(Path(r["file"]).resolve().relative_to(base)) for r in rows})
    lines += ["", "From " + ", ".join(f"`{f}`" for f in files) + "."]
    return "\n".join(lines)


def readme_plot(path: str | Path, results: str | Path | None = None) -> Path:
    """The README's plot, two panels: TFLOP/s of the tiled GEMM and cuBLAS against size
    (square float32, row-major), from the newest run of the ``tiled`` suite; and the shape
    sweep, our call's speed against cuBLAS's per shape and case, from the newest run of the
    ``shapes`` suite (:func:`_draw_shapes`)."""
    _, tiled = latest_run("tiled", results)
    _, shapes = latest_run("shapes", results)
    square = _square(tiled["rows"])
    lines = []
    for algorithm, label in (
        ("tiled", "numba-gemm tiled"),
        ("jnp.matmul", "cuBLAS (jnp.matmul, highest)"),
    ):
        points = sorted((r["size"], r["tflops"]) for r in square if r["algorithm"] == algorithm)
        lines.append((label, points, True))
    plt = _plotting()
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5), width_ratios=(2, 3))
    _draw_lines(
        left,
        lines,
        xlabel="M = N = K",
        ylabel="TFLOP/s (float32, no TF32)",
        title=f"C = A @ B, float32, row-major, on {_where(tiled)}",
        peak=(f"FP32 FFMA peak ({FP32_PEAK_TFLOPS} TFLOP/s)", FP32_PEAK_TFLOPS),
        log_y=False,
    )
    _draw_shapes(right, shapes)
    return _save(fig, path)


def _shape_label(row: dict) -> str:
    """``M x N x K``, with ``batch x`` in front for a batch."""
    size = f"{row['M']}x{row['N']}x{row['K']}"
    return f"{row['batch']}x {size}" if row["batch"] > 1 else size


def _draw_shapes(ax, data: dict) -> None:
    """The shape sweep on the axes ``ax``: per case (dtype and precision) cuBLAS's time over
    ours for each shape, in the sweep's order, a log axis, lines at 1 and at the 0.8 floor."""
    cases = dict.fromkeys((r["dtype"], r["precision"]) for r in data["rows"])
    labels = list(dict.fromkeys(_shape_label(r) for r in data["rows"]))
    for dtype, precision in cases:
        points = [
            (labels.index(_shape_label(r)), r["ratio"])
            for r in data["rows"]
            if (r["dtype"], r["precision"]) == (dtype, precision) and r["ratio"] is not None
        ]
        ax.plot(*zip(*points), marker="o", linewidth=1, label=f"{dtype} at {precision}")
    ax.axhline(1.0, color="grey", linewidth=1)
    ax.axhline(0.8, color="grey", linestyle=":", label="0.8x")
    ax.set_yscale("log")
    ratios = [r["ratio"] for r in data["rows"] if r["ratio"] is not None]
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.8, 1, 1.25, 1.5, 2, 3, 5)
             if min(ratios) / 1.25 <= t <= max(ratios) * 1.25]  # fmt: skip
    ax.set_yticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("cuBLAS time / ours (the user's matmul call)")
    ax.set_title(f"Shape sweep (benchmarks/shapes.py) on {_where(data)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def main(args) -> int:
    """``python -m numba_gemm bench``: 0, or 1 where no row matches; a missing results file or
    folder, or a plot without matplotlib, is one line on stderr and exit status 2."""
    try:
        if args.plot:
            _plotting()  # before any work, so that the table does not print and then fail
        if args.readme:
            print(readme_table(args.results))
            if args.plot:
                print(f"plot: {readme_plot(args.plot, args.results)}")
            return 0
        rows = load_rows(args.results, args.device)
    except (FileNotFoundError, RuntimeError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    if args.algorithm:
        rows = [r for r in rows if r["algorithm"] in args.algorithm]
    if not rows:
        print(f"no rows{' for ' + args.device if args.device else ''}", file=sys.stderr)
        return 1
    print(format_table(rows))
    if args.plot:
        print(f"plot: {plot(rows, args.plot)}")
    return 0
