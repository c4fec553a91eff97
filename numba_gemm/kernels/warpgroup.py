"""Hopper warpgroup building blocks: the swizzled tile layout, ``wgmma`` and its fences.

Each block is PTX on a GPU (sm_90a: numba-cuda compiles for ``sm_90a`` on a compute
capability 9.0 device) and a plain twin on the CUDA simulator, chosen at import time, as in
``fragments``. The twins compute what the hardware computes: products of 16-bit operands exact,
their sum added into the float32 accumulator and rounded toward zero, as ``fragments.mma``'s.

Tile layout (PTX's 128-byte swizzle). An operand tile of ``extent_x`` rows (m of A or n of B)
by one 128-byte row of k (``TILE_K`` = 64 16-bit elements, ``TF32_TILE_K`` = 32 4-byte ones)
is stored in 128-byte *rows* along the operand's contiguous axis:

- k-major (the operand's k axis contiguous): row x holds k = 0..63 (16-bit); rows follow one
  another.
- m/n-major (its m or n axis contiguous): row k of chunk q holds x = 64 q .. 64 q + 63 (16-bit;
  32 4-byte elements); a chunk is a tile's k rows (8 KB, 4 KB), chunks follow one another.

Within each 1024-byte atom (8 rows) the 16-byte piece c of row r sits at piece ``c ^ r``
(byte-address bits 4-6 xor bits 7-9), so that the 8 rows a tensor-core read touches at one
column fall in 8 distinct bank groups. The swizzle acts on the shared-memory address itself:
tiles start at multiples of 1024 bytes (:func:`aligned_start`).

``wgmma`` reads a 64 x 16 block of A and a 16 x N block of B (16-bit; 8 k for TF32) through
64-bit matrix descriptors (start address, the leading and stride byte offsets, the swizzle
mode). In the layout above: k-major blocks step 1024 bytes per 8 rows of m/n (stride offset)
and start 32 bytes further per wgmma; m/n-major blocks step 1024 bytes per 8 k (stride offset)
and 8 KB per 64 m/n (leading offset), and start 2 KB further per 16 k. ``wgmma``'s transpose
flags say which; TF32 blocks have no transpose: both must be k-major.

A TF32 ``wgmma`` may take its A block from registers instead (:func:`wgmma_registers`): each
warp holds its 16 rows as ``mma.sync``'s A fragment (:func:`register_fragment_loader` reads
it from a swizzled tile in either layout), so A may lie either way while B is read k-major.
"""

from __future__ import annotations

import functools
import threading

import ml_dtypes
import numpy as np
from numba import cuda, types

from .common import SIMULATED
from .fragments import BLOCK_ROWS, float_bits, fragment_words, round_tf32, toward_zero

__all__ = [
    "TILE_K",
    "TF32_TILE_K",
    "WGMMA_K",
    "OPERAND_BYTES",
    "wgmma_k",
    "tile_k",
    "WARPGROUP",
    "ALIGNMENT",
    "tile_slot",
    "block_start",
    "aligned_start",
    "wgmma",
    "wgmma_registers",
    "registers_read",
    "REGISTER_WORDS",
    "REGISTER_DTYPE",
    "register_fragment_loader",
    "wgmma_fence",
    "wgmma_commit",
    "wgmma_wait",
    "async_proxy_fence",
    "thread_index",
    "named_barrier",
    "set_max_registers",
]

ROW_BYTES = 128  # one swizzled row
ATOM_BYTES = 1024  # 8 rows: the swizzle's period
ELEMENT_BYTES = 2  # the default: 16-bit operands
OPERAND_BYTES = {"bf16": 2, "f16": 2, "tf32": 4}  # bytes of an element in a tile
TILE_K = ROW_BYTES // ELEMENT_BYTES  # k per tile: one row of a k-major tile (16-bit)
TF32_TILE_K = ROW_BYTES // OPERAND_BYTES["tf32"]
BLOCK_K_BYTES = 32  # k bytes of a block one wgmma reads: 16 16-bit elements, 8 TF32 ones
WGMMA_K = BLOCK_K_BYTES // ELEMENT_BYTES  # k per wgmma (16-bit operands)
WARPGROUP = 128  # threads: 4 consecutive warps
ALIGNMENT = ATOM_BYTES
# Words of a register-A (TF32) block a thread holds, and their dtype: mma.sync's TF32 A
# fragment (4 uint32 on a GPU; on the simulator its warp's whole 16 x 8 block, float32).
_, REGISTER_WORDS, _, REGISTER_DTYPE = fragment_words("tf32", np.float32)


