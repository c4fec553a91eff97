"""Tensor-core building blocks: fragment loads, operand splitting, ``mma.sync``, conversions.

Each block is PTX on a GPU (an ``@intrinsic`` of inline assembly, as in ``ptx.py``) and a plain
twin on the CUDA simulator, chosen at import time. The twins reproduce what the hardware
computes, rounding included: operands rounded to bf16 or TF32 as the kernels round them
(``cvt.rn.bf16x2.f32``: to nearest, ties to even; ``cvt.rna.tf32.f32``: to nearest, ties away),
products of those exact, sums in float32 rounded toward zero (a twin adds each ``mma``'s 16 or 8
products to the accumulator exactly and truncates the sum once).

Fragments. A warp multiplies a *block* of A (16 rows of m by ``K_STEP`` of k) with a block of B
(16 rows of n by ``K_STEP``): two ``mma.sync`` of m16n8, one per 8 rows of B. On a GPU a lane
holds its part of each block in 32-bit registers, laid out as PTX's ``mma`` wants them
(``docs/design/tensor-cores.md``): four words per block, word j covering rows ``g + 8 (j % 2)``
and k ``(2t | t) + (8 | 4) (j // 2)`` (lane = 4 g + t). On the simulator, whose lanes cannot
read each other's registers, a "fragment" is the whole block, row-major: every lane holds what
its products need. :func:`fragment_words` gives the sizes, so one kernel source serves both.

Blocks are read from shared memory at ``smem[base + r * stride_r + c * stride_c]`` (r: row of
the block, c: k), with one of the strides 1 (a tile stored k-major or m/n-major):

- 16-bit operands (``storage`` uint16: bf16 or f16 bits): ``ldmatrix.x4``, ``.trans`` for
  m/n-major tiles; the words are the ``mma``'s operands as they are.
- float32 operands: scalar shared loads, 8 floats per lane and block for bf16 products
  (``K_STEP`` 16: pairs), 4 for TF32 (``K_STEP`` 8); :func:`splitter` turns them into
  ``parts`` operand words each (rounded, or split hi/mid/lo).
"""

from __future__ import annotations

import functools
import struct
import threading

import ml_dtypes
import numpy as np
from numba import cuda, types

from .common import SIMULATED

__all__ = [
    "K_STEP",
    "fragment_words",
    "fragment_loader",
    "splitter",
    "operand_part",
    "mma",
    "output_converter",
    "input_converter",
    "float_bits",
    "bits_float",
    "toward_zero",
]

# k per mma.sync: m16n8k16 for bf16/f16, m16n8k8 for TF32.
K_STEP = {"bf16": 16, "f16": 16, "tf32": 8}
BLOCK_ROWS = 16  # rows (m of A, n of B) of a block


def fragment_words(operand: str, storage: np.dtype) -> tuple[int, int, np.dtype, np.dtype]:
    """(words a lane loads per block, words per operand part, dtype of loaded words, dtype of
    operand words) for ``operand`` ("bf16", "f16", "tf32") from ``storage`` (uint16: 16-bit
    operands as bits; float32)."""
    storage = np.dtype(storage)
    if SIMULATED:
        whole = BLOCK_ROWS * K_STEP[operand]
        return whole, whole, np.dtype(np.float32), np.dtype(np.float32)
    if storage == np.uint16:
        return 4, 4, np.dtype(np.uint32), np.dtype(np.uint32)
    return 2 * K_STEP[operand] // 4, 4, np.dtype(np.float32), np.dtype(np.uint32)


# --- scalar helpers: a float32's bits and back -----------------------------------------------

