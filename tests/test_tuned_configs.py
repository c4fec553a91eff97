"""Tuned configs: shape buckets, layout keys, storing winners and finding the nearest;
tune() off a GPU."""

import json
import warnings
from dataclasses import asdict

import numpy as np
import pytest

from checks import H100_EDGE_TILES, H100_TILES
from numba_gemm import TileConfig
from numba_gemm.autotune import tune
from numba_gemm.descriptor import describe, transpose_view
from numba_gemm.launch import SIMULATED
from numba_gemm.tuned_configs import (
    SEARCH_SPACE,
    SHIPPED,
    _load,
    _nearest,
    cache_path,
    layout_key,
    shape_bucket,
    store,
)


def test_shape_buckets_round_up_to_powers_of_two_within_limits():
    assert shape_bucket(1000, 1024, 1025) == (1024, 1024, 2048)
    assert shape_bucket(1, 3, 100000) == (16, 16, 16384)


def test_layout_keys():
    a = np.ones((8, 4), np.float32)
    assert layout_key(describe(a), describe(a.T)) == "row-col"
    assert layout_key(describe(a[::2, ::2]), describe(transpose_view(a))) == "strided-col"


def test_cache_path_follows_its_environment_variables(tmp_path, monkeypatch):
    # Memoised, but on the variables it reads: a change of either shows at once.
    monkeypatch.delenv("NUMBA_GEMM_TUNE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "one"))
    assert cache_path() == tmp_path / "one" / ".cache" / "numba_gemm" / "tuning.json"
    monkeypatch.setenv("HOME", str(tmp_path / "two"))
    assert cache_path() == tmp_path / "two" / ".cache" / "numba_gemm" / "tuning.json"
    monkeypatch.setenv("NUMBA_GEMM_TUNE_CACHE", str(tmp_path / "mine.json"))
    assert cache_path() == tmp_path / "mine.json"


def test_every_search_space_config_is_valid():
    for dtype, space in SEARCH_SPACE.items():
        for config in space:
            config.check(dtype)


def test_store_then_find_the_nearest_bucket(tmp_path):
    path = tmp_path / "cache.json"
    small, big = TileConfig(64, 64, 16, 4, 4, 3, 8), TileConfig(128, 256, 16, 8, 16, 3, 8)
    for shape, config in (((1024,) * 3, small), ((8192,) * 3, big)):
        _store(path, shape, config)
    entries = _load(path)
    assert json.loads(path.read_text())["format"] == 1
    nearest = lambda bucket, device="GPU X", arch="sm_90", layout="row-row": _nearest(  # noqa: E731
        entries, np.float32, layout, bucket, device, arch
    )
    assert TileConfig(**nearest((1024, 2048, 1024))["config"]) == small
    assert TileConfig(**nearest((4096, 8192, 8192))["config"]) == big
    assert nearest((1024,) * 3, device="GPU Y")["device"] == "GPU X"  # same architecture
    assert nearest((1024,) * 3, device="GPU Y", arch="sm_80") is None
    assert nearest((1024,) * 3, layout="col-col") is None  # config_for then tries any layout
    assert _nearest(entries, np.float64, "row-row", (1024,) * 3, "GPU X", "sm_90") is None


def test_shipped_winners_are_valid_configs():
    entries = _load(SHIPPED)
    assert entries, "numba_gemm/tuned.json ships winners"
    for entry in entries.values():
        TileConfig(**entry["config"]).check(entry["dtype"])


def test_unreadable_cache_is_reported_once_and_ignored(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.warns(RuntimeWarning, match=f"tuning cache {path}: unreadable"):
        assert _load(path) == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _load(path) == {}  # the same file again: no second warning


@pytest.mark.skipif(not SIMULATED, reason="checks the refusal on the simulator")
def test_tune_needs_a_gpu():
    with pytest.raises(RuntimeError, match="GPU"):
        tune(64, 64, 64)


TALL, WIDE = H100_TILES, H100_EDGE_TILES
SMALL = TileConfig(64, 64, 16, 4, 4, 3, 8)


@pytest.fixture
def gpu_x(tmp_path, monkeypatch):
    """config_for_shape as on a GPU ("GPU X", sm_90) whose user cache is the returned path
    and which ships no winners of its own."""
    from numba_gemm import tuned_configs

    path = tmp_path / "cache.json"
    monkeypatch.setattr(tuned_configs, "SIMULATED", False)
    monkeypatch.setattr(tuned_configs, "device_key", lambda: ("GPU X", "sm_90"))
    monkeypatch.setattr(tuned_configs, "shared_memory_limit", lambda: 232448)
    monkeypatch.setattr(tuned_configs, "SHIPPED", tmp_path / "shipped.json")
    monkeypatch.setenv("NUMBA_GEMM_TUNE_CACHE", str(path))
    tuned_configs._configs_for.cache_clear()
    yield path
    tuned_configs._configs_for.cache_clear()


def _store(path, shape, config):
    store(
        path,
        "GPU X",
        "sm_90",
        np.float32,
        "row-row",
        shape,
        {"config": config, "seconds": 1.0, "tflops": 2.0},
    )


def test_a_winner_tuned_on_edge_tiles_serves_edge_tiles_only(gpu_x):
    from numba_gemm.tuned_configs import config_for_shape

    _store(gpu_x, (2048,) * 3, TALL)
    _store(gpu_x, (2047,) * 3, SMALL)  # same bucket; edge tiles under SMALL at 2047
    assert len(_load(gpu_x)) == 2  # the 2047 winner did not replace the 2048 one
    assert config_for_shape(2048, 2048, 2048) == TALL  # whole tiles under TALL
    assert config_for_shape(1536, 2048, 1024) == TALL
    for shape in ((2047, 2047, 2047), (2000, 2048, 2048), (2048, 2048, 1800)):
        assert config_for_shape(*shape) == SMALL


def test_without_an_edge_winner_edge_tiles_run_the_whole_winner_transposed(gpu_x):
    from numba_gemm.tuned_configs import config_for_shape

    _store(gpu_x, (2048,) * 3, TALL)
    assert config_for_shape(2048, 2048, 2048) == TALL
    assert config_for_shape(2047, 2047, 2047) == WIDE  # tiled.for_edge_tiles
    # an edge winner farther away than the whole one does not serve this bucket
    _store(gpu_x, (300, 300, 300), SMALL)
    assert config_for_shape(2047, 2047, 2047) == WIDE
    assert config_for_shape(300, 300, 300) == SMALL  # its own bucket: nearer than 2048's


def test_stored_entries_say_whether_their_shape_had_edge_tiles(gpu_x):
    from numba_gemm.tuned_configs import _tuned_on_edge_tiles

    _store(gpu_x, (2048,) * 3, TALL)
    _store(gpu_x, (2048, 2048, 2047), TALL)  # K not a multiple of block_k: edge tiles
    _store(gpu_x, (1536, 1536, 1536), SMALL)  # whole under SMALL: replaces 2048's whole winner
    entries = _load(gpu_x)
    assert sorted(map(_tuned_on_edge_tiles, entries.values())) == [False, True]
    assert sorted(k.endswith("|edge") for k in entries) == [False, True]


def test_a_corrupt_cache_never_breaks_a_call(gpu_x):
    from numba_gemm.kernels.tiled import DEFAULT_CONFIGS
    from numba_gemm.tuned_configs import config_for_shape

    for garbage in ("{not json", '{"format": 1, "entries": {"k": {"dev', "[1, 2]", "\x00\xff",
                    "[" * 100_000, '{"format": 1, "entries": ' + "{" * 100_000):  # fmt: skip
        gpu_x.write_text(garbage)
        with pytest.warns(RuntimeWarning, match=f"tuning cache {gpu_x}"):
            assert config_for_shape(2048, 2048, 2048) == DEFAULT_CONFIGS[np.dtype(np.float32)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # one warning per file version, not per call
            config_for_shape(4096, 4096, 4096)


HOSTILE_ENTRIES = {
    "config null": {"config": None},
    "config str": {"config": "256x128"},
    "bad field": {"config": {"block_m": 128, "bogus": 1}},
    "float field": {"config": {"block_m": 128.5}},
    "invalid tiles": {"config": {"block_m": 0}},
    "odd bucket": {"bucket": [3, 16, 16]},
    "negative shape": {"shape": [-1, 16, 16]},
    "huge shape": {"shape": [10**30, 16, 16]},
    "float16": {"dtype": "float16"},
    "unknown dtype": {"dtype": "quaternion"},
    "device list": {"device": ["GPU X"]},
    "not a dict": None,
    "nan seconds": {"seconds": float("nan")},  # json writes NaN and Infinity, and reads them
    "infinite tflops": {"tflops": float("inf")},
    "negative seconds": {"seconds": -1.0},
    "string seconds": {"seconds": "1"},
    "bool tflops": {"tflops": True},
    "huge group": {"config": {**asdict(TALL), "group_m": 10**400}},
    "huge register tile": {"config": {**asdict(TALL), "thread_m": 64, "block_m": 1024}},
}


def test_malformed_entries_are_dropped_with_one_warning(gpu_x):
    from numba_gemm.tuned_configs import config_for_shape

    _store(gpu_x, (2048,) * 3, TALL)
    data = json.loads(gpu_x.read_text())
    [valid] = data["entries"].values()
    for name, change in HOSTILE_ENTRIES.items():
        data["entries"][name] = "garbage" if change is None else {**valid, **change}
    gpu_x.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match=f"{len(HOSTILE_ENTRIES)} malformed entries ignored"):
        assert list(_load(gpu_x).values()) == [valid]
    assert config_for_shape(2048, 2048, 2048) == TALL  # the valid winner still serves
    _store(gpu_x, (300, 300, 300), SMALL)  # a later store keeps the valid, drops the rest
    assert len(json.loads(gpu_x.read_text())["entries"]) == 2


def _distinct_shapes(count: int):
    """Shapes in ``count`` (up to 100) distinct shape classes (power-of-two buckets)."""
    return [(16 << (i % 10), 16 << (i // 10), 64) for i in range(count)]


def test_concurrent_writers_keep_every_winner_and_readers_see_whole_files(tmp_path):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from numba_gemm.tuned_configs import _read_entries

    path = tmp_path / "tuning.json"
    shapes = _distinct_shapes(100)
    done, problems = threading.Event(), []

    def read():
        while not done.is_set():
            entries, problem = _read_entries(path)
            if problem:
                problems.append(problem)

    with ThreadPoolExecutor(9) as pool:
        reader = pool.submit(read)
        writers = [
            pool.submit(lambda part: [_store(path, s, SMALL) for s in part], shapes[i::8])
            for i in range(8)
        ]
        for writer in writers:
            writer.result()
        done.set()
        reader.result()
    assert problems == []
    assert len(_load(path)) == len(shapes)


def test_concurrent_processes_keep_every_winner(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "tuning.json"
    code = (
        "import sys, numpy as np\n"
        "from numba_gemm.kernels.tiled import TileConfig\n"
        "from numba_gemm.tuned_configs import store\n"
        "first = int(sys.argv[1])\n"
        "for i in range(first, 64, 4):\n"
        "    shape = (16 << (i % 10), 16 << (i // 10), 64)\n"
        "    store(sys.argv[2], 'GPU X', 'sm_90', np.float32, 'row-row', shape,\n"
        "          {'config': TileConfig(64, 64, 16, 4, 4, 3, 8), 'seconds': 1.0, 'tflops': 2.0})\n"
    )
    env = {**__import__("os").environ, "NUMBA_ENABLE_CUDASIM": "1"}
    workers = [
        subprocess.Popen([sys.executable, "-c", code, str(i), str(path)], env=env) for i in range(4)
    ]
    assert [w.wait(timeout=300) for w in workers] == [0] * 4
    assert len(_load(path)) == 64
