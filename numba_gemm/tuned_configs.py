"""Tile configs for the tiled kernel: the search space, the tuning cache, and the lookup.

A *shape class* is (device, dtype, layout of A and B, shape bucket, edge tiles): each of
M, N, K rounded up to a power of two, and whether the tuned shape had edge tiles under its
winner (a winner tuned at 2047 serves products with edge tiles, and leaves the winner tuned
at 2048 to products with whole tiles). :func:`numba_gemm.tune` stores winners in a JSON
cache (:func:`cache_path`: ``$NUMBA_GEMM_TUNE_CACHE``, default
``~/.cache/numba_gemm/tuning.json``) through :func:`store`.

:func:`config_for` (what ``matmul`` asks) reads that cache, then the winners shipped with the
package (``tuned.json``), and takes the entry of the nearest shape bucket, falling back from
the device name to its compute capability, and from its layout to any layout; else
``tiled.DEFAULT_CONFIGS``. A product with edge tiles under that entry runs the nearest winner
tuned on edge tiles where one is as near, else the entry's tall large tiles transposed
(``tiled.for_edge_tiles``). How the configs were chosen: ``docs/design/tiled-gemm.md``.

This module imports nothing from ``api``: ``api`` plans with it, and ``autotune`` (above
``api``) times candidates and stores winners through it.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .descriptor import MatrixDesc
from .kernels.tiled import DEFAULT_CONFIGS, TileConfig, for_edge_tiles, whole_tiles
from .launch import shared_memory_limit, simulated
from .prepared import forget_prepared_calls

__all__ = [
    "SEARCH_SPACE",
    "SIMULATOR_CONFIG",
    "SHIPPED",
    "config_for",
    "config_for_shape",
    "layout_key",
    "shape_bucket",
    "cache_path",
    "device_key",
    "store",
]

SHIPPED = Path(__file__).with_name("tuned.json")
FORMAT = 1

# Small enough for the simulator (16 threads per CTA), and it runs the same kernel code.
SIMULATOR_CONFIG = TileConfig(
    block_m=16, block_n=16, block_k=4, thread_m=4, thread_n=4, stages=2, group_m=2
)

T = TileConfig
# Every candidate compiles without spills, with and without edge code (tests/test_gpu.py).
# 256 x 128 x 32 tiles (16 x 8 per thread) were dropped: without edge code their k loop, which
# keeps 32 staged floats of A in registers, spilled 64 bytes (ptxas, sm_90), and they had
# won no size in tuned.json.
SEARCH_SPACE = {
    np.dtype(np.float32): (
        T(256, 128, 16, 16, 8, 3, 8),
        T(256, 128, 16, 16, 8, 4, 8),
        T(256, 128, 8, 16, 8, 3, 8),
        T(128, 256, 16, 8, 16, 3, 8),
        T(128, 128, 8, 8, 8, 4, 8),
        T(128, 128, 16, 8, 8, 3, 8),
        T(128, 64, 16, 8, 4, 3, 8),
        T(64, 128, 16, 4, 8, 3, 8),
        T(64, 64, 16, 4, 4, 3, 8),
        T(64, 64, 32, 4, 4, 3, 8),
        # Split-k groups (TileConfig.split_k): small products, whose tiles are too few to keep
        # every SM busy with 8 warps (they won 256^3 to 1024^3: docs/design/tiled-gemm.md).
        T(32, 32, 16, 4, 4, 2, 1, split_k=4),
        T(32, 64, 16, 8, 4, 2, 1, split_k=4),
        T(64, 32, 16, 4, 8, 2, 1, split_k=4),
        T(64, 64, 16, 8, 4, 2, 1, split_k=2),
    ),
    np.dtype(np.float64): (
        T(64, 64, 16, 4, 4, 3, 8),
        T(64, 64, 32, 4, 4, 3, 8),
        T(128, 64, 16, 8, 4, 3, 8),
        T(128, 128, 8, 8, 8, 3, 8),
    ),
}
del T

BUCKET_MIN, BUCKET_MAX = 16, 16384


def cache_path() -> Path:
    """Where :func:`tune` stores winners: ``$NUMBA_GEMM_TUNE_CACHE`` or ~/.cache/numba_gemm/."""
    return _cache_path(os.environ.get("NUMBA_GEMM_TUNE_CACHE"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _cache_path(env: str | None, home: str | None) -> Path:
    # Memoised on the variables it reads: Path.home() costs ~20 us, and every call of
    # matmul that is not a prepared launch looks the cache up.
    return Path(env) if env else Path.home() / ".cache" / "numba_gemm" / "tuning.json"


def _axis(desc: MatrixDesc) -> str:
    """ "row" (row-major), "col" (column-major) or "strided"."""
    stride_0, stride_1 = desc.strides
    if stride_1 == 1:
        return "row"
    if stride_0 == 1:
        return "col"
    return "strided"


def layout_key(a: MatrixDesc, b: MatrixDesc) -> str:
    """The layouts of A and B, e.g. ``"row-col"``."""
    return f"{_axis(a)}-{_axis(b)}"


def shape_bucket(M: int, N: int, K: int) -> tuple[int, int, int]:
    """Each dimension rounded up to a power of two, within [16, 16384]."""
    return tuple(min(max(1 << (d - 1).bit_length(), BUCKET_MIN), BUCKET_MAX) for d in (M, N, K))


def _key(device: str, dtype, layout: str, bucket, edge: bool) -> str:
    return f"{device}|{np.dtype(dtype).name}|{layout}|{'x'.join(map(str, bucket))}" + (
        "|edge" if edge else ""
    )


def _tuned_on_edge_tiles(entry: dict) -> bool:
    """Whether ``entry``'s winner was timed on a shape with edge tiles under it."""
    return not whole_tiles(TileConfig(**entry["config"]), *entry["shape"])