if SIMULATED:

    def float_bits(x):
        """The IEEE bits of float32 ``x`` as an int."""
        return struct.unpack("<I", struct.pack("<f", x))[0]

    def bits_float(bits):
        """The float32 whose IEEE bits are ``bits``."""
        return struct.unpack("<f", struct.pack("<I", int(bits) & 0xFFFFFFFF))[0]

    def round_bf16(x):
        """Twin of ``cvt.rn.bf16x2.f32``'s rounding: x to bf16, to nearest even, as a float."""
        return float(np.float32(ml_dtypes.bfloat16(np.float32(x))))

    def round_tf32(x):
        """Twin of ``cvt.rna.tf32.f32``: x to TF32 (10 stored bits), ties away from zero;
        elementwise on arrays (float32 results). As its SASS does: half a TF32 unit (bit 12)
        added to finite values' bits, then the low 13 bits cleared (so NaN stays NaN)."""
        if np.ndim(x):
            values = np.asarray(x, np.float32)
            bits = values.view(np.uint32)
            bits = np.where(np.isfinite(values), bits + np.uint32(0x1000), bits)
            return (bits & np.uint32(0xFFFFE000)).view(np.float32)
        bits = float_bits(x)
        if np.isfinite(x):
            bits += 0x1000
        return bits_float(bits & 0xFFFFE000)

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    _I32, _F32 = ir.IntType(32), ir.FloatType()

    @intrinsic
    def float_bits(typingctx, x):
        """The IEEE bits of float32 ``x`` (a uint32), moved, not converted."""
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _I32)

        return types.uint32(x), codegen

    @intrinsic
    def bits_float(typingctx, bits):
        """The float32 whose IEEE bits are the 32-bit integer ``bits``."""
        if not isinstance(bits, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            value = context.cast(builder, args[0], sig.args[0], types.uint32)
            return builder.bitcast(value, _F32)

        return types.float32(bits), codegen

    def _unary_float(text: str, doc: str):
        """A float32 -> float32 conversion whose PTX result is a ``.b32`` register."""

        def typer(typingctx, x):
            if x != types.float32:
                return None

            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(_I32, [_F32]), text, "=r,f")
                return builder.bitcast(builder.call(asm, args), _F32)

            return types.float32(x), codegen

        block = intrinsic(typer)
        block.__doc__ = doc
        return block

    # cvt.rn.bf16x2.f32 d, a, b packs bf16(a) above bf16(b): with b = 0 the word is the float32
    # bit pattern of bf16(a).
    round_bf16 = _unary_float(
        "cvt.rn.bf16x2.f32 $0, $1, 0f00000000;", "x rounded to bf16 (nearest even), as a float32."
    )
    round_tf32 = _unary_float(
        "cvt.rna.tf32.f32 $0, $1;", "x rounded to TF32 (nearest, ties away), as a float32."
    )


# --- loading a block's fragment from shared memory -------------------------------------------


