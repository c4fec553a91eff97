"""A catalogue of bad and edge inputs, each with what it must give: the exception and a fragment
of its message (naming the argument), or the result NumPy gives. Every refusal comes before any
launch: the operands are checked unchanged afterwards (``test_refusals_leave_inputs_alone``).

Runs on the simulator (CI) and on a GPU. The JAX cases run on JAX's CPU backend.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import numba_gemm
from numba_gemm import TileConfig
from numba_gemm.descriptor import MatrixDesc, describe, read_cuda_array_interface
from numba_gemm.launch import SIMULATED

F32 = np.float32


def _rand(*shape, dtype=F32, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


A, B = _rand(3, 5), _rand(5, 4)


class Interface:
    """An object offering only ``__cuda_array_interface__`` (a hand-written one)."""

    def __init__(self, **fields):
        self.__cuda_array_interface__ = fields


def _cai(base=None, **changes):
    """A valid interface for a 3 x 4 float32 matrix (over a host buffer: these are refused
    before anything reads it), with ``changes`` applied (None deletes a key)."""
    base = np.zeros((3, 4), F32) if base is None else base
    fields = {
        "shape": base.shape,
        "strides": None,
        "typestr": base.dtype.str,
        "data": (base.ctypes.data, False),
        "version": 3,
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


_KEEP = np.zeros((3, 4), F32)  # the buffer the interfaces above point at, kept alive


def _strided_out(shape, byte_strides):
    """A float32 view of ``shape`` with ``byte_strides`` (negative ones step back from the
    middle of its buffer)."""
    base = np.zeros(64, F32)
    return np.lib.stride_tricks.as_strided(base[32:], shape, byte_strides)


def _masked():
    return np.ma.masked_array(A, mask=np.zeros_like(A, bool))


def _read_only(shape=(3, 4)):
    out = np.empty(shape, F32)
    out.flags.writeable = False
    return out


def _device(x):
    return cuda.to_device(np.ascontiguousarray(x))


_KEPT = []  # device arrays behind hand-written interfaces


def _read_only_interface():
    """A 3 x 4 float32 device matrix whose interface says it is read-only."""
    if SIMULATED:  # the simulator's device arrays are host memory, with no interface
        fields = _cai(_KEEP)
    else:
        _KEPT.append(_device(np.zeros((3, 4), F32)))
        fields = dict(_KEPT[-1].__cuda_array_interface__)
    return Interface(**dict(fields, data=(fields["data"][0], True)))


def _jax_cpu():
    return _jax().devices("cpu")[0]


def _config_for_other_dtype():
    return TileConfig(16, 16, 4, 2, 2, 2, 1)  # thread_m = 2: no 16-byte float32 vectors


def _jax():
    return pytest.importorskip("jax")


def _jnp():
    return _jax().numpy


def _bridge():
    _jax()
    import jax_bridge

    return jax_bridge


# (id, thunk, expected): expected is (exception class, message fragment).
REFUSALS = [
    # -- matmul: operands ----------------------------------------------------------------
    ("list", lambda: numba_gemm.matmul([[1.0]], B), (TypeError, "a must be a NumPy array")),
    ("int32", lambda: numba_gemm.matmul(A.astype(np.int32), B), (TypeError, "a has dtype int32")),
    (
        "mixed",
        lambda: numba_gemm.matmul(A, B.astype(np.float16)),
        (TypeError, "a is float32 but b is float16"),
    ),
    ("complex", lambda: numba_gemm.matmul(A.astype(np.complex64), B), (TypeError, "complex64")),
    ("big-endian", lambda: numba_gemm.matmul(A.astype(">f4"), B), (TypeError, "a has dtype >f4")),
    ("scalar", lambda: numba_gemm.matmul(np.ones((), F32), B), (ValueError, "a is 0-D")),
    ("scalar b", lambda: numba_gemm.matmul(A, np.ones((), F32)), (ValueError, "b is 0-D")),
    (
        "inner",
        lambda: numba_gemm.matmul(A, B[:4]),
        (ValueError, "inner dimensions differ: a is 3x5 and b is 4x4"),
    ),
    (
        "inner stack",
        lambda: numba_gemm.matmul(_rand(2, 3, 5), _rand(2, 4, 4)),
        (ValueError, "inner dimensions differ: a (2, 3, 5) has 5 columns"),
    ),
    (
        "inner vectors",
        lambda: numba_gemm.matmul(_rand(3), _rand(4)),
        (ValueError, "inner dimensions differ"),
    ),
    (
        "batch",
        lambda: numba_gemm.matmul(_rand(2, 3, 5), _rand(3, 5, 4)),
        (ValueError, "do not broadcast"),
    ),
    (
        "dtypes",
        lambda: numba_gemm.matmul(A, B.astype(np.float64)),
        (TypeError, "a is float32 but b is float64"),
    ),
    ("host-device", lambda: numba_gemm.matmul(A, _device(B)), (TypeError, "a is a host")),
    ("masked", lambda: numba_gemm.matmul(_masked(), B), (TypeError, "a is a masked array")),
    (
        "misaligned",
        lambda: numba_gemm.matmul(np.zeros((3, 9), np.uint8)[:, 1:5].view(F32), B[:1]),
        (ValueError, "not multiples of its item size"),
    ),
    (
        "negative device",
        lambda: numba_gemm.matmul(_device(A)[::-1], _device(B)),
        (ValueError, "negative strides are not supported on the GPU"),
    ),
    # -- matmul: options -----------------------------------------------------------------
    ("algorithm", lambda: numba_gemm.matmul(A, B, algorithm="ijk"), (ValueError, "algorithm")),
    ("algorithm None", lambda: numba_gemm.matmul(A, B, algorithm=None), (ValueError, "one of")),
    (
        "config type",
        lambda: numba_gemm.matmul(A, B, config=(128, 128)),
        (TypeError, "config must be a numba_gemm.TileConfig"),
    ),
    (
        "config algorithm",
        lambda: numba_gemm.matmul(A, B, algorithm="mnk", config=TileConfig()),
        (ValueError, "config applies to the tiled, mma and wgmma kernels"),
    ),
    (
        "config dtype",
        lambda: numba_gemm.matmul(A, B, config=_config_for_other_dtype()),
        (ValueError, "TileConfig.thread_m = 2 must be a multiple of 4"),
    ),
    # -- matmul: out ---------------------------------------------------------------------
    ("out shape", lambda: numba_gemm.matmul(A, B, np.empty((4, 3), F32)), (ValueError, "(4, 3)")),
    (
        "out dtype",
        lambda: numba_gemm.matmul(A, B, np.empty((3, 4), np.float64)),
        (TypeError, "out is float64; the product is float32"),
    ),
    (
        "out broadcast",
        lambda: numba_gemm.matmul(A, B, np.broadcast_to(np.empty((1, 4), F32), (3, 4))),
        (ValueError, "out has stride 0 on axis 0"),
    ),
    (
        "out self-overlap",
        lambda: numba_gemm.matmul(
            A, B, np.lib.stride_tricks.as_strided(np.empty(8, F32), (3, 4), (4, 4))
        ),
        (ValueError, "distinct elements share memory"),
    ),
    (
        "out flipped broadcast",
        lambda: numba_gemm.matmul(A, B, _strided_out((3, 4), (-4, 0))),
        (ValueError, "out has stride 0 on axis 1"),
    ),
    (
        "out flipped self-overlap",
        lambda: numba_gemm.matmul(A, B, _strided_out((3, 4), (-4, 4))),
        (ValueError, "distinct elements share memory"),
    ),
    (
        "triple out flipped self-overlap",
        lambda: numba_gemm.triple(A, B, _rand(4, 2), _strided_out((3, 2), (-4, 4))),
        (ValueError, "distinct elements share memory"),
    ),
    ("out overlaps a", lambda: numba_gemm.matmul(A, B, A[:, :4]), (ValueError, "out overlaps a")),
    ("out read-only", lambda: numba_gemm.matmul(A, B, _read_only()), (ValueError, "read-only")),
    (
        "out read-only flipped",
        lambda: numba_gemm.matmul(A, B, _read_only()[::-1]),
        (ValueError, "read-only"),
    ),
    (
        "out jax",
        lambda: numba_gemm.matmul(A, B, _jax().device_put(np.zeros((3, 4), F32), _jax_cpu())),
        (ValueError, "read-only"),
    ),
    (
        "out masked",
        lambda: numba_gemm.matmul(A, B, np.ma.masked_array(np.empty((3, 4), F32))),
        (TypeError, "out is a masked array"),
    ),
    (
        "out side",
        lambda: numba_gemm.matmul(A, B, _device(np.empty((3, 4), F32))),
        (TypeError, "out must live where the inputs do"),
    ),
    ("out list", lambda: numba_gemm.matmul(A, B, [[0.0] * 4] * 3), (TypeError, "out must be")),
    (
        "out stack shape",
        lambda: numba_gemm.matmul(_rand(2, 3, 5), B, np.empty((3, 4), F32)),
        (ValueError, "the product needs (2, 3, 4)"),
    ),
    (
        "out read-only interface",
        lambda: numba_gemm.matmul(_device(A), _device(B), _read_only_interface()),
        (TypeError, "runs the kernels on host memory") if SIMULATED else (ValueError, "read-only"),
    ),
    (
        "foreign interface",
        lambda: numba_gemm.matmul(Interface(**_cai(_KEEP)), _device(np.zeros((4, 3), F32))),
        (TypeError, "a is a CUDA array of") if SIMULATED else (ValueError, "not device memory"),
    ),
    (
        "made-up pointer",
        lambda: numba_gemm.matmul(_device(A), Interface(**_cai(data=(4096, False)))),
        (TypeError, "b is a CUDA array of") if SIMULATED else (ValueError, "not device memory"),
    ),
    (
        "foreign dlpack",
        lambda: numba_gemm.matmul(_CudaDLPack(), _device(B)),
        (TypeError, "a is a CUDA array of") if SIMULATED else (BufferError, "nothing to export"),
    ),
    ("stream str", lambda: numba_gemm.matmul(A, B, stream="garbage"), (TypeError, "stream must")),
    ("stream float", lambda: numba_gemm.matmul(A, B, stream=-1.5), (TypeError, "stream must")),
    ("stream bool", lambda: numba_gemm.matmul(A, B, stream=True), (TypeError, "stream must")),
    ("stream negative", lambda: numba_gemm.matmul(A, B, stream=-3), (ValueError, "non-negative")),
    (
        "triple stream str",
        lambda: numba_gemm.triple(A, B, B.T, stream="garbage"),
        (TypeError, "stream must"),
    ),
    # -- describe: the CUDA array interface ---------------------------------------------
    ("cai not dict", lambda: describe(_NotDict()), (TypeError, "must be a dict")),
    ("cai no shape", lambda: describe(Interface(**_cai(shape=None))), (TypeError, "'shape'")),
    (
        "cai no data",
        lambda: describe(Interface(**_cai(data=None, typestr=None))),
        (TypeError, "lacks 'typestr', 'data'"),
    ),
    ("cai version", lambda: describe(Interface(**_cai(version=7))), (ValueError, "version 7")),
    ("cai version str", lambda: describe(Interface(**_cai(version="3"))), (ValueError, "'3'")),
    ("cai typestr", lambda: describe(Interface(**_cai(typestr="zz"))), (TypeError, "'zz'")),
    ("cai typestr int", lambda: describe(Interface(**_cai(typestr=5))), (TypeError, "typestr 5")),
    ("cai byte order", lambda: describe(Interface(**_cai(typestr=">f4"))), (TypeError, "byte")),
    ("cai float extent", lambda: describe(Interface(**_cai(shape=(3.0, 4)))), (TypeError, "ints")),
    ("cai bool extent", lambda: describe(Interface(**_cai(shape=(True, 4)))), (TypeError, "ints")),
    ("cai negative", lambda: describe(Interface(**_cai(shape=(-3, 4)))), (ValueError, "negative")),
    ("cai shape str", lambda: describe(Interface(**_cai(shape="3x4"))), (TypeError, "ints")),
    (
        "cai strides count",
        lambda: describe(Interface(**_cai(strides=(16,)))),
        (ValueError, "1 strides for 2 dimensions"),
    ),
    ("cai float strides", lambda: describe(Interface(**_cai(strides=(16.0, 4)))), (TypeError, "")),
    ("cai null", lambda: describe(Interface(**_cai(data=(0, False)))), (ValueError, "null")),
    (
        "cai misaligned",
        lambda: describe(Interface(**_cai(data=(_KEEP.ctypes.data + 2, False)))),
        (ValueError, "not aligned to its item size"),
    ),
    ("cai data str", lambda: describe(Interface(**_cai(data="0x1000"))), (TypeError, "pointer")),
    ("cai data 1", lambda: describe(Interface(**_cai(data=(4096,)))), (TypeError, "pointer")),
    (
        "cai read-only str",
        lambda: describe(Interface(**_cai(data=(4096, "no")))),
        (TypeError, "read-only: bool"),
    ),
    ("cai mask", lambda: describe(Interface(**_cai(mask=object()))), (TypeError, "masked")),
    ("cai stream 0", lambda: describe(Interface(**_cai(stream=0))), (ValueError, "stream")),
    ("cai stream str", lambda: describe(Interface(**_cai(stream="s"))), (ValueError, "stream")),
    ("describe 3-D", lambda: describe(_rand(2, 3, 4), "a"), (ValueError, "a must be 2-D")),
    # -- MatrixDesc built by hand --------------------------------------------------------
    (
        "desc float shape",
        lambda: MatrixDesc("a", (3.0, 4), (4, 1), np.dtype(F32), None, True, 64, None),
        (ValueError, "shape must be a tuple of two non-negative ints"),
    ),
    (
        "desc batch",
        lambda: MatrixDesc("a", (3, 4), (4, 1), np.dtype(F32), None, True, 64, None, batch=0),
        (ValueError, "batch must be an int >= 1"),
    ),
    (
        "desc dtype",
        lambda: MatrixDesc("a", (3, 4), (4, 1), "float32", None, True, 64, None),
        (TypeError, "dtype must be a numpy.dtype"),
    ),
    (
        "desc null",
        lambda: describe(MatrixDesc("a", (3, 4), (4, 1), np.dtype(F32), None, True, 0, None)),
        (ValueError, "null or misaligned address"),
    ),
    (
        "desc negative",
        lambda: describe(MatrixDesc("a", (3, 4), (-4, 1), np.dtype(F32), None, True, 64, None)),
        (ValueError, "negative strides"),
    ),
    # -- triple --------------------------------------------------------------------------
    (
        "triple algorithm",
        lambda: numba_gemm.triple(A, B, B.T, algorithm="fast"),
        (ValueError, "algorithm must be one of"),
    ),
    (
        "triple order",
        lambda: numba_gemm.triple(A, B, B.T, order="middle"),
        (ValueError, "order must be one of"),
    ),
    (
        "triple config",
        lambda: numba_gemm.triple(A, B, B.T, algorithm="unfused", config=TileConfig()),
        (ValueError, "config applies to the fused"),
    ),
    (
        "triple naive",
        lambda: numba_gemm.triple(A, B, _rand(4, 2000), algorithm="naive", order="left"),
        (ValueError, "algorithm='naive'"),
    ),
    (
        "triple inner",
        lambda: numba_gemm.triple(A, B, _rand(3, 2)),
        (ValueError, "inner dimensions differ: b is 5x4 and c is 3x2"),
    ),
    (
        "triple dtypes",
        lambda: numba_gemm.triple(A, B, _rand(4, 2, dtype=np.float64)),
        (TypeError, "b is float32 but c is float64"),
    ),
    ("triple 1-D", lambda: numba_gemm.triple(_rand(5), B, B.T), (ValueError, "a must be 2-D")),
    # -- TileConfig ----------------------------------------------------------------------
    ("config list", lambda: TileConfig(block_m=[16]), (TypeError, "TileConfig.block_m")),
    ("config float", lambda: TileConfig(block_k=8.0), (TypeError, "TileConfig.block_k")),
    ("config bool", lambda: TileConfig(stages=True), (TypeError, "TileConfig.stages")),
    ("config zero", lambda: TileConfig(block_m=0).check(F32), (ValueError, "positive integer")),
    ("config stages", lambda: TileConfig(stages=1).check(F32), (ValueError, "stages must be")),
    (
        "config threads",
        lambda: TileConfig(256, 256, 8, 4, 4).check(F32),
        (ValueError, "CUDA allows 1024"),
    ),
    # -- tune ----------------------------------------------------------------------------
    ("tune dtype", lambda: numba_gemm.tune(64, 64, dtype=np.int32), (TypeError, "dtype")),
    ("tune size", lambda: numba_gemm.tune(0, 64), (ValueError, "M must be at least 1")),
    ("tune float", lambda: numba_gemm.tune(64.5, 64), (TypeError, "M must be an int")),
    ("tune layout", lambda: numba_gemm.tune(64, 64, layout="diag"), (ValueError, "layout")),
    ("tune configs", lambda: numba_gemm.tune(64, 64, configs=[(1, 2)]), (TypeError, "configs")),
    # -- the JAX bridge ------------------------------------------------------------------
    (
        "bridge flag",
        lambda: _bridge().matmul(A, B.T, transpose_b="no"),
        (TypeError, "transpose_b must be a bool"),
    ),
    ("bridge flag int", lambda: _bridge().matmul(A, B, transpose_a=1), (TypeError, "bool")),
    (
        "bridge float axis",
        lambda: _bridge().dot_general(A, B, (((1.7,), (0,)), ((), ()))),
        (TypeError, "dimension_numbers must be"),
    ),
    (
        "bridge bool axis",
        lambda: _bridge().dot_general(A, B, (((True,), (0,)), ((), ()))),
        (TypeError, "dimension_numbers must be"),
    ),
    (
        "bridge axis range",
        lambda: _bridge().dot_general(A, B, (((2,), (0,)), ((), ()))),
        (ValueError, "out of range"),
    ),
    (
        "bridge int32",
        lambda: _bridge().matmul(A.astype(np.int32), B.astype(np.int32)),
        (TypeError, "lhs has dtype int32"),
    ),
    ("bridge 3-D", lambda: _bridge().matmul(_rand(2, 3, 5), B), (ValueError, "a must be 2-D")),
    ("bridge lowering", lambda: _bridge().matmul(A, B, lowering="ptx"), (ValueError, "lowering")),
    (
        "bridge fallback",
        lambda: _bridge().make_dot_general(fallback="yes"),
        (TypeError, "fallback must be a bool"),
    ),
    (
        "bridge config at trace time",
        lambda: (
            _jax()
            .jit(lambda a, b: _bridge().matmul(a, b, config=_config_for_other_dtype()))
            .trace(A, B)
        ),
        (ValueError, "TileConfig.thread_m = 2"),
    ),
    (
        "bridge triple naive at trace time",
        lambda: (
            _jax()
            .jit(lambda a, b, c: _bridge().triple(a, b, c, algorithm="naive", order="left"))
            .trace(A, B, _rand(4, 2000))
        ),
        (ValueError, "algorithm='naive'"),
    ),
    (
        "bridge triple config at trace time",
        lambda: (
            _jax()
            .jit(lambda a, b, c: _bridge().triple(a, b, c, config=_config_for_other_dtype()))
            .trace(A, B, B.T)
        ),
        (ValueError, "TileConfig.thread_m = 2"),
    ),
    (
        "bridge triple dtypes",
        lambda: _bridge().triple(A, B, _rand(4, 2).astype(np.int32)),
        (TypeError, "c has dtype int32"),
    ),
]


class _CudaDLPack:
    """An object that says it is a CUDA DLPack producer (it has no memory to export)."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        raise BufferError("nothing to export")


