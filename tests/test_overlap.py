"""Programmatic dependent launch (``launch.programmatic_launch``): which launches use it, the
kernels built for it on the simulator, and on a GPU chains of launches that each read what the
one before wrote, issued back to back, so that a kernel touching memory before the launch
ahead has finished would read stale values."""

from types import SimpleNamespace

import numpy as np
import pytest
from numba import cuda

import numba_gemm
from checks import assert_product, assert_triple
from numba_gemm import TileConfig, launch
from numba_gemm.descriptor import describe
from numba_gemm.kernels import tiled, triple_product
from numba_gemm.launch import devices
from numba_gemm.reference import make_operands, make_triple_operands, poisoned, relative_error


@pytest.mark.parametrize(
    "capability, enabled, expected",
    [
        ((8, 0), True, False),  # no griddepcontrol before Hopper
        ((9, 0), True, True),
        ((10, 0), True, True),
        ((9, 0), False, False),  # OVERLAP_LAUNCHES switched off
    ],
)
def test_programmatic_launch_from_hopper_on(capability, enabled, expected, monkeypatch):
    monkeypatch.setattr(devices, "SIMULATED", False)
    monkeypatch.setattr(
        devices.cuda,
        "get_current_device",
        lambda: SimpleNamespace(id=0, compute_capability=capability),
    )
    monkeypatch.setattr(devices, "OVERLAP_LAUNCHES", enabled)
    assert launch.programmatic_launch() is expected


@pytest.mark.skipif(not cuda.config.ENABLE_CUDASIM, reason="the simulator's answer")
def test_no_programmatic_launch_on_the_simulator():
    assert launch.programmatic_launch() is False
    a, b = make_operands(8, 8, 8, np.float32, "row", np.random.default_rng(0))
    descs = describe(a, "a"), describe(b, "b"), describe(poisoned((8, 8), np.float32), "out")
    assert tiled.plan_tiled(tiled.TileConfig(16, 16, 4, 4, 4, 2, 1), *descs).programmatic is False


@pytest.mark.skipif(not cuda.config.ENABLE_CUDASIM, reason="forces the flag on the simulator")
@pytest.mark.parametrize("layout", ["row", "col"])
def test_kernels_built_for_programmatic_launch(layout, rng, monkeypatch):
    # The kernels compiled with their wait and release (the simulator's twins do nothing)
    # compute what the others do, and their plans say how to launch them.
    for module in (tiled, triple_product):
        monkeypatch.setattr(module, "programmatic_launch", lambda: True)
    config = TileConfig(16, 16, 4, 4, 4, 2, 1)
    a, b = make_operands(19, 21, 9, np.float32, layout, rng)
    out = poisoned((19, 21), np.float32, layout=layout)
    descs = describe(a, "a"), describe(b, "b"), describe(out, "out")
    assert tiled.plan_tiled(config, *descs).programmatic is True
    numba_gemm.matmul(a, b, out, algorithm="tiled", config=config)
    assert_product(out, a, b, np.float32)
    a, b, c = make_triple_operands(19, 9, 21, 17, np.float32, layout, rng)
    out = poisoned((19, 17), np.float32, layout=layout)
    numba_gemm.triple(a, b, c, out, algorithm="fused", config=config)
    assert_triple(out, a, b, c, np.float32)


# --- on a GPU ---------------------------------------------------------------------------------

STEPS = 40  # launches in a chain, queued without waiting