@functools.cache
def fragment_loader(operand: str, storage: np.dtype, stride_r: int, stride_c: int, role="a"):
    """Device function ``load(frag, index, smem, base)``: this lane's fragment of the block at
    ``smem[base + r * stride_r + c * stride_c]`` (16 rows r, ``K_STEP[operand]`` columns c)
    into ``frag[index:index + words]`` (:func:`fragment_words`). One of the strides is 1.

    Word order on a GPU: for A (``role="a"``) word j holds rows ``8 (j % 2)..`` and k
    ``(j // 2)`` half, as the ``mma``'s A registers; for B (``"b"``) rows ``8 (j // 2)..`` and
    k half ``j % 2``, so that the two words one ``mma`` takes (its 8 n rows, both k halves) are
    neighbours (``mma`` wants them in consecutive registers: apart, every ``mma`` costs two
    register moves)."""
    storage = np.dtype(storage)
    k_step = K_STEP[operand]
    if stride_c != 1 and stride_r != 1:
        raise ValueError("a block in shared memory is stored row- or column-contiguous")
    if SIMULATED:
        decode = _decoder(operand, storage)

        def load_twin(frag, index, smem, base):
            for r in range(BLOCK_ROWS):
                for c in range(k_step):
                    frag[index + r * k_step + c] = decode(smem[base + r * stride_r + c * stride_c])

        return load_twin
    b_order = role == "b"
    if storage == np.uint16:
        return _ldmatrix_x4(stride_r, stride_c, b_order)
    pairs = k_step == 16  # bf16 products from float32: two k per word of the operand
    half = k_step // 2  # k of the second half's words

    @cuda.jit(device=True)
    def load_floats(frag, index, smem, base):
        lane = cuda.laneid
        g, t = lane >> 2, lane & 3
        for j in range(4):
            row_half, k_half = (j // 2, j % 2) if b_order else (j % 2, j // 2)
            r = g + 8 * row_half
            if pairs:
                c = 2 * t + half * k_half
                frag[index + 2 * j] = smem[base + r * stride_r + c * stride_c]
                frag[index + 2 * j + 1] = smem[base + r * stride_r + (c + 1) * stride_c]
            else:
                c = t + half * k_half
                frag[index + j] = smem[base + r * stride_r + c * stride_c]

    return load_floats


def _decoder(operand: str, storage: np.dtype):
    """Twin helper: a stored element (bits or float) as the float it means."""
    if storage == np.float32:
        return lambda x: float(x)
    kind = ml_dtypes.bfloat16 if operand == "bf16" else np.float16
    return lambda bits: float(np.array(bits, np.uint16).view(kind))


if not SIMULATED:
    from .ptx import element_pointer

    def shared_address(context, builder, array_type, array, index):
        """The 32-bit ``.shared`` address of ``array[index]`` (a shared-memory array)."""
        pointer = element_pointer(context, builder, array_type, array, index)
        shared = builder.addrspacecast(pointer, ir.PointerType(pointer.type.pointee, 3))
        return builder.ptrtoint(shared, _I32)

    def store_words(context, builder, array_type, array, index, values):
        base = element_pointer(context, builder, array_type, array, index)
        for i, value in enumerate(values):
            builder.store(value, builder.gep(base, [ir.Constant(ir.IntType(64), i)]))

    def load_words(context, builder, array_type, array, index, count):
        base = element_pointer(context, builder, array_type, array, index)
        return [
            builder.load(builder.gep(base, [ir.Constant(ir.IntType(64), i)])) for i in range(count)
        ]

    @functools.cache
    def _ldmatrix(transposed: bool):
        """``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``: four 8x8 matrices of 16-bit
        elements; this lane gives the address of row ``lane % 8`` of matrix ``lane // 8`` and
        receives word i of matrix i."""
        text = (
            f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if transposed else ''}.shared.b16 "
            "{$0, $1, $2, $3}, [$4];"
        )

        def typer(typingctx, frag, index, smem, element):
            if not (
                isinstance(frag, types.Array)
                and frag.dtype == types.uint32
                and isinstance(smem, types.Array)
                and smem.dtype.bitwidth == 16
            ):
                return None

            def codegen(context, builder, sig, args):
                address = shared_address(context, builder, sig.args[2], args[2], args[3])
                asm = ir.InlineAsm(
                    ir.FunctionType(ir.LiteralStructType([_I32] * 4), [_I32]),
                    text,
                    "=r,=r,=r,=r,r",
                    side_effect=True,
                )
                words = builder.call(asm, [address])
                values = [builder.extract_value(words, i) for i in range(4)]
                store_words(context, builder, sig.args[0], args[0], args[1], values)
                return context.get_dummy_value()

            return types.void(frag, index, smem, element), codegen

        return intrinsic(typer)

    def _ldmatrix_x4(stride_r: int, stride_c: int, b_order: bool):
        """The 16x16 block of 16-bit elements as ``mma``'s four words: matrix j is rows
        8 (j % 2).. and columns 8 (j // 2).. of the block (``b_order``: rows 8 (j // 2).. and
        columns 8 (j % 2)..). Stored k-contiguous (``stride_c`` 1) each matrix row is 8
        consecutive k: plain ``ldmatrix``; stored row-contiguous, its rows run along k and
        ``.trans`` hands each lane the transposed pair."""
        transposed = stride_c != 1
        load = _ldmatrix(transposed)

        @cuda.jit(device=True)
        def load_block(frag, index, smem, base):
            lane = cuda.laneid
            i, j = lane & 7, lane >> 3
            if b_order:
                r0, c0 = 8 * (j >> 1), 8 * (j & 1)
            else:
                r0, c0 = 8 * (j & 1), 8 * (j >> 1)
            if transposed:
                element = base + (c0 + i) * stride_c + r0
            else:
                element = base + (r0 + i) * stride_r + c0
            load(frag, index, smem, element)

        return load_block


# --- splitting float32 operands into tensor-core parts ----------------------------------------
#
# As XLA's dot-algorithm rewriter: hi is the float32 with its low bits cleared (16 for bf16,
# 13 for TF32), exact in the narrow format; the remainder x - hi is exact in float32. Two parts:
# (hi, the remainder rounded); three (bf16 only): (hi, mid = the remainder's high bits, the rest
# rounded). One part: x rounded to nearest.


def _bf16_part(x, part, parts):
    """Part ``part`` of float32 ``x`` split into ``parts`` bf16 values (as float32)."""
    if parts == 1:
        return round_bf16(x)
    hi = bits_float(float_bits(x) & 0xFFFF0000)
    if part == 0:
        return hi
    rest = x - hi
    if parts == 2:
        return round_bf16(rest)
    mid = bits_float(float_bits(rest) & 0xFFFF0000)
    if part == 1:
        return mid
    return round_bf16(rest - mid)


def _tf32_part(x, part, parts):
    """Part ``part`` of float32 ``x`` split into ``parts`` (1 or 2) TF32 values."""
    if parts == 1:
        return round_tf32(x)
    hi = bits_float(float_bits(x) & 0xFFFFE000)
    if part == 0:
        return hi
    return round_tf32(x - hi)