class _NotDict:
    __cuda_array_interface__ = [("shape", (3, 4))]


@pytest.mark.parametrize("thunk, expected", [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_refusal(thunk, expected):
    exception, fragment = expected
    with pytest.raises(exception) as raised:
        thunk()
    assert fragment in str(raised.value), str(raised.value)


def test_the_catalogue_is_large_and_distinct():
    assert len(REFUSALS) + len(RESULTS) >= 60
    assert len({c[0] for c in REFUSALS + RESULTS}) == len(REFUSALS) + len(RESULTS)


def test_refusals_leave_inputs_alone():
    a, b = A.copy(), B.copy()
    for out in (np.empty((4, 3), F32), a[:, :4], _read_only()):
        with pytest.raises((TypeError, ValueError)):
            numba_gemm.matmul(a, b, out)
    np.testing.assert_array_equal(a, A)
    np.testing.assert_array_equal(b, B)


def _flipped(x):
    return x[::-1, ::-1]


def _out_flipped():
    out = np.full((4, 3), np.nan, F32)
    numba_gemm.matmul(A, B, out.T[::-1])  # an out of strides (-1, 3)
    return out.T[::-1]


def _with_nan():
    a = A.copy()
    a[1, 2] = np.nan
    return numba_gemm.matmul(a, B), np.matmul(a, B)


def _bridge_triple_zero_k():
    jnp = _jnp()
    return _bridge().triple(jnp.ones((3, 0)), jnp.ones((0, 4)), jnp.ones((4, 2)))


# (id, thunk giving our result, NumPy's result): NumPy semantics, checked to float32 accuracy.
RESULTS = [
    ("empty M", lambda: numba_gemm.matmul(_rand(0, 5), B), np.zeros((0, 4), F32)),
    ("empty N", lambda: numba_gemm.matmul(A, _rand(5, 0)), np.zeros((3, 0), F32)),
    ("empty K", lambda: numba_gemm.matmul(_rand(3, 0), _rand(0, 4)), np.zeros((3, 4), F32)),
    ("empty batch", lambda: numba_gemm.matmul(_rand(0, 3, 5), B), np.zeros((0, 3, 4), F32)),
    (
        "empty K device",
        lambda: numba_gemm.matmul(_device(_rand(3, 0)), _device(_rand(0, 4))).copy_to_host(),
        np.zeros((3, 4), F32),
    ),
    ("row vector", lambda: numba_gemm.matmul(A[0], B), A[0] @ B),
    ("column vector", lambda: numba_gemm.matmul(A, B[:, 0]), A @ B[:, 0]),
    ("dot", lambda: numba_gemm.matmul(A[0], B[:, 0]), A[0] @ B[:, 0]),
    ("stack", lambda: numba_gemm.matmul(_rand(2, 3, 5), B), _rand(2, 3, 5) @ B),
    (
        "stack broadcast",
        lambda: numba_gemm.matmul(_rand(2, 1, 3, 5), _rand(4, 5, 4)),
        _rand(2, 1, 3, 5) @ _rand(4, 5, 4),
    ),
    ("vector stack", lambda: numba_gemm.matmul(A[0], _rand(2, 5, 4)), A[0] @ _rand(2, 5, 4)),
    ("negative host", lambda: numba_gemm.matmul(_flipped(A), B[::-1]), _flipped(A) @ B[::-1]),
    ("negative out", _out_flipped, A @ B),
    (
        "broadcast input",
        lambda: numba_gemm.matmul(np.broadcast_to(A[:1], (3, 5)), B),
        np.broadcast_to(A[:1], (3, 5)) @ B,
    ),
    ("nan", lambda: _with_nan()[0], _with_nan()[1]),
    ("triple empty M", lambda: numba_gemm.triple(_rand(0, 5), B, B.T), np.zeros((0, 5), F32)),
    (
        "triple empty K1",
        lambda: numba_gemm.triple(_rand(3, 0), _rand(0, 4), B.T),
        np.zeros((3, 5), F32),
    ),
    (
        "triple empty K2",
        lambda: numba_gemm.triple(A, _rand(5, 0), _rand(0, 2)),
        np.zeros((3, 2), F32),
    ),
    ("bridge triple empty K", lambda: np.asarray(_bridge_triple_zero_k()), np.zeros((3, 2), F32)),
    (
        "bridge empty K",
        lambda: np.asarray(_bridge().matmul(_rand(3, 0), _rand(0, 4))),
        np.zeros((3, 4), F32),
    ),
]


@pytest.mark.parametrize("thunk, expected", [c[1:] for c in RESULTS], ids=[c[0] for c in RESULTS])
def test_numpy_result(thunk, expected):
    result = thunk()
    result = np.asarray(result.copy_to_host() if hasattr(result, "copy_to_host") else result)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_describe_reads_a_valid_interface():
    fields = read_cuda_array_interface("a", _cai(_KEEP, stream=2))
    assert fields.shape == (3, 4) and fields.strides == (16, 4) and fields.stream == 2
    assert fields.pointer == _KEEP.ctypes.data and not fields.readonly


@pytest.mark.skipif(SIMULATED, reason="a made-up device pointer is refused by CUDA itself")
def test_unknown_device_pointer_is_refused():
    with pytest.raises(ValueError, match="not device memory CUDA knows"):
        describe(Interface(**_cai(_KEEP)))


@pytest.mark.parametrize("call", ["matmul", "triple"])
def test_host_out_is_written_only_at_its_elements(call, monkeypatch):
    """``out`` is the left half of ``x``; another thread writes the right half while the kernels
    run. Only out's elements are the call's to write: the other thread's last values stay (a
    copy of out's whole span, in and back, would put older ones back)."""
    x = np.zeros((3, 8), F32)
    out = x[:, :4]
    written = [0.0]

    def other_thread_writes():  # a new value each time, so that the last one must stay
        written.append(written[-1] + 1)
        x[:, 4:] = written[-1]

    if SIMULATED:  # while the simulator runs a kernel's blocks
        from numba.cuda.simulator import kernel

        run = kernel.BlockManager.run

        def run_while_writing(self, *args):
            other_thread_writes()
            return run(self, *args)

        monkeypatch.setattr(kernel.BlockManager, "run", run_while_writing)
    else:  # after the operands went to the GPU, as the kernel is launched
        from numba_gemm import api

        launch = api.launch_kernel

        def launch_while_writing(*args):
            other_thread_writes()
            return launch(*args)

        monkeypatch.setattr(api, "launch_kernel", launch_while_writing)
    if call == "matmul":
        numba_gemm.matmul(A, B, out)
        expected = A.astype(np.float64) @ B
    else:
        c = _rand(4, 4)
        numba_gemm.triple(A, B, c, out, algorithm="unfused")
        expected = A.astype(np.float64) @ B @ c
    assert len(written) > 1 and (x[:, 4:] == written[-1]).all(), "out's span was written"
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_jax_bfloat16_arrays_on_the_cpu():
    """NumPy's DLPack has no bfloat16: such JAX arrays (CPU) are read through their exported
    pointer, and the result is a bfloat16 NumPy array, as for ml_dtypes operands."""
    jnp = _jnp()
    import ml_dtypes

    rng = np.random.default_rng(3)
    a, b = (rng.integers(-4, 5, s).astype(ml_dtypes.bfloat16) for s in ((3, 5), (5, 4)))
    with _jax().default_device(_jax_cpu()):
        out = numba_gemm.matmul(jnp.asarray(a), jnp.asarray(b))
    assert isinstance(out, np.ndarray) and out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(F32), a.astype(F32) @ b.astype(F32))  # exact