def _distance(entry: dict, bucket) -> float:
    """How far ``entry``'s bucket lies from ``bucket``, in log2 steps over M, N and K."""
    return sum(abs(math.log2(x) - math.log2(y)) for x, y in zip(entry["bucket"], bucket))


def _load(path: Path) -> dict:
    """The entries of the cache at ``path`` (re-read only when the file changes)."""
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        return {}
    return _parse(path, stamp)


@functools.lru_cache(maxsize=8)
def _parse(path: Path, stamp: int) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ValueError(
            f"tuning cache {path} is unreadable ({error}); delete it or fix it"
        ) from None
    if data.get("format") != FORMAT:
        raise ValueError(
            f"tuning cache {path} has format {data.get('format')!r}; expected {FORMAT}"
        )
    return data.get("entries", {})


@functools.cache
def device_key() -> tuple[str, str]:
    """(device name, ``sm_XY``) of the current GPU: what cache entries are matched on."""
    from numba import cuda

    from .timing import device_name

    major, minor = cuda.get_current_device().compute_capability
    return device_name(), f"sm_{major}{minor}"


def _nearest(
    entries: dict, dtype, layout: str | None, bucket, device: str, arch: str, edge: bool = False
):
    """The entry closest to ``bucket`` (in log2 steps) for this device, or its architecture,
    among those tuned on whole tiles (``edge`` False) or on edge tiles (True)."""
    dtype = np.dtype(dtype).name
    for match in (lambda e: e["device"] == device, lambda e: e["arch"] == arch):
        found = [
            e
            for e in entries.values()
            if match(e)
            and e["dtype"] == dtype
            and (layout is None or e["layout"] == layout)
            and _tuned_on_edge_tiles(e) == edge
        ]
        if found:
            return min(found, key=lambda e: _distance(e, bucket))
    return None


def config_for(a: MatrixDesc, b: MatrixDesc, c: MatrixDesc | None = None) -> TileConfig:
    """The tile config ``matmul`` uses for these operands on the current device."""
    (M, K), N = a.shape, b.shape[1]
    return config_for_shape(M, N, K, a.dtype, layout_key(a, b))


def config_for_shape(
    M: int, N: int, K: int, dtype=np.float32, layout: str = "row-row"
) -> TileConfig:
    """The tile config for C (M x N) = A (M x K) @ B with A and B in ``layout`` (see
    :func:`layout_key`) on the current device: the tuning cache, then the shipped
    winners, then ``DEFAULT_CONFIGS``; on the simulator, ``SIMULATOR_CONFIG``. Where the
    product has edge tiles under that config (``tiled.whole_tiles``), as
    ``tiled.for_edge_tiles`` runs it (tall tiles with large register tiles transposed)."""
    if simulated():
        return SIMULATOR_CONFIG
    user_cache = cache_path()
    config, for_edges = _configs_for(
        np.dtype(dtype),
        layout,
        shape_bucket(M, N, K),
        user_cache,
        _stamp(user_cache),
        _stamp(SHIPPED),
    )
    if whole_tiles(config, M, N, K):
        return config
    return for_edges if for_edges is not None else for_edge_tiles(config, dtype)


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


@functools.lru_cache(maxsize=1024)
def _configs_for(
    dtype, layout: str, bucket, user_cache: Path, *stamps
) -> tuple[TileConfig, TileConfig | None]:
    """(the winner tuned on whole tiles, or ``DEFAULT_CONFIGS``; the winner tuned on edge
    tiles where one lies as near ``bucket`` as that, else None), memoised per shape class
    and cache-file versions (``stamps``)."""
    whole = _find(dtype, layout, bucket, user_cache, edge=False)
    edges = _find(dtype, layout, bucket, user_cache, edge=True)
    if edges and whole and _distance(edges, bucket) > _distance(whole, bucket):
        edges = None  # a winner tuned on whole tiles nearer this bucket serves it
    return (
        TileConfig(**whole["config"]) if whole is not None else DEFAULT_CONFIGS[dtype],
        TileConfig(**edges["config"]) if edges is not None else None,
    )


def _find(dtype, layout: str, bucket, user_cache: Path, edge: bool) -> dict | None:
    """The first entry that fits this device: the user's cache, then the shipped winners;
    in each the nearest of ``layout``, then of any layout."""
    device, arch = device_key()
    limit = shared_memory_limit()
    for entries in (_load(user_cache), _load(SHIPPED)):
        for want_layout in (layout, None):
            entry = _nearest(entries, dtype, want_layout, bucket, device, arch, edge)
            if entry is not None and TileConfig(**entry["config"]).shared_bytes(dtype) <= limit:
                return entry
    return None


def store(path: Path, device: str, arch: str, dtype, layout: str, shape, best: dict) -> None:
    """Add (or replace) one winner in the JSON cache at ``path``, under its shape class: the
    bucket of ``shape``, and whether ``shape`` has edge tiles under the winner."""
    entries = _load(path)
    bucket = shape_bucket(*shape)
    edge = not whole_tiles(best["config"], *shape)
    entries[_key(device, dtype, layout, bucket, edge)] = {
        "device": device,
        "arch": arch,
        "dtype": np.dtype(dtype).name,
        "layout": layout,
        "bucket": list(bucket),
        "shape": list(shape),
        "config": asdict(best["config"]),
        "seconds": best["seconds"],
        "tflops": best["tflops"],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True))
    forget_prepared_calls()  # calls prepared before planned with the configs this replaces
