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

The cache file is written atomically (a temporary file renamed over it) with concurrent writers
merged under a lock; on load every entry is validated, and a file or entry that is unreadable,
malformed or hostile is skipped with one warning naming the file: a call never fails because of
the cache. Lookups are memoised per device, shape class and version of each file.

This module imports nothing from ``api``: ``api`` plans with it, and ``autotune`` (above
``api``) times candidates and stores winners through it.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import math
import os
import tempfile
import threading
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .descriptor import MatrixDesc, current_device
from .kernels.tiled import (
    DEFAULT_CONFIGS,
    SIMULATOR_CONFIG,
    TileConfig,
    for_edge_tiles,
    whole_tiles,
)
from .launch import SIMULATED, shared_memory_limit
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
    """The valid entries of the cache at ``path`` (re-read only when the file changes)."""
    return _parse(path, _stamp(path))


@functools.lru_cache(maxsize=8)
def _parse(path: Path, stamp) -> dict:
    """The valid entries of the file at ``path`` as of ``stamp``; one warning naming the file
    where it is unreadable or where entries are dropped."""
    if stamp is None:
        return {}
    entries, problem = _read_entries(path)
    if problem:
        warnings.warn(
            f"tuning cache {path}: {problem}; tuned configs fall back to the shipped ones "
            f"(run numba_gemm.tune again, or delete the file)",
            RuntimeWarning,
            stacklevel=2,
        )
    return entries


def _read_entries(path: Path) -> tuple[dict, str | None]:
    """(the valid entries of the file at ``path``, what was wrong with it or None)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError, RecursionError, MemoryError) as error:
        # ValueError covers bad JSON and bad UTF-8; RecursionError deep nesting ("[" * 10**5)
        return {}, f"unreadable ({type(error).__name__}: {str(error)[:200]}); ignored"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        return {}, f"format {found!r}, expected {FORMAT}; ignored"
    raw = data.get("entries")
    if not isinstance(raw, dict):
        return {}, "no 'entries' table; ignored"
    entries = {key: entry for key, entry in raw.items() if _valid_entry(entry)}
    dropped = len(raw) - len(entries)
    return entries, f"{dropped} malformed entries ignored" if dropped else None


def _valid_entry(entry) -> bool:
    """Whether a cache entry has every field :func:`store` writes, of the right type (timings
    finite and positive), and a config valid for its dtype."""
    try:
        strings = ("device", "arch", "dtype", "layout")
        if not isinstance(entry, dict) or not all(isinstance(entry[k], str) for k in strings):
            return False
        dtype = np.dtype(entry["dtype"])
        if dtype not in DEFAULT_CONFIGS:  # the tiled kernel's dtypes: float32, float64
            return False
        for field in ("bucket", "shape"):
            value = entry[field]
            if not (
                isinstance(value, list)
                and len(value) == 3
                and all(type(v) is int and 0 < v <= 1 << 40 for v in value)
            ):
                return False
        if not all(v & (v - 1) == 0 for v in entry["bucket"]):
            return False
        for field in ("seconds", "tflops"):  # a timing: a finite positive number
            value = entry[field]
            if type(value) not in (int, float) or not 0 < value < math.inf:
                return False
        config = entry["config"]
        if not isinstance(config, dict) or not all(type(v) is int for v in config.values()):
            return False
        TileConfig(**config).check(dtype)  # every field in range, valid for the dtype
    except (KeyError, TypeError, ValueError):
        return False
    return True


def device_key() -> tuple[str, str]:
    """(device name, ``sm_XY``) of the current GPU: what cache entries are matched on."""
    return _device_key(current_device())


@functools.cache
def _device_key(device: int) -> tuple[str, str]:
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
    if SIMULATED:
        return SIMULATOR_CONFIG
    user_cache = cache_path()
    config, for_edges = _configs_for(
        np.dtype(dtype),
        layout,
        shape_bucket(M, N, K),
        current_device(),
        user_cache,
        _stamp(user_cache),
        _stamp(SHIPPED),
    )
    if whole_tiles(config, M, N, K):
        return config
    return for_edges if for_edges is not None else for_edge_tiles(config, dtype)


def _stamp(path: Path) -> tuple | None:
    """The version of the file at ``path`` (None where there is none): a rename over it
    changes the inode, a rewrite the time or size."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_ino, stat.st_size


@functools.lru_cache(maxsize=1024)
def _configs_for(
    dtype, layout: str, bucket, device: int, user_cache: Path, *stamps
) -> tuple[TileConfig, TileConfig | None]:
    """(the winner tuned on whole tiles, or ``DEFAULT_CONFIGS``; the winner tuned on edge
    tiles where one lies as near ``bucket`` as that, else None), memoised per shape class,
    device and cache-file versions (``stamps``)."""
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


_WRITING = threading.Lock()  # writers of this process; other processes: the lock file


@contextlib.contextmanager
def _locked(path: Path):
    """Hold the cache at ``path`` for a read-modify-write: this process's lock, then an
    exclusive ``flock`` on ``<path>.lock`` (where the platform has one) for other processes."""
    with _WRITING:
        try:
            import fcntl
        except ImportError:  # no flock (Windows): threads of one process are still ordered
            yield
            return
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a
    reader sees the old file or the new one, never part of one."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def store(path: Path, device: str, arch: str, dtype, layout: str, shape, best: dict) -> None:
    """Add (or replace) one winner in the JSON cache at ``path``, under its shape class: the
    bucket of ``shape``, and whether ``shape`` has edge tiles under the winner. Concurrent
    writers (threads or processes) are merged, each keeping the others' winners; the file is
    replaced atomically; malformed entries already there are dropped."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        entries, _ = _read_entries(path)  # under the lock, the file as it is now
        _add_entry(entries, device, arch, dtype, layout, shape, best)
        _write_atomically(
            path, json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
        )
    forget_prepared_calls()  # calls prepared before planned with the configs this replaces


def _add_entry(entries: dict, device: str, arch: str, dtype, layout: str, shape, best: dict):
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