def _orthogonal(n: int, rng) -> np.ndarray:
    """A float32 matrix near an orthogonal one: a chain of products by it keeps its scale."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return q.astype(np.float32)


def _chain_error(result, x0: np.ndarray, factors) -> float:
    """Relative error of ``result`` against x0 times each of ``factors`` in turn, in float64."""
    expected = x0.astype(np.float64)
    for factor in factors:
        expected = expected @ factor.astype(np.float64)
    return relative_error(result, expected)


@pytest.mark.gpu
def test_library_launches_use_it_on_hopper(rng):
    hopper = cuda.get_current_device().compute_capability >= launch.PROGRAMMATIC_LAUNCH_CC
    assert launch.programmatic_launch() is hopper
    a, b = (cuda.to_device(x) for x in make_operands(64, 64, 64, np.float32, "row", rng))
    out = cuda.device_array((64, 64), np.float32)
    plan = tiled.plan_tiled(
        TileConfig(32, 32, 16, 4, 4, 2, 1), describe(a, "a"), describe(b, "b"), describe(out, "out")
    )
    assert plan.programmatic is hopper
    assert launch.PreparedLaunch(plan).programmatic is hopper


@pytest.mark.gpu
@pytest.mark.parametrize("n", [512, 300])  # whole tiles; edge tiles
def test_chain_of_matmuls_back_to_back(n, rng):
    # x <- x @ w, STEPS times, alternating two buffers, a Numba kernel (no programmatic launch
    # of its own) negating x every fifth step: every launch reads what the one before wrote.
    @cuda.jit
    def negate(x):
        i, j = cuda.grid(2)
        if i < x.shape[0] and j < x.shape[1]:
            x[i, j] = -x[i, j]

    x0 = rng.standard_normal((n, n)).astype(np.float32)
    w = _orthogonal(n, rng)
    buffers = [cuda.to_device(x0), cuda.to_device(np.full((n, n), np.nan, np.float32))]
    w_device = cuda.to_device(w)
    factors = []
    for step in range(STEPS):
        x, y = buffers[step % 2], buffers[(step + 1) % 2]
        numba_gemm.matmul(x, w_device, y, algorithm="tiled")
        factors.append(w)
        if step % 5 == 4:
            negate[(n // 16 + 1, n // 16 + 1), (16, 16)](y)
            factors.append(-np.eye(n, dtype=np.float32))
    assert _chain_error(buffers[STEPS % 2], x0, factors) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("n, algorithm", [(512, "fused"), (256, "fused"), (512, "unfused")])
def test_chain_of_triple_products_back_to_back(n, algorithm, rng):
    # d <- d @ b @ c, STEPS times, alternating two buffers: the fused kernel's counters and its
    # intermediate are reused by every launch, and each reads the last one's D.
    x0 = rng.standard_normal((n, n)).astype(np.float32)
    b, c = _orthogonal(n, rng), _orthogonal(n, rng)
    buffers = [cuda.to_device(x0), cuda.to_device(np.full((n, n), np.nan, np.float32))]
    b_device, c_device = cuda.to_device(b), cuda.to_device(c)
    for step in range(STEPS):
        numba_gemm.triple(
            buffers[step % 2], b_device, c_device, buffers[(step + 1) % 2], algorithm=algorithm
        )
    assert _chain_error(buffers[STEPS % 2], x0, [b, c] * STEPS) < 1e-4


def _graph_edge_types(graph) -> list[int]:
    """The dependency type (``CUgraphDependencyType``) of each edge of a CUDA graph."""
    from cuda.bindings import driver as cu

    get_edges = getattr(cu, "cuGraphGetEdges_v2", cu.cuGraphGetEdges)  # edge data: 12.x's _v2
    result = get_edges(graph, 0)  # (error, from, to, edge data, count)
    launch.checked(result[:1], "cuGraphGetEdges")
    result = get_edges(graph, result[-1])
    launch.checked(result[:1], "cuGraphGetEdges")
    return [int(edge.type) for edge in result[3][: result[-1]]]


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["fused", "unfused"])
def test_chain_of_triple_products_captured_in_a_graph(algorithm, rng):
    # The chain above captured from a stream into a CUDA graph and replayed: on Hopper every
    # launch after the first becomes a programmatic edge (the kernel may start before the one
    # ahead has finished; its wait holds it), elsewhere a plain one. Each replay starts from
    # fresh inputs, in buffers poisoned before it, so a replay that skipped a write or read
    # ahead of one cannot pass.
    from cuda.bindings import driver as cu

    n = 512
    b, c = _orthogonal(n, rng), _orthogonal(n, rng)
    stream = cuda.stream()
    nan = np.full((n, n), np.nan, np.float32)
    buffers = [cuda.to_device(nan, stream=stream), cuda.to_device(nan, stream=stream)]
    b_device, c_device = cuda.to_device(b, stream=stream), cuda.to_device(c, stream=stream)

    def chain():
        for step in range(STEPS):
            numba_gemm.triple(
                buffers[step % 2],
                b_device,
                c_device,
                buffers[(step + 1) % 2],
                algorithm=algorithm,
                stream=stream,
            )

    chain()  # compiles, allocates the counters and the intermediate, prepares each call
    stream.synchronize()
    handle = launch.stream_handle(stream)
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    launch.checked(cu.cuStreamBeginCapture(handle, mode), "cuStreamBeginCapture")
    try:
        chain()
    finally:
        graph = launch.checked(cu.cuStreamEndCapture(handle), "cuStreamEndCapture")
    kernels = STEPS * (1 if algorithm == "fused" else 2)
    programmatic = int(cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
    expected = programmatic if launch.programmatic_launch() else 0
    assert _graph_edge_types(graph) == [expected] * (kernels - 1)
    replay = launch.checked(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    try:
        for _ in range(2):
            x0 = rng.standard_normal((n, n)).astype(np.float32)
            buffers[0].copy_to_device(x0, stream=stream)
            buffers[1].copy_to_device(nan, stream=stream)
            launch.checked(cu.cuGraphLaunch(replay, handle), "cuGraphLaunch")
            result = buffers[STEPS % 2].copy_to_host(stream=stream)
            stream.synchronize()
            assert _chain_error(result, x0, [b, c] * STEPS) < 1e-4
    finally:
        cu.cuGraphExecDestroy(replay)
        cu.cuGraphDestroy(graph)