def tile_k(element_bytes: int) -> int:
    """Elements of ``element_bytes`` in one 128-byte row: a tile's k (a k-major row), an
    m/n-major chunk's x."""
    return ROW_BYTES // element_bytes


def wgmma_k(operand: str) -> int:
    """k per ``wgmma`` of ``operand`` ("bf16", "f16": 16; "tf32": 8)."""
    return BLOCK_K_BYTES // OPERAND_BYTES[operand]


def _swizzled(byte):
    """The 128-byte swizzle of a shared-memory byte address: bits 4-6 ^= bits 7-9."""
    return byte ^ (((byte >> 7) & 7) << 4)


@functools.cache
def tile_slot(axis: str, element_bytes: int = ELEMENT_BYTES):
    """``slot(x, k)``: the element offset, from the tile's start, of element (x, k) of a tile
    of one row of k (``128 / element_bytes``) stored ``axis``-contiguous (``"k"`` or ``"x"``),
    swizzled (a plain function, for ``mma.tile_loader``, which compiles it). 16-byte runs along
    the contiguous axis stay contiguous."""
    per_row = tile_k(element_bytes)
    chunk = per_row * ROW_BYTES

    def slot(x, k):
        if axis == "k":
            byte = x * ROW_BYTES + k * element_bytes
        else:
            byte = (x // per_row) * chunk + k * ROW_BYTES + (x % per_row) * element_bytes
        # _swizzled, written out: a kernel cannot call a plain Python function
        return (byte ^ (((byte >> 7) & 7) << 4)) // element_bytes

    return slot


def tile_bytes(extent_x: int) -> int:
    """Bytes of one ``extent_x`` x ``TILE_K`` tile (either layout)."""
    return extent_x * ROW_BYTES


def block_start(axis: str, x0: int, k_step: int, element_bytes: int = ELEMENT_BYTES) -> int:
    """Element offset, from its tile's start, of the wgmma block at row ``x0`` (a multiple of
    64) and k step ``k_step`` (one wgmma's k each)."""
    if axis == "k":
        byte = x0 * ROW_BYTES + k_step * BLOCK_K_BYTES
    else:
        per_row = tile_k(element_bytes)
        byte = (x0 // per_row) * per_row * ROW_BYTES
        byte += k_step * (BLOCK_K_BYTES // element_bytes) * ROW_BYTES
    return byte // element_bytes


def _offsets(axis: str) -> tuple[int, int]:
    """(leading, stride) byte offsets of a block stored ``axis``-contiguous (m/n-major: 16-bit
    only)."""
    if axis == "k":
        return 16, ATOM_BYTES  # leading: unused by swizzled k-major blocks (PTX wants 1)
    return TILE_K * ROW_BYTES, ATOM_BYTES


def _element_byte(axis: str, start: int, x: int, k: int, element_bytes: int) -> int:
    """Twin helper: the byte a descriptor at byte ``start`` reads for element (x, k) of its
    block, as PTX's canonical layouts define it (then swizzled); elementwise on arrays."""
    leading, stride = _offsets(axis)
    if axis == "k":
        byte = start + (x % 8) * ROW_BYTES + (x // 8) * stride + k * element_bytes
    else:
        byte = start + (x % TILE_K) * element_bytes + (x // TILE_K) * leading
        byte += (k % 8) * ROW_BYTES + (k // 8) * stride
    return _swizzled(byte)


def _twin_block(smem, start: int, axis: str, rows: np.ndarray, operand: str) -> np.ndarray:
    """Twin helper: rows ``rows`` (m of A or n of B) of the block (one wgmma's k) whose
    descriptor starts at element ``start``, as float64 values, (len(rows), k). TF32 elements
    are float32 words of which the tensor cores read the top 19 bits."""
    size = OPERAND_BYTES[operand]
    x, k = np.meshgrid(rows, np.arange(wgmma_k(operand)), indexing="ij")
    byte = _element_byte(axis, start * size, x, k, size)
    words = np.asarray(smem).view(np.uint32 if size == 4 else np.uint16)[byte // size]
    if operand == "tf32":
        return _tf32_read(words.view(np.float32))
    kind = ml_dtypes.bfloat16 if operand == "bf16" else np.float16
    return words.view(kind).astype(np.float64)


@functools.cache
def wgmma(operand: str, n: int, a_axis: str, b_axis: str):
    """Device function ``wgmma(acc, smem, a_start, b_start, accumulate)``: ``acc = A @ B +
    (acc if accumulate else 0)`` for the 64 x k block of A whose descriptor starts at element
    ``a_start`` of shared array ``smem`` (stored ``a_axis``-contiguous) and the k x ``n`` block
    of B at ``b_start`` (``b_axis``): ``operand`` "bf16" or "f16" (k = 16, ``smem`` uint16) or
    "tf32" (k = 8, ``smem`` float32, both blocks k-major), swizzled as :func:`tile_slot` stores
    them. Issued by the 128 threads of a warpgroup; asynchronous on a GPU (complete after
    :func:`wgmma_commit` and :func:`wgmma_wait`). ``acc``: this thread's ``n / 2`` float32
    accumulators, 4 per 8 columns j: C(r, 8 j + 2 t), C(r, 8 j + 2 t + 1), C(r + 8, 8 j + 2 t),
    C(r + 8, 8 j + 2 t + 1), with r = 16 (warp % 4) + lane // 4 and t = lane % 4."""
    if operand not in OPERAND_BYTES:
        raise ValueError(f"wgmma here takes bf16, f16 or tf32 operands; got {operand!r}")
    if operand == "tf32" and (a_axis, b_axis) != ("k", "k"):
        raise ValueError("TF32 wgmma reads k-major blocks only (it has no transpose)")
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma's n is a multiple of 8 in [8, 256]; got {n}")
    if SIMULATED:

        def wgmma_twin(acc, smem, a_start, b_start, accumulate):
            warp, lane = _twin_thread()
            rows = 16 * warp + lane // 4 + np.array([0, 8])  # this thread's rows of C
            a = _twin_block(smem, a_start, a_axis, rows, operand)  # (2, k)
            _twin_accumulate(acc, a, smem, b_start, b_axis, n, operand, lane, accumulate)

        return wgmma_twin
    return _wgmma_async(operand, n, a_axis, b_axis)


def _twin_thread() -> tuple[int, int]:
    """Twin helper: (warp within the warpgroup, lane) of the simulator's current thread."""
    thread = threading.current_thread().threadIdx.x % WARPGROUP
    return thread // 32, thread % 32


def _twin_accumulate(acc, a, smem, b_start, b_axis, n, operand, lane, accumulate):
    """Twin helper: this thread's accumulators += its two rows of A (``a``: (2, k) float64
    values as the tensor cores read them) @ the k x ``n`` block of B at ``b_start``."""
    cols = (8 * np.arange(n // 8)[:, None] + 2 * (lane % 4) + np.arange(2)).ravel()
    b = _twin_block(smem, b_start, b_axis, cols, operand)  # (n / 4, k)
    # acc[4 j + e] is C(rows[e // 2], 8 j + 2 t + e % 2): (row, j, col) -> (j, row, col);
    # NaN and inf operands give NaN quietly, as the tensor cores do
    with np.errstate(invalid="ignore"):
        sums = (a @ b.T).reshape(2, n // 8, 2).transpose(1, 0, 2).ravel()
    previous = np.asarray(acc[: n // 2], np.float64) if accumulate else 0.0
    acc[: n // 2] = toward_zero(previous + sums)


def _tf32_read(words: np.ndarray) -> np.ndarray:
    """Twin helper: float32 words as the tensor cores read TF32 (their top 19 bits), float64."""
    kept = np.asarray(words, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return kept.view(np.float32).astype(np.float64)


@functools.cache
def register_fragment_loader(axis: str, extent_x: int):
    """Device function ``load(frag, index, smem, tile, x0, step)``: this thread's words of the
    16 x 8 block at rows ``x0`` .. ``x0 + 15`` (``x0`` a multiple of 16: a warp's rows) and k
    ``8 step`` .. of a float32 tile of ``extent_x`` rows stored ``axis``-contiguous at element
    ``tile`` of ``smem`` (swizzled, :func:`tile_slot`), rounded to TF32 (``cvt.rna``: to
    nearest, ties away) into ``frag[index:index + REGISTER_WORDS]``: the layout
    :func:`wgmma_registers` reads (``mma.sync``'s TF32 A fragment; uint32 bits on a GPU,
    float32 values on the simulator).

    On a GPU word j is row ``g + 8 (j % 2)``, k ``t + 4 (j // 2)`` (lane = 4 g + t), read by
    one 4-byte shared load. With the rows' low bits known (``x0`` % 16 == 0) the slot is the
    thread's first word plus constants and an xor with one per-thread value (k-major: g, the
    row's place in its swizzle atom; x-major: a value of g, t and x0), checked here against
    :func:`tile_slot` for every thread, row block and step. A warp's k-major loads hit 32
    distinct banks, its x-major ones two per bank."""
    if axis not in ("k", "x"):
        raise ValueError(f"a tile is stored k- or x-contiguous; got {axis!r}")
    slot = tile_slot(axis, 4)
    along_k = axis == "k"
    PER_ROW = tile_k(4)  # 32 float32 per 128-byte row

    def word_slot(x0, lane, step, j):
        """Element offset from the tile's start of word j of lane ``lane`` at k step ``step``
        for the rows from ``x0``."""
        g, t = lane >> 2, lane & 3
        row_half, k_half = j & 1, j >> 1
        if along_k:
            return (x0 + g) * PER_ROW + 8 * PER_ROW * row_half + 4 * ((2 * step + k_half) ^ g) + t
        value = (((x0 & 31) >> 2) + (g >> 2)) ^ t
        k = 8 * step + t + 4 * k_half
        return (x0 >> 5) * 1024 + k * PER_ROW + 4 * (value ^ (2 * row_half + 4 * k_half)) + (g & 3)

    for x0 in range(0, extent_x, BLOCK_ROWS):  # the terms give every word's slot
        for lane in range(32):
            for step in range(TF32_TILE_K // 8):
                for j in range(4):
                    x = x0 + (lane >> 2) + 8 * (j & 1)
                    k = 8 * step + (lane & 3) + 4 * (j >> 1)
                    assert word_slot(x0, lane, step, j) == slot(x, k), (x0, lane, step, j)
    if SIMULATED:
        rows, ks = np.meshgrid(np.arange(BLOCK_ROWS), np.arange(8), indexing="ij")

        def load_twin(frag, index, smem, tile, x0, step):
            words = np.asarray(smem)[tile + slot(x0 + rows, 8 * step + ks)].ravel()
            frag[index : index + REGISTER_WORDS] = round_tf32(words)

        return load_twin
    word_slot = cuda.jit(device=True)(word_slot)

    @cuda.jit(device=True)
    def load(frag, index, smem, tile, x0, step):
        lane = cuda.laneid
        for j in range(4):
            # the index as unsigned: Numba wraps signed ones around (a compare, a select)
            word = smem[np.uint64(tile + word_slot(x0, lane, step, j))]
            frag[index + j] = float_bits(round_tf32(word))

    return load


@functools.cache
def wgmma_registers(operand: str, n: int, b_axis: str):
    """Device function ``wgmma(acc, frag, index, smem, b_start, accumulate)``: as
    :func:`wgmma`, with the 64 x 8 block of A from registers: warp w's rows 16 w .. 16 w + 15
    as ``mma.sync``'s TF32 A fragment at ``frag[index:]`` (:func:`register_fragment_loader`:
    4 words, or on the simulator the warp's whole 16 x 8 block; the tensor cores read the top
    19 bits of each). TF32 only, B's block k-major. The registers must not change
    until the wgmma has completed (a :func:`wgmma_wait` that covers it): ptxas does not keep
    them for it."""
    if operand != "tf32":
        raise ValueError(f"wgmma from registers here takes tf32 operands; got {operand!r}")
    if b_axis != "k":
        raise ValueError("TF32 wgmma reads k-major blocks only (it has no transpose)")
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma's n is a multiple of 8 in [8, 256]; got {n}")
    if SIMULATED:

        def wgmma_twin(acc, frag, index, smem, b_start, accumulate):
            _, lane = _twin_thread()
            block = np.asarray(frag[index : index + BLOCK_ROWS * 8]).reshape(BLOCK_ROWS, 8)
            a = _tf32_read(block[[lane // 4, lane // 4 + 8]])  # (2, 8)
            _twin_accumulate(acc, a, smem, b_start, b_axis, n, operand, lane, accumulate)

        return wgmma_twin
    return _wgmma_registers_async(n)


def _check_named_barrier(barrier: int, threads: int) -> None:
    if not 1 <= barrier <= 15:
        raise ValueError(f"a named barrier is 1..15 (0 is the CTA's); got {barrier}")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"a named barrier counts whole warps; got {threads} threads")


def _check_register_count(count: int) -> None:
    if count % 8 or not 24 <= count <= 256:
        raise ValueError(f"setmaxnreg takes a multiple of 8 in [24, 256]; got {count}")


if SIMULATED:

    class _TwinBarrier:
        """One named barrier of one simulated CTA: arrivals counted per generation."""

        def __init__(self):
            self.condition = threading.Condition()
            self.arrived = 0
            self.generation = 0

        def sync(self, threads: int) -> None:
            thread = threading.current_thread()
            with self.condition:
                generation = self.generation
                self.arrived += 1
                if self.arrived == threads:
                    self.arrived, self.generation = 0, generation + 1
                    self.condition.notify_all()
                while self.generation == generation:
                    if thread.abort:
                        raise RuntimeError("abort flag set while waiting at a named barrier")
                    self.condition.wait(0.05)

    _TWIN_BARRIERS = threading.Lock()

    def named_barrier(barrier: int, threads: int):
        """Twin: ``sync()`` waits until ``threads`` threads of this CTA have arrived at named
        barrier ``barrier`` (kept on the launch's block manager: nothing outlives it)."""
        _check_named_barrier(barrier, threads)

        def sync():
            thread = threading.current_thread()
            block = (thread.blockIdx.x, thread.blockIdx.y, thread.blockIdx.z)
            with _TWIN_BARRIERS:
                table = thread._manager.__dict__.setdefault("named_barriers", {})
                twin = table.setdefault((block, barrier), _TwinBarrier())
            twin.sync(threads)

        return sync

    def set_max_registers(count: int, increase: bool):
        """Twin: registers are not simulated."""
        _check_register_count(count)
        return lambda: None

    def aligned_start(smem):
        """Twin: the simulator's shared arrays start at offset 0, aligned."""
        return 0

    def wgmma_fence():
        pass

    def wgmma_commit():
        pass

    def wgmma_wait(pending):
        """Twin: each twin ``wgmma`` completes as it is issued."""
        return lambda: None

    def registers_read(words):
        """Twin: nothing to keep (each twin ``wgmma`` has read its operands as issued)."""
        return lambda frag, index: None

    def async_proxy_fence():
        pass

    def thread_index():
        """Twin: ``cuda.threadIdx.x``."""
        return threading.current_thread().threadIdx.x

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    from .fragments import load_words, shared_address, store_words
    from .ptx import statement

    _I32, _I64, _F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()

    @intrinsic
    def aligned_start(typingctx, smem):
        """The first element of shared array ``smem`` (16- or 32-bit elements) whose address is
        a multiple of ``ALIGNMENT`` bytes: where the swizzled tiles may start."""
        if not (isinstance(smem, types.Array) and smem.dtype.bitwidth in (16, 32)):
            return None
        shift = ir.Constant(_I32, smem.dtype.bitwidth // 16)  # log2 of the element's bytes

        def codegen(context, builder, sig, args):
            zero = context.get_constant(types.intp, 0)
            address = shared_address(context, builder, sig.args[0], args[0], zero)
            mask = ir.Constant(_I32, ALIGNMENT - 1)
            pad = builder.and_(builder.sub(ir.Constant(_I32, ALIGNMENT), address), mask)
            return builder.zext(builder.lshr(pad, shift), _I64)

        return types.int64(smem), codegen

    wgmma_fence = statement(
        "wgmma.fence.sync.aligned;",
        "Orders this warpgroup's register accesses before the wgmmas that follow.",
    )
    wgmma_commit = statement(
        "wgmma.commit_group.sync.aligned;", "Closes a group of the wgmmas issued so far."
    )
    async_proxy_fence = statement(
        "fence.proxy.async.shared::cta;",
        "Makes this thread's shared-memory writes visible to the tensor cores' (async) reads.",
    )

    @functools.cache
    def named_barrier(barrier: int, threads: int):
        """Device function ``sync()``: ``bar.sync``: this thread arrives at named barrier
        ``barrier`` (1..15; 0 is the CTA's) and waits until ``threads`` threads (whole warps)
        have; the shared-memory accesses each made before are ordered before what any makes
        after. A barrier of some warps only, where others have left or do other work."""
        _check_named_barrier(barrier, threads)
        return statement(f"bar.sync {barrier}, {threads};",
                          f"Waits at named barrier {barrier} for {threads} threads.")  # fmt: skip

    @functools.cache
    def set_max_registers(count: int, increase: bool):
        """Device function: ``setmaxnreg``: this warpgroup's registers per thread become
        ``count`` from here on (raised with ``increase``, else lowered); every warp of the
        warpgroup runs it. The CTA's pool is what its launch allocated: a raise past it
        waits for ever."""
        _check_register_count(count)
        kind = "inc" if increase else "dec"
        return statement(f"setmaxnreg.{kind}.sync.aligned.u32 {count};",
                          f"Sets this warpgroup's registers per thread to {count}.")  # fmt: skip

    @functools.cache
    def wgmma_wait(pending: int):
        """Device function: wait until at most ``pending`` wgmma groups are in flight."""
        return statement(
            f"wgmma.wait_group.sync.aligned {int(pending)};",
            f"Waits until at most {pending} wgmma groups are in flight.",
        )

    @functools.cache
    def registers_read(words: int):
        """Device function ``read(frag, index)``: marks ``frag[index:index + words]`` (uint32
        registers) as read and rewritten here (an empty volatile statement that takes and
        gives them, as CUTLASS's ``warpgroup_fence_operand``), so that ptxas keeps them, as
        they are, in their registers up to this point: placed after the :func:`wgmma_wait`
        that covers the register-A wgmmas reading them, it stops ptxas from reusing those
        registers while the tensor cores may still read them."""
        constraints = ",".join(["=r"] * words + [str(i) for i in range(words)])

        def typer(typingctx, frag, index):
            if not (isinstance(frag, types.Array) and frag.dtype == types.uint32):
                return None

            def codegen(context, builder, sig, args):
                index = context.cast(builder, args[1], sig.args[1], types.intp)
                values = load_words(context, builder, sig.args[0], args[0], index, words)
                asm = ir.InlineAsm(
                    ir.FunctionType(ir.LiteralStructType([_I32] * words), [_I32] * words),
                    "",
                    constraints,
                    side_effect=True,
                )
                kept = builder.call(asm, values)
                store_words(context, builder, sig.args[0], args[0], index,
                            [builder.extract_value(kept, i) for i in range(words)])  # fmt: skip
                return context.get_dummy_value()

            return types.void(frag, index), codegen

        return intrinsic(typer)

    @intrinsic
    def thread_index(typingctx):
        """``threadIdx.x`` read afresh (volatile): index arithmetic after a long loop derived
        from it is computed there, not hoisted before the loop and kept live across it (where
        the accumulators need the registers)."""

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, []), "mov.u32 $0, %tid.x;", "=r", True)
            return builder.zext(builder.call(asm, []), _I64)

        return types.int64(), codegen

    def _descriptor(builder, address, axis: str):
        """The 64-bit matrix descriptor of a block at 32-bit shared ``address``."""
        leading, stride = _offsets(axis)
        start = builder.lshr(builder.zext(builder.and_(address, ir.Constant(_I32, 0x3FFFF)), _I64),
                             ir.Constant(_I64, 4))  # fmt: skip
        fields = (leading >> 4) << 16 | (stride >> 4) << 32 | 1 << 62  # 1: the 128-byte swizzle
        return builder.or_(start, ir.Constant(_I64, fields))

    def _wgmma_asm(n: int, shapes: str, operands: str, operand_constraints: list, flags: str):
        """(text, constraints) of one ``wgmma.mma_async`` (``shapes``: its shape and types) on
        n / 2 float32 accumulators, in and out ($0 ..), then ``operands`` (placeholders from
        $n on, constrained by ``operand_constraints``), then scale-d (0: D = A B, else
        D += A B), then ``flags``."""
        words = n // 2
        outputs = ", ".join(f"${i}" for i in range(words))
        text = (
            "{ .reg .pred scale_d; "
            f"setp.ne.b32 scale_d, ${2 * words + len(operand_constraints)}, 0; "
            f"wgmma.mma_async.sync.aligned.{shapes} {{{outputs}}}, {operands}, scale_d, {flags}; }}"
        )
        constraints = ",".join(
            ["=f"] * words + [str(i) for i in range(words)] + operand_constraints + ["r"]
        )
        return text, constraints

    def _call_wgmma(context, builder, n, acc_t, acc, asm_text, operands, operand_types, scale_d):
        """Emits one :func:`_wgmma_asm`: the n / 2 accumulators of ``acc`` (a float32 array of
        type ``acc_t``) in, the ``operands`` (IR values of ``operand_types``) and ``scale_d``,
        the accumulators out."""
        words = n // 2
        zero = context.get_constant(types.intp, 0)
        c = load_words(context, builder, acc_t, acc, zero, words)
        asm = ir.InlineAsm(
            ir.FunctionType(
                ir.LiteralStructType([_F32] * words), [_F32] * words + operand_types + [_I32]
            ),
            *asm_text,
            side_effect=True,
        )
        d = builder.call(asm, c + operands + [scale_d])
        store_words(context, builder, acc_t, acc, zero,
                    [builder.extract_value(d, i) for i in range(words)])  # fmt: skip

    def _wgmma_async(operand: str, n: int, a_axis: str, b_axis: str):
        # scale-a, scale-b = 1; 16-bit blocks then say whether they are transposed (m/n-major),
        # TF32 ones are k-major and take no such flags
        flags = "1, 1" if operand == "tf32" else f"1, 1, {int(a_axis != 'k')}, {int(b_axis != 'k')}"
        first = n  # the operands' first placeholder: after n / 2 accumulators out and in
        asm_text = _wgmma_asm(n, f"m64n{n}k{wgmma_k(operand)}.f32.{operand}.{operand}",
                              f"${first}, ${first + 1}", ["l", "l"], flags)  # fmt: skip
        bits = 8 * OPERAND_BYTES[operand]

        def typer(typingctx, acc, smem, a_start, b_start, accumulate):
            if not (
                isinstance(acc, types.Array)
                and acc.dtype == types.float32
                and isinstance(smem, types.Array)
                and smem.dtype.bitwidth == bits
                and isinstance(accumulate, (types.Integer, types.Boolean))
            ):
                return None

            def codegen(context, builder, sig, args):
                smem_t = sig.args[1]
                a_desc = _descriptor(
                    builder, shared_address(context, builder, smem_t, args[1], args[2]), a_axis
                )
                b_desc = _descriptor(
                    builder, shared_address(context, builder, smem_t, args[1], args[3]), b_axis
                )
                scale_d = context.cast(builder, args[4], sig.args[4], types.int32)
                _call_wgmma(context, builder, n, sig.args[0], args[0], asm_text,
                            [a_desc, b_desc], [_I64, _I64], scale_d)  # fmt: skip
                return context.get_dummy_value()

            return types.void(acc, smem, a_start, b_start, accumulate), codegen

        return intrinsic(typer)

    def _wgmma_registers_async(n: int):
        first = n  # the operands' first placeholder: after n / 2 accumulators out and in
        a_words = ", ".join(f"${first + i}" for i in range(4))
        asm_text = _wgmma_asm(n, f"m64n{n}k8.f32.tf32.tf32", f"{{{a_words}}}, ${first + 4}",
                              ["r"] * 4 + ["l"], "1, 1")  # fmt: skip

        def typer(typingctx, acc, frag, index, smem, b_start, accumulate):
            if not (
                isinstance(acc, types.Array)
                and acc.dtype == types.float32
                and isinstance(frag, types.Array)
                and frag.dtype == types.uint32
                and isinstance(smem, types.Array)
                and smem.dtype.bitwidth == 32
                and isinstance(accumulate, (types.Integer, types.Boolean))
            ):
                return None

            def codegen(context, builder, sig, args):
                index = context.cast(builder, args[2], sig.args[2], types.intp)
                a = load_words(context, builder, sig.args[1], args[1], index, 4)
                b_desc = _descriptor(
                    builder, shared_address(context, builder, sig.args[3], args[3], args[4]), "k"
                )
                scale_d = context.cast(builder, args[5], sig.args[5], types.int32)
                _call_wgmma(context, builder, n, sig.args[0], args[0], asm_text, a + [b_desc],
                            [_I32] * 4 + [_I64], scale_d)  # fmt: skip
                return context.get_dummy_value()

            return types.void(acc, frag, index, smem, b_start, accumulate), codegen

        return intrinsic(typer)