@functools.cache
def operand_part(operand: str):
    """Device function ``part_of(x, part, parts)``: part ``part`` of float32 ``x`` split into
    ``parts`` ``operand`` ("bf16" or "tf32") values, as a float32 (a plain function on the
    simulator)."""
    part_of = _bf16_part if operand == "bf16" else _tf32_part
    if not SIMULATED:
        return cuda.jit(device=True)(part_of)

    def quiet_part(x, part, parts):
        with np.errstate(invalid="ignore"):  # an infinite x's remainder is NaN, quietly
            return part_of(x, part, parts)

    return quiet_part


@functools.cache
def splitter(operand: str, parts: int, storage=np.float32):
    """Device function ``split(out, out_index, frag, index)``: the loaded fragment
    ``frag[index:]`` as ``parts`` operand fragments, ``out[out_index + p * words:]`` for part
    p. Float32 fragments are rounded or split (bf16 pairs packed two to a word on a GPU, TF32
    values as their bits); 16-bit ones (one part) are the operand already: copied."""
    _, words, _, _ = fragment_words(operand, storage)
    if np.dtype(storage) != np.float32:
        if parts != 1:
            raise ValueError(f"{operand} operands are not split; got parts={parts}")

        def as_loaded(out, out_index, frag, index):
            for w in range(words):
                out[out_index + w] = frag[index + w]

        return as_loaded if SIMULATED else cuda.jit(device=True)(as_loaded)
    part_of = operand_part(operand)
    pairs = operand == "bf16" and not SIMULATED

    def split(out, out_index, frag, index):
        for p in range(parts):
            for w in range(words):
                if pairs:  # low half: the even k, high half: the odd k
                    even = float_bits(part_of(frag[index + 2 * w], p, parts))
                    odd = float_bits(part_of(frag[index + 2 * w + 1], p, parts))
                    out[out_index + p * words + w] = (odd & 0xFFFF0000) | (even >> 16)
                elif SIMULATED:
                    out[out_index + p * words + w] = part_of(frag[index + w], p, parts)
                else:
                    out[out_index + p * words + w] = float_bits(part_of(frag[index + w], p, parts))

    # On the simulator the twins are plain functions: a simulated device function swaps its
    # module's globals under a lock on every call, which is slow and, with many threads
    # calling nested device functions of one module, was seen to deadlock.
    return split if SIMULATED else cuda.jit(device=True)(split)


# --- mma.sync ----------------------------------------------------------------------------------


def toward_zero(x):
    """Twin helper: ``x`` rounded to float32 toward zero, as the tensor cores round the sum
    they add into a float32 accumulator (they truncate; measured as a bias that grows with K);
    elementwise on arrays."""
    if np.ndim(x):
        x = np.asarray(x, np.float64)
        rounded = x.astype(np.float32)
        return np.where(np.abs(rounded) > np.abs(x), np.nextafter(rounded, np.float32(0)), rounded)
    rounded = np.float32(x)
    if abs(float(rounded)) > abs(x):
        rounded = np.nextafter(rounded, np.float32(0))
    return rounded


