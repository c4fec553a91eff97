"""Precision: JAX's names for how a product is computed, the dtypes each takes, tolerances.

A *preset* names the algorithm as LHS_RHS_ACCUM, as ``jax.lax.DotAlgorithmPreset`` does:
the format the tensor cores (or FMA units) multiply in, and the accumulator. Float32
operands can run on the tensor cores rounded to TF32 or bfloat16, or split into two or
three such parts whose 3, 6 or 9 partial products together recover (nearly) float32
accuracy (the ``_X3``/``_X6``/``_X9`` presets).

:func:`resolve` turns what a caller passes (``None``, a preset name, a
``jax.lax.DotAlgorithmPreset`` or ``jax.lax.Precision`` member, ``"highest"``, ``"high"``,
``"default"``) into one :class:`Preset` for the operands' dtype, or raises naming both.
:func:`output_dtypes` says which result dtypes a preset may write; :func:`tolerance` is the
bound the tests, the demo and the benchmarks check results against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = [
    "BFLOAT16",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "Preset",
    "PRESETS",
    "normalise",
    "resolve",
    "default_preset",
    "output_dtypes",
    "unit_roundoff",
    "tolerance",
]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)


@dataclass(frozen=True)
class Preset:
    """One algorithm: ``name`` (JAX's), the ``operand`` format the units multiply
    (``"bf16"``, ``"f16"``, ``"tf32"``, ``"f32"``, ``"f64"``), the number of ``parts`` each
    float32 operand is split into (1: rounded once), the partial ``products`` summed, as
    (part of A, part of B) pairs in the order they are added (smallest first), and the input
    dtypes it takes."""

    name: str
    operand: str
    parts: int
    products: tuple[tuple[int, int], ...]
    inputs: tuple[np.dtype, ...]

    @property
    def tensor_cores(self) -> bool:
        return self.operand in ("bf16", "f16", "tf32")

    def __str__(self) -> str:
        return self.name


_ONE = ((0, 0),)
# Parts: 0 = hi (the float32 with its low bits cleared), 1 = the remainder (X3) or mid, 2 = lo.
_X3 = ((0, 1), (1, 0), (0, 0))
_X6 = ((1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0))
_X9 = ((2, 2), (1, 2), (2, 1), (1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0))

PRESETS = {
    p.name: p
    for p in (
        Preset("BF16_BF16_F32", "bf16", 1, _ONE, (BFLOAT16, FLOAT32)),
        Preset("BF16_BF16_F32_X3", "bf16", 2, _X3, (FLOAT32,)),
        Preset("BF16_BF16_F32_X6", "bf16", 3, _X6, (FLOAT32,)),
        Preset("BF16_BF16_F32_X9", "bf16", 3, _X9, (FLOAT32,)),
        Preset("TF32_TF32_F32", "tf32", 1, _ONE, (FLOAT32,)),
        Preset("TF32_TF32_F32_X3", "tf32", 2, _X3, (FLOAT32,)),
        Preset("F16_F16_F32", "f16", 1, _ONE, (FLOAT16,)),
        Preset("F32_F32_F32", "f32", 1, _ONE, (FLOAT32,)),
        Preset("F64_F64_F64", "f64", 1, _ONE, (FLOAT64,)),
    )
}

# The preset each dtype gets with precision=None: exact for float32/float64 (the FFMA kernels,
# as before presets existed), the tensor cores' own format for 16-bit inputs.
_DEFAULT = {
    FLOAT32: "F32_F32_F32",
    FLOAT64: "F64_F64_F64",
    BFLOAT16: "BF16_BF16_F32",
    FLOAT16: "F16_F16_F32",
}
# JAX's lax.Precision on GPUs with tensor cores: DEFAULT and HIGH run float32 as TF32, HIGHEST
# as float32; 16-bit and float64 operands have one algorithm whatever the precision.
_JAX_FLOAT32 = {"default": "TF32_TF32_F32", "high": "TF32_TF32_F32", "highest": "F32_F32_F32"}


def default_preset(dtype) -> Preset:
    """The preset ``precision=None`` gives operands of ``dtype``."""
    return PRESETS[_DEFAULT[np.dtype(dtype)]]


def _name_of(precision) -> str:
    """The name inside what a caller passed: a str, or a JAX enum member (by duck type, so that
    this module never imports JAX)."""
    if isinstance(precision, str):
        return precision
    kind = type(precision).__name__
    if kind in ("DotAlgorithmPreset", "Precision") and hasattr(precision, "name"):
        return precision.name
    raise TypeError(
        "precision must be None, a preset name such as 'BF16_BF16_F32', a "
        "jax.lax.DotAlgorithmPreset or jax.lax.Precision member, or 'default'/'high'/'highest'; "
        f"got {precision!r}"
    )


def normalise(precision) -> str | None:
    """``precision`` checked and named (a preset name or ``"DEFAULT"``, ``"HIGH"``,
    ``"HIGHEST"``), before any dtype is known; ``None`` stays ``None``. ``TypeError`` or
    ``ValueError`` for what no dtype could take."""
    if precision is None:
        return None
    name = _name_of(precision).upper()
    if name.lower() not in _JAX_FLOAT32 and name not in PRESETS:
        raise ValueError(
            f"unknown precision {name!r}; choose one of {', '.join(PRESETS)} or "
            "'default'/'high'/'highest'"
        )
    return name


def resolve(precision, dtype) -> Preset:
    """The preset that computes a product of ``dtype`` operands at ``precision``.

    ``None`` keeps each dtype's exact product (:func:`default_preset`); ``"default"``,
    ``"high"``, ``"highest"`` (any case, or ``jax.lax.Precision`` members) mean what
    ``jax.lax.dot_general`` means on a GPU with tensor cores; a preset name (or a
    ``jax.lax.DotAlgorithmPreset`` member) must take ``dtype`` (``ValueError`` naming both).
    """
    dtype = np.dtype(dtype)
    if dtype not in _DEFAULT:
        raise TypeError(
            f"operands of dtype {dtype} have no precision; numba-gemm computes "
            + ", ".join(str(d) for d in _DEFAULT)
        )
    name = normalise(precision)
    if name is None:
        return default_preset(dtype)
    if name.lower() in _JAX_FLOAT32:
        return PRESETS[_JAX_FLOAT32[name.lower()]] if dtype == FLOAT32 else default_preset(dtype)
    preset = PRESETS[name]
    if dtype not in preset.inputs:
        raise ValueError(
            f"precision {preset.name} takes {' or '.join(str(d) for d in preset.inputs)} "
            f"operands; these are {dtype}"
        )
    return preset


def output_dtypes(preset: Preset, dtype) -> tuple[np.dtype, ...]:
    """Result dtypes a product of ``dtype`` operands under ``preset`` may write: the operands'
    own first (the default); 16-bit operands may also write their float32 accumulator."""
    dtype = np.dtype(dtype)
    if dtype in (BFLOAT16, FLOAT16):
        return (dtype, FLOAT32)
    return (dtype,)


# Relative error of one operand as the multiplier sees it: rounding to nearest costs half a
# unit in the last place of the format's significand (bf16: 8 bits, TF32 and f16: 11); a split
# leaves what its dropped products and its last part's rounding miss (derived in
# docs/design/tensor-cores.md).
_OPERAND_ROUNDOFF = {
    "BF16_BF16_F32": 2.0**-9,
    "BF16_BF16_F32_X3": 2.0**-14,  # lo*lo dropped: |lo| < 2^-7 |x|
    "BF16_BF16_F32_X6": 2.0**-21,  # mid*lo dropped: 2^-7 * 2^-14
    "BF16_BF16_F32_X9": 2.0**-23,  # lo rounded to 8 bits of a remainder < 2^-14 |x|
    "TF32_TF32_F32": 2.0**-11,
    "TF32_TF32_F32_X3": 2.0**-20,  # lo*lo dropped: |lo| < 2^-10 |x|
    "F16_F16_F32": 2.0**-11,
    "F32_F32_F32": 2.0**-24,
    "F64_F64_F64": 2.0**-53,
}


def unit_roundoff(preset: Preset, dtype) -> float:
    """The relative error the multiplier adds to one operand of ``dtype`` under ``preset``:
    0 where the operand is already in the format multiplied (bf16 operands under
    BF16_BF16_F32, f16 under F16_F16_F32)."""
    dtype = np.dtype(dtype)
    if dtype in (BFLOAT16, FLOAT16):
        return 0.0
    return _OPERAND_ROUNDOFF[preset.name]


def _epsilon(dtype: np.dtype) -> float:
    """Machine epsilon of a float dtype, bfloat16 (ml_dtypes' finfo) included."""
    return float(ml_dtypes.finfo(dtype).eps)


def tolerance(preset: Preset, dtype, K: int, out_dtype=None) -> float:
    """Bound on the relative (Frobenius) error of a K-term product of random ``dtype``
    operands under ``preset`` written as ``out_dtype`` (default: ``dtype``).

    Three terms: both operands' rounding as multiplied (4 u_in: each operand's relative error,
    twice over for safety; it does not grow with K for random-sign sums), the accumulator's
    rounding (2 eps sqrt(K), as for the FFMA kernels: float32, or float64 under F64), and
    the result's rounding to ``out_dtype`` (2 u_out).
    """
    out = np.dtype(dtype if out_dtype is None else out_dtype)
    accumulator = FLOAT64 if preset.operand == "f64" else FLOAT32
    u_out = _epsilon(out) / 2 if out != accumulator else 0.0
    return (
        4 * unit_roundoff(preset, dtype)
        + 2 * _epsilon(accumulator) * math.sqrt(max(K, 1))
        + 2 * u_out
    )
