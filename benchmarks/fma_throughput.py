"""Multiply-add throughput from Numba: FP32 and FP64 FMAs against tensor-core mma.sync.

    python3 benchmarks/fma_throughput.py [--results DIR]

A lead for small products, not a kernel of the library. The fused triple product at N = 512
is bound by latency with 8 warps per SM (docs/design/triple-product.md); the question is
how much of each pipe's peak so few warps reach. Each kernel runs independent chains of
one instruction per thread for ITERATIONS steps, 2 CTAs per SM, at 4, 8 and 16 warps per
SM, and reports multiply-adds as TFLOP/s (2 flops each):

- ``ffma``: FP32 ``FFMA``, 32 chains per thread;
- ``dfma``: FP64 ``DFMA``, 16 chains per thread;
- ``dmma m8n8k4`` and ``dmma m16n8k16``: ``mma.sync.aligned.<shape>.row.col.f64`` (inline
  PTX through ``numba.cuda.extending.intrinsic``), 8 and 4 accumulator tiles per warp;
- ``hmma bf16 m16n8k16``: ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``, 8
  accumulator tiles per warp: the pipe under a float32 product emulated by split bf16
  operands (each float32 as three bf16 parts, six products per multiply-add), which
  involves no TF32;
- ``f2f``: float32 -> float64 conversions (``F2F.F64.F32``, each with an FADD and a DADD
  around it), 16 chains per thread, the price of feeding float32 operands to DMMA. Its rate
  is given as conversions (``ops``), not flops.

Every kernel's sums are checked against their exact value first (all inputs are 0.5 or 1,
so every partial sum is exact), and the m16n8k16 fragment layouts assumed below against NumPy
(:func:`check_m16n8k16_layout`, :func:`check_m16n8k16_bf16_layout`). Times: CUDA events
around REPEATS launches after a warm-up, the median of ROUNDS. Writes
``<DIR>/fma_throughput/<device>.json``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
from llvmlite import ir
from numba import cuda, types
from numba.cuda.extending import intrinsic

ITERATIONS = 2048
REPEATS, ROUNDS = 5, 5
WARPS_PER_SM = (4, 8, 16)
CTAS_PER_SM = 2


def _mma(shape: str, kinds: str, a_regs: int, b_regs: int, c_regs: int, packed: bool):
    """An intrinsic ``mma(a..., b..., c...) -> d`` for one ``mma.sync`` shape and operand
    types (``kinds``: PTX's ``.dtype.atype.btype.ctype``): each thread passes its fragment
    registers, float64 ones, or with ``packed`` 32-bit words of two bf16 values for A and B
    and float32 accumulators."""
    names = (
        [f"a{i}" for i in range(a_regs)]
        + [f"b{i}" for i in range(b_regs)]
        + [f"c{i}" for i in range(c_regs)]
    )

    def operands(first, count):
        return "{" + ", ".join(f"${first + i}" for i in range(count)) + "}"

    text = (
        f"mma.sync.aligned.{shape}.row.col.{kinds} {operands(0, c_regs)}, "
        f"{operands(c_regs, a_regs)}, {operands(c_regs + a_regs, b_regs)}, "
        f"{operands(c_regs + a_regs + b_regs, c_regs)};"
    )
    # LLVM type and asm constraint of an A/B register and of an accumulator, Numba's type of D
    word, word_code, acc, acc_code, numba_acc = (
        (ir.IntType(32), "r", ir.FloatType(), "f", "float32")
        if packed
        else (ir.DoubleType(), "d", ir.DoubleType(), "d", "float64")
    )
    constraints = ",".join(
        [f"={acc_code}"] * c_regs + [word_code] * (a_regs + b_regs) + [acc_code] * c_regs
    )

    def codegen(context, builder, signature, args):
        asm = ir.InlineAsm(
            ir.FunctionType(
                ir.LiteralStructType([acc] * c_regs), [word] * (a_regs + b_regs) + [acc] * c_regs
            ),
            text,
            constraints,
        )
        result = builder.call(asm, list(args))
        return context.make_tuple(
            builder,
            signature.return_type,
            [builder.extract_value(result, i) for i in range(c_regs)],
        )

    # An intrinsic's typer takes its operands by name: written out for this shape.
    source = (
        f"def mma(typingctx, {', '.join(names)}):\n"
        f"    return types.UniTuple(types.{numba_acc}, {c_regs})({', '.join(names)}), "
        f"codegen\n"
    )
    namespace = {"types": types, "codegen": codegen}
    exec(compile(source, f"<mma {shape} {kinds}>", "exec"), namespace)
    return intrinsic(namespace["mma"])


F64 = "f64.f64.f64.f64"
mma_m8n8k4 = _mma("m8n8k4", F64, 1, 1, 2, packed=False)  # 256 multiply-adds per warp
mma_m16n8k16 = _mma("m16n8k16", F64, 8, 4, 4, packed=False)  # 2048
# 2048 too, from bf16 operands (two per 32-bit word) into float32 accumulators
hmma_bf16 = _mma("m16n8k16", "f32.bf16.bf16.f32", 4, 2, 4, packed=True)


@cuda.jit(device=True)
def write_total(out, acc, count):
    """out[thread] = acc[0] + ... + acc[count - 1], in acc's type: what keeps the chains live."""
    total = acc[0]
    for j in range(1, count):
        total += acc[j]
    out[cuda.grid(1)] = total


def _fma_kernel(scalar, chains: int):
    """Independent FMA chains of ``scalar`` (np.float32: FFMA, np.float64: DFMA) per thread."""

    @cuda.jit
    def fma_kernel(out, x):
        a, b = x[0], x[1]  # 1 and 1: chain j ends at j + ITERATIONS
        acc = cuda.local.array(chains, scalar)
        for j in range(chains):
            acc[j] = scalar(j)
        for _ in range(ITERATIONS):
            for j in range(chains):
                acc[j] = acc[j] * a + b
        write_total(out, acc, chains)

    return fma_kernel


ffma_kernel = _fma_kernel(np.float32, 32)
dfma_kernel = _fma_kernel(np.float64, 16)


@cuda.jit
def dmma_m8n8k4_kernel(out, x):
    a, b = x[0], x[0]  # 0.5 and 0.5: each step adds k * 0.25 = 1 to every element
    acc = cuda.local.array(16, types.float64)  # 8 tiles, 2 registers each
    for j in range(16):
        acc[j] = 0.0
    for _ in range(ITERATIONS):
        for t in range(8):
            acc[2 * t], acc[2 * t + 1] = mma_m8n8k4(a, b, acc[2 * t], acc[2 * t + 1])
    write_total(out, acc, 16)


@cuda.jit
def dmma_m16n8k16_kernel(out, x):
    h = x[0]  # 0.5 everywhere: each step adds k * 0.25 = 4 to every element
    acc = cuda.local.array(16, types.float64)  # 4 tiles, 4 registers each
    for j in range(16):
        acc[j] = 0.0
    for _ in range(ITERATIONS // 4):  # 4x the multiply-adds of m8n8k4 per register
        for t in range(4):
            acc[4 * t], acc[4 * t + 1], acc[4 * t + 2], acc[4 * t + 3] = mma_m16n8k16(
                h,
                h,
                h,
                h,
                h,
                h,
                h,
                h,
                h,
                h,
                h,
                h,
                acc[4 * t],
                acc[4 * t + 1],
                acc[4 * t + 2],
                acc[4 * t + 3],
            )
    write_total(out, acc, 16)


BF16_HALVES = 0x3F003F00  # two bf16 values of 0.5 in one 32-bit word


@cuda.jit
def hmma_bf16_kernel(out, x):
    h = x[0]  # BF16_HALVES: each step adds k * 0.25 = 4 to every element
    acc = cuda.local.array(32, types.float32)  # 8 tiles, 4 registers each
    for j in range(32):
        acc[j] = 0.0
    for _ in range(ITERATIONS):
        for t in range(8):
            acc[4 * t], acc[4 * t + 1], acc[4 * t + 2], acc[4 * t + 3] = hmma_bf16(
                h, h, h, h, h, h, acc[4 * t], acc[4 * t + 1], acc[4 * t + 2], acc[4 * t + 3]
            )
    write_total(out, acc, 32)


@cuda.jit
def f2f_kernel(out, x):
    one = np.float32(x[0])  # 1: chain j converts j + 1, j + 2, ... and sums them exactly
    value = cuda.local.array(16, types.float32)
    acc = cuda.local.array(16, types.float64)
    for j in range(16):
        value[j], acc[j] = np.float32(j), 0.0
    for _ in range(ITERATIONS):
        for j in range(16):
            value[j] += one
            acc[j] += types.float64(value[j])
    write_total(out, acc, 16)


@cuda.jit(device=True)
def store_d(d, g, t, fragment):
    """A warp's m16n8k16 accumulator registers into row-major D (16 x 8): lane (g, t) holds
    D(g, 2t), D(g, 2t + 1), D(g + 8, 2t), D(g + 8, 2t + 1), for .f64 and bf16 alike."""
    d[g * 8 + 2 * t], d[g * 8 + 2 * t + 1] = fragment[0], fragment[1]
    d[(g + 8) * 8 + 2 * t], d[(g + 8) * 8 + 2 * t + 1] = fragment[2], fragment[3]


@cuda.jit(device=True)
def load_a(a, g, t, fragment):
    """A warp's m16n8k16 A fragment from row-major A (16 rows, flat): register i of lane
    (g, t) holds row g + 8 * (i % 2), column t + 4 * (i // 2). A column is one float64 for
    .f64, one word of two bf16 along k for bf16, so the same formula serves both."""
    columns = a.shape[0] // 16
    for i in range(fragment.shape[0]):
        fragment[i] = a[(g + 8 * (i % 2)) * columns + t + 4 * (i // 2)]


@cuda.jit(device=True)
def load_b(b_t, g, t, fragment):
    """A warp's m16n8k16 B fragment from row-major B^T (8 rows, flat): register i of lane
    (g, t) holds row g, column t + 4 * i (columns as for :func:`load_a`)."""
    columns = b_t.shape[0] // 8
    for i in range(fragment.shape[0]):
        fragment[i] = b_t[g * columns + t + 4 * i]


@cuda.jit
def m16n8k16_layout_kernel(a, b_t, d):
    """One warp: D (16 x 8) = A (16 x 16) @ B (16 x 8), A and B^T row-major, through the
    fragments of PTX's m16n8k16 .f64 layout: with g = lane // 4 and t = lane % 4, register i
    of A holds A(g + 8 * (i % 2), t + 4 * (i // 2)), register i of B holds B(t + 4 * i, g),
    and D's registers are stored by :func:`store_d`."""
    lane = cuda.threadIdx.x
    g, t = lane // 4, lane % 4
    fa = cuda.local.array(8, types.float64)
    fb = cuda.local.array(4, types.float64)
    load_a(a, g, t, fa)
    load_b(b_t, g, t, fb)
    store_d(
        d,
        g,
        t,
        mma_m16n8k16(
            fa[0],
            fa[1],
            fa[2],
            fa[3],
            fa[4],
            fa[5],
            fa[6],
            fa[7],
            fb[0],
            fb[1],
            fb[2],
            fb[3],
            0.0,
            0.0,
            0.0,
            0.0,
        ),
    )


def check_m16n8k16_layout() -> float:
    """The largest error of one m16n8k16 product through that layout against NumPy's
    (random float64 operands; an exact layout gives at most rounding, ~1e-15)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    d = cuda.to_device(np.full(16 * 8, np.nan))
    m16n8k16_layout_kernel[1, 32](cuda.to_device(a.ravel()), cuda.to_device(b.T.ravel()), d)
    error = float(np.abs(d.copy_to_host().reshape(16, 8) - a @ b).max())
    if not error < 1e-12:
        raise AssertionError(f"m16n8k16 f64 fragment layout: error {error}")
    return error


@cuda.jit
def m16n8k16_bf16_layout_kernel(a_words, b_words, d):
    """The same product through the bf16 fragments: A's words are row-major pairs along k
    (16 x 8 words), B's the columns' pairs along k (8 x 8 words), each word's low half the
    lower k. Register i of A holds the pair (g + 8 * (i % 2), k = 2t + 8 * (i // 2)), register
    i of B the pair (k = 2t + 8 * i, g); D is laid out as for .f64."""
    lane = cuda.threadIdx.x
    g, t = lane // 4, lane % 4
    fa = cuda.local.array(4, types.uint32)
    fb = cuda.local.array(2, types.uint32)
    load_a(a_words, g, t, fa)
    load_b(b_words, g, t, fb)
    store_d(
        d,
        g,
        t,
        hmma_bf16(
            fa[0],
            fa[1],
            fa[2],
            fa[3],
            fb[0],
            fb[1],
            np.float32(0),
            np.float32(0),
            np.float32(0),
            np.float32(0),
        ),
    )


def bf16_pairs(matrix: np.ndarray) -> np.ndarray:
    """Rows of float32 values exact in bf16, as words of two bf16 (the even column low)."""
    bits = np.ascontiguousarray(matrix, np.float32).view(np.uint32) >> 16
    return (bits[:, 0::2] | (bits[:, 1::2] << 16)).astype(np.uint32)


def check_m16n8k16_bf16_layout() -> float:
    """The largest error of one bf16 m16n8k16 product through that layout against NumPy's, on
    small integers (exact in bf16, and every product and sum exact in float32: 0 if right)."""
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float32)
    b = rng.integers(-4, 5, (16, 8)).astype(np.float32)
    d = cuda.to_device(np.full(16 * 8, np.nan, np.float32))
    m16n8k16_bf16_layout_kernel[1, 32](
        cuda.to_device(bf16_pairs(a).ravel()), cuda.to_device(bf16_pairs(b.T).ravel()), d
    )
    error = float(np.abs(d.copy_to_host().reshape(16, 8) - a.astype(np.float64) @ b).max())
    if error != 0:
        raise AssertionError(f"m16n8k16 bf16 fragment layout: error {error}")
    return error


# name -> (kernel, dtype of the sums, inputs, operations per warp (multiply-adds, or
# conversions for f2f), exact sum per thread)
CASES = {
    "ffma": (
        ffma_kernel,
        np.float32,
        np.array((1.0, 1.0), np.float32),
        ITERATIONS * 32 * 32,
        sum(range(32)) + 32 * ITERATIONS,
    ),
    "dfma": (
        dfma_kernel,
        np.float64,
        np.array((1.0, 1.0)),
        ITERATIONS * 16 * 32,
        sum(range(16)) + 16 * ITERATIONS,
    ),
    "dmma m8n8k4": (
        dmma_m8n8k4_kernel,
        np.float64,
        np.array((0.5,)),
        ITERATIONS * 8 * 256,
        16 * ITERATIONS,
    ),
    "dmma m16n8k16": (
        dmma_m16n8k16_kernel,
        np.float64,
        np.array((0.5,)),
        ITERATIONS // 4 * 4 * 2048,
        16 * ITERATIONS,
    ),
    "hmma bf16 m16n8k16": (
        hmma_bf16_kernel,
        np.float32,
        np.array((BF16_HALVES,), np.uint32),
        ITERATIONS * 8 * 2048,
        32 * 4 * ITERATIONS,
    ),
    "f2f": (
        f2f_kernel,
        np.float64,
        np.array((1.0,)),
        ITERATIONS * 16 * 32,
        ITERATIONS * sum(range(16)) + 16 * ITERATIONS * (ITERATIONS + 1) // 2,
    ),
}


def measure() -> list[dict]:
    device = cuda.get_current_device()
    sms, clock_hz = device.MULTIPROCESSOR_COUNT, device.CLOCK_RATE * 1e3  # the boost clock
    start, stop = cuda.event(), cuda.event()
    rows = []
    for name, (kernel, dtype, inputs, ops_per_warp, exact) in CASES.items():
        x = cuda.to_device(inputs)
        for warps in WARPS_PER_SM:
            blocks, threads = CTAS_PER_SM * sms, warps * 32 // CTAS_PER_SM
            out = cuda.to_device(np.full(blocks * threads, np.nan, dtype))
            kernel[blocks, threads](out, x)
            got = out.copy_to_host()
            if not np.all(got == exact):
                raise AssertionError(f"{name}: sums {np.unique(got)[:4]} where {exact} was due")
            # Events recorded back to back with the launches, not timing.median_seconds: its
            # clock waits for the start event before the first launch is issued, which puts that
            # host time inside rounds of a few short kernels.
            times = []
            for _ in range(ROUNDS):
                start.record()
                for _ in range(REPEATS):
                    kernel[blocks, threads](out, x)
                stop.record()
                stop.synchronize()
                times.append(cuda.event_elapsed_time(start, stop) / 1e3 / REPEATS)
            seconds = statistics.median(times)
            ops = blocks * threads // 32 * ops_per_warp
            row = {"kernel": name, "warps_per_sm": warps, "seconds": seconds}
            if name == "f2f":
                row["conversions_per_clock_per_sm"] = ops / seconds / sms / clock_hz
                rate = f"{row['conversions_per_clock_per_sm']:5.1f} conversions per clock per SM"
            else:
                row["tflops"] = 2 * ops / seconds / 1e12
                rate = f"{row['tflops']:5.1f} TFLOP/s"
            rows.append(row)
            print(f"{name:18s} {warps:2d} warps per SM: {rate}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    import numba_cuda

    from numba_gemm.timing import device_name, write_results

    layout_error = check_m16n8k16_layout()
    print(f"m16n8k16 f64 fragment layout: largest error {layout_error:.1e} against NumPy")
    bf16_layout_error = check_m16n8k16_bf16_layout()
    print(f"m16n8k16 bf16 fragment layout: largest error {bf16_layout_error:.1e} against NumPy")
    rows = measure()
    device = device_name()
    path = write_results(
        args.results,
        device,
        "fma_throughput",
        {
            "versions": {"numba-cuda": numba_cuda.__version__, "numpy": np.__version__},
            "iterations": ITERATIONS,
            "ctas_per_sm": CTAS_PER_SM,
            "m16n8k16_layout_error": layout_error,
            "m16n8k16_bf16_layout_error": bf16_layout_error,
            "results": rows,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