@functools.cache
def mma(operand: str):
    """Device function ``mma(acc, acc_index, a, a_index, b, b_index, half)``: ``acc[acc_index:
    acc_index + 4] += A @ B^T`` for the 16 x K_STEP block of A at ``a[a_index:]`` and rows
    ``8 half .. 8 half + 7`` of the 16 x K_STEP block of B at ``b[b_index:]`` (operand
    fragments). This lane's four accumulators are C(g, 2t), C(g, 2t + 1), C(g + 8, 2t),
    C(g + 8, 2t + 1) of the 16 x 8 result (lane = 4 g + t)."""
    k_step = K_STEP[operand]
    if SIMULATED:

        def mma_twin(acc, acc_index, a, a_index, b, b_index, half):
            lane = threading.current_thread().threadIdx.x % 32  # the simulator's thread
            g, t = lane // 4, lane % 4
            with np.errstate(invalid="ignore"):  # NaN from inf x 0 quietly, as the GPU
                for c in range(4):
                    row, col = g + 8 * (c // 2), 8 * half + 2 * t + c % 2
                    total = float(acc[acc_index + c])  # float64: exact enough for the sum
                    for k in range(k_step):
                        total += a[a_index + row * k_step + k] * b[b_index + col * k_step + k]
                    acc[acc_index + c] = toward_zero(total)

        return mma_twin
    return _mma_sync(operand)


if not SIMULATED:

    @functools.cache
    def _mma_sync(operand: str):
        shape, kind = ("m16n8k8", "tf32") if operand == "tf32" else ("m16n8k16", operand)
        text = (
            f"mma.sync.aligned.{shape}.row.col.f32.{kind}.{kind}.f32 "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"
        )

        def typer(typingctx, acc, acc_index, a, a_index, b, b_index, half):
            if not (
                isinstance(acc, types.Array)
                and acc.dtype == types.float32
                and a.dtype == types.uint32
                and b.dtype == types.uint32
            ):
                return None

            def codegen(context, builder, sig, args):
                i64 = ir.IntType(64)
                acc_t, _, a_t, _, b_t, _, half_t = sig.args
                c = load_words(context, builder, acc_t, args[0], args[1], 4)
                a_words = load_words(context, builder, a_t, args[2], args[3], 4)
                b_base = context.cast(builder, args[5], sig.args[5], types.int64)
                half = context.cast(builder, args[6], half_t, types.int64)
                # words 2 half, 2 half + 1: rows 8 half.., k low and high (the loader's B order)
                first = builder.add(b_base, builder.mul(half, ir.Constant(i64, 2)))
                b_words = [
                    builder.load(element_pointer(context, builder, b_t, args[4], first)),
                    builder.load(
                        element_pointer(
                            context, builder, b_t, args[4], builder.add(first, ir.Constant(i64, 1))
                        )
                    ),
                ]
                asm = ir.InlineAsm(
                    ir.FunctionType(ir.LiteralStructType([_F32] * 4), [_I32] * 6 + [_F32] * 4),
                    text,
                    # C and D in separate registers: tying them ("0,1,2,3") made the backend
                    # copy each accumulator before every mma (4 moves per HMMA in the SASS)
                    "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
                )
                d = builder.call(asm, a_words + b_words + c)
                store_words(
                    context,
                    builder,
                    acc_t,
                    args[0],
                    args[1],
                    [builder.extract_value(d, i) for i in range(4)],
                )
                return context.get_dummy_value()

            return types.void(acc, acc_index, a, a_index, b, b_index, half), codegen

        return intrinsic(typer)


# --- the epilogue: float32 accumulators as the output's elements -----------------------------


@functools.cache
def output_converter(out: np.dtype):
    """Device function ``convert(x)``: float32 ``x`` as an element of an ``out`` array:
    itself for float32 (and float64 ``x`` for float64), the bits (uint16) of its bf16 or f16
    rounding (to nearest even)."""
    out = np.dtype(out)
    if out in (np.float32, np.float64):

        @cuda.jit(device=True)
        def identity(x):
            return x

        return identity
    kind = "bf16" if out == ml_dtypes.bfloat16 else "f16"
    if SIMULATED:
        narrow = ml_dtypes.bfloat16 if kind == "bf16" else np.float16

        def to_bits(x):
            return np.array(np.float32(x)).astype(narrow).view(np.uint16)[()]

        return to_bits

    def typer(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(
                ir.FunctionType(ir.IntType(16), [_F32]), f"cvt.rn.{kind}.f32 $0, $1;", "=h,f"
            )
            return builder.call(asm, args)

        return types.uint16(x), codegen

    return intrinsic(typer)


@functools.cache
def input_converter(operand: np.dtype):
    """Device function ``widen(x)``: an element of an ``operand`` array as the kernels hold it
    (:func:`numba_gemm.kernels.mma.storage_dtype`) as the float it stands for, exactly:
    itself for float32 and float64; float32 from the bits (uint16) of a bf16 (the bits moved
    up: bf16 is float32's upper half) or an f16 (``cvt.f32.f16``)."""
    operand = np.dtype(operand)
    if operand not in (ml_dtypes.bfloat16, np.float16):

        @cuda.jit(device=True)
        def identity(x):
            return x

        return identity
    if SIMULATED:
        narrow = operand.type

        def from_bits(x):
            return np.float32(np.array(x, np.uint16).view(narrow)[()])

        return from_bits
    if operand == ml_dtypes.bfloat16:

        @cuda.jit(device=True)
        def from_bf16(x):
            return bits_float(np.uint32(x) << np.uint32(16))

        return from_bf16

    def typer(typingctx, x):
        if x != types.uint16:
            return None

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(_F32, [ir.IntType(16)]), "cvt.f32.f16 $0, $1;",
                               "=f,h")  # fmt: skip
            return builder.call(asm, args)

        return types.float32(x), codegen

    return intrinsic(typer)
