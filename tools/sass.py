"""The SASS of the launches a call would make on an H100, compiled here without a GPU.

    python tools/sass.py triple N [K1 K2 M] [--algorithm fused|unfused] [--max-registers R]
    python tools/sass.py matmul M N K [--dtype bfloat16|float16|float32] [--precision PRESET]
        [--algorithm auto|tiled|mma|wgmma] [--config INTS]
    ... [--dump DIR]: also write each launch's whole SASS to DIR/<launch>-<kernel>.sass

For each launch: registers, stack, the binary's size and its SASS instruction count, and for
each k loop (a backward branch over at least LOOP_MIN instructions) its length, its FFMAs and
how many instructions after each shared-memory load the first FFMA reading it comes. It
compiles as the GPU machines do: NVVM to LTO-IR, then nvJitLink, for sm_90, so registers and
loops match the device's cubins (plain ``ptxas`` on the PTX gives other code: the registers
and binary sizes printed here match an H100's own compile). Row-major,
16-byte-aligned float32 operands; the tiles are the ones the call would pick on an H100 80GB
HBM3 (``numba_gemm/tuned.json``).

Needs the ``sass`` extra (``pip install -e '.[sass]'``: NVVM and nvJitLink 13.0, as on the GPU
image, and nvdisasm). It answers numba-cuda's device queries with an H100's (compute
capability 9.0, 132 SMs) and skips loading the code: internals of numba-cuda 0.30, which a
later release may move.

Read the loop figures as hints: a shared load that sits a few instructions before its FMA
stalls it, but a loop with none is no promise of speed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

LOOP_MIN = 500  # instructions: the k loops of the tiled kernels, not the epilogue's short loops
CLOSE = 5  # a shared load this close to its FMA stalls it (measured on an H100)

_INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*?\((\.L_x_\d+)\)")
_SHARED_LOAD = re.compile(r"(?:@!?U?P\w+\s+)?LDS(?:\.\w+)*\s+(R\d+)")


def instructions(sass: str) -> tuple[list[str], dict[str, int]]:
    """nvdisasm's text as (instructions in order, label -> index of the instruction after it)."""
    body, labels = [], {}
    for line in sass.splitlines():
        if label := _LABEL.match(line):
            labels[label.group(1)] = len(body)
        elif instruction := _INSTRUCTION.match(line):
            body.append(instruction.group(2))
    return body, labels


def load_to_use(loop: list[str]) -> list[int]:
    """For each shared-memory load in ``loop``: how many instructions later the first FFMA
    reads one of its (up to four) destination registers; loads no FFMA reads are left out."""
    distances = []
    for i, text in enumerate(loop):
        load = _SHARED_LOAD.match(text)
        if not load:
            continue
        first = int(load.group(1)[1:])
        registers = re.compile(r"\bR(" + "|".join(str(first + q) for q in range(4)) + r")\b")
        for j in range(i + 1, len(loop)):
            if loop[j].startswith("FFMA") and registers.search(loop[j].split(",", 1)[1]):
                distances.append(j - i)
                break
    return distances


def k_loops(sass: str) -> list[dict]:
    """Each backward branch over at least LOOP_MIN instructions with FFMAs in it: where the
    loop starts, its instructions and FFMAs, and its loads' distances to use
    (:func:`load_to_use`)."""
    body, labels = instructions(sass)
    loops = []
    for end, text in enumerate(body):
        branch = _BRANCH.search(text)
        start = labels.get(branch.group(1)) if branch else None
        if start is None or end - start < LOOP_MIN:
            continue
        loop = body[start : end + 1]
        ffma = sum(t.startswith("FFMA") for t in loop)
        if not ffma:
            continue
        distances = sorted(load_to_use(loop))
        loops.append(
            {
                "start": start,
                "instructions": len(loop),
                "ffma": ffma,
                "nearest": distances[:3],
                "median": statistics.median(distances) if distances else None,
                "close": sum(d <= CLOSE for d in distances),
            }
        )
    return loops


def _fake_h100() -> None:
    """Answer numba-cuda's and numba_gemm's device queries as an H100 80GB HBM3 would."""
    import numba.cuda
    import numba.cuda.api
    import numba.cuda.codegen
    import numba.cuda.compiler
    import numba.cuda.dispatcher

    from numba_gemm import tuned_configs
    from numba_gemm.launch import devices

    class H100:
        compute_capability = (9, 0)
        id = 0
        name = b"NVIDIA H100 80GB HBM3"
        MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 232448
        MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 233472
        MULTIPROCESSOR_COUNT = 132

    for module in (numba.cuda, numba.cuda.api, numba.cuda.compiler, numba.cuda.dispatcher):
        module.get_current_device = lambda: H100
    numba.cuda.dispatcher._Kernel.bind = lambda self: None  # no driver to load the code into
    numba.cuda.codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or (9, 0, "a")
    devices.device_shared_limit = lambda device_id: H100.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    devices._device_shared_per_multiprocessor = lambda device_id: (
        H100.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    )
    devices._device_multiprocessors = lambda device_id: H100.MULTIPROCESSOR_COUNT
    tuned_configs.current_device = lambda: H100.id  # the driver's answer, were there one


def _tool(name: str) -> str:
    """A CUDA binary from the wheels of the ``sass`` extra, else from PATH."""
    try:
        import nvidia.cu13

        folders = nvidia.cu13.__path__
    except ImportError:  # no CUDA 13 wheels: PATH only
        folders = ()
    for folder in folders:
        if (path := Path(folder) / "bin" / name).exists():
            return str(path)
    if found := shutil.which(name):
        return found
    sys.exit(f"{name} not found: pip install -e '.[sass]'")


def compile_launch(launch) -> tuple[str, int, int, int]:
    """(SASS, registers, stack bytes, cubin bytes) of one ``KernelLaunch``'s kernel."""
    from numba_gemm.launch import kernel_signature

    signature = kernel_signature(launch.kernel, launch.arg_kinds())
    launch.kernel.compile(signature)
    library = launch.kernel.overloads[signature]._codelibrary
    library._lto = True  # as numba-cuda compiles on the GPU machines: LTO-IR, nvJitLink
    cubin = library.get_cubin(cc=(9, 0, "a"))
    cubin = getattr(cubin, "code", cubin)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        sass = subprocess.run(
            [_tool("nvdisasm"), "-c", file.name], capture_output=True, text=True, check=True
        ).stdout
        usage = subprocess.run(
            [_tool("cuobjdump"), "-res-usage", file.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    registers = int(re.search(r"REG:(\d+)", usage).group(1))
    stack = int(re.search(r"STACK:(\d+)", usage).group(1))
    return sass, registers, stack, len(cubin)


def _launches(args) -> list:
    from numba_gemm.api import plan
    from numba_gemm.descriptor import MatrixDesc, scratch_desc
    from numba_gemm.launch.tensor_maps import MAP_WORDS, map_workspace
    from numba_gemm.precision import resolve
    from numba_gemm.triple_product import plan_triple

    dtype = np.dtype(args.dtype)

    def desc(name, shape, kind=dtype):  # a device operand at an aligned address: its layout
        return MatrixDesc(name, tuple(shape), (shape[1], 1), kind, None, True, 1 << 20, None)

    def counters(count):
        return MatrixDesc(
            "sync", (count, 1), (1, 1), np.dtype(np.uint32), None, True, 1 << 20, None
        )

    if args.op == "matmul":
        M, N, K = args.sizes
        preset = resolve(args.precision, dtype)
        algorithm = args.algorithm or ("auto" if preset.tensor_cores else "tiled")
        # The wgmma kernel's TMA copies take tensor maps (addresses, encoded at launch, or
        # templates), which the code does not depend on: zeros stand in for templates (their
        # encoding needs a GPU).
        with mock.patch(
            "numba_gemm.kernels.hopper.plan.tensor_map_template", lambda spec: (0,) * MAP_WORDS
        ):
            config = _config(args.config, algorithm)
            launch = plan(desc("a", (M, K)), desc("b", (K, N)), desc("c", (M, N)), algorithm,
                          config, preset, args.tensor_maps, map_workspace,
                          scratch_desc)  # fmt: skip
        return [launch]
    N, K1, K2, M = (args.sizes + [args.sizes[0]] * 3)[:4]
    return plan_triple(
        desc("a", (M, K1)),
        desc("b", (K1, K2)),
        desc("c", (K2, N)),
        desc("d", (M, N)),
        args.algorithm or "fused",
        "left",
        scratch=lambda shape, name: desc(name, shape),
        counters=counters,
    )


def _config(text: str | None, algorithm: str):
    """``--config``'s comma-separated ints as the config of ``algorithm`` (None: the plan's)."""
    if not text:
        return None
    from numba_gemm.kernels.hopper import WgmmaConfig
    from numba_gemm.kernels.mma import MmaConfig
    from numba_gemm.kernels.tiled import TileConfig

    kinds = {"wgmma": WgmmaConfig, "mma": MmaConfig, "tiled": TileConfig}
    if algorithm not in kinds:
        raise SystemExit(f"--config needs --algorithm {', '.join(kinds)}")
    return kinds[algorithm](*(int(v) for v in text.split(",")))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("op", choices=("triple", "matmul"))
    parser.add_argument(
        "sizes", type=int, nargs="+", help="triple: N [K1 K2 M] (default: all N); matmul: M N K"
    )
    parser.add_argument(
        "--algorithm",
        choices=("fused", "unfused", "auto", "tiled", "skinny", "mma", "wgmma"),
        help="triple: fused (default) or unfused; matmul: as numba_gemm.matmul's (default: "
        "auto for tensor-core presets: wgmma on an H100 for 16-bit operands and TF32 presets)",
    )
    parser.add_argument(
        "--tensor-maps",
        choices=("host", "device", "none"),
        default="host",
        help="matmul, wgmma: the TMA copies' tensor maps, encoded by the host (default, as "
        "for a direct call) or built by the kernel (XLA's kernel call); none: cp.async copies",
    )
    parser.add_argument(
        "--dtype", default="float32", help="matmul: the operands' dtype (float32, bfloat16, ...)"
    )
    parser.add_argument("--precision", help="matmul: a precision preset (numba_gemm.precision)")
    parser.add_argument(
        "--config", help="matmul: the algorithm's config as comma-separated ints (128,256,4,8)"
    )
    parser.add_argument(
        "--max-registers", type=int, help="the fused kernel's register cap (default: the library's)"
    )
    parser.add_argument(
        "--dump",
        type=Path,
        metavar="DIR",
        help="also write each launch's SASS to DIR/<launch>-<kernel>.sass",
    )
    args = parser.parse_args(argv)
    if args.op == "matmul" and len(args.sizes) != 3:
        parser.error("matmul takes M N K")
    _fake_h100()
    if args.max_registers:
        from numba import cuda

        import numba_gemm.kernels.triple_product as triple_kernels

        triple_kernels.kernel_jit = lambda threads: cuda.jit(max_registers=args.max_registers)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
    for index, launch in enumerate(_launches(args)):
        sass, registers, stack, size = compile_launch(launch)
        body = instructions(sass)[0]
        name = launch.kernel.py_func.__name__
        if args.dump:
            (args.dump / f"{index}-{name}.sass").write_text(sass)
        mix = {
            op: sum(i.split()[0].startswith(op) for i in body)
            for op in ("HGMMA", "HMMA", "LDSM", "LDGSTS")
        }
        print(
            f"{name}: grid {launch.grid[0]} x {launch.block} "
            f"threads, {registers} registers, stack {stack} B, cubin {size // 1024} KB, "
            f"{len(body)} SASS instructions" + "".join(f", {n} {op}" for op, n in mix.items() if n)
        )
        for loop in k_loops(sass):
            print(
                f"  k loop at {loop['start']}: {loop['instructions']} instructions, "
                f"{loop['ffma']} FFMA; shared load to FFMA: nearest {loop['nearest']}, "
                f"median {loop['median']}, {loop['close']} within {CLOSE}"
            )


if __name__ == "__main__":
    main()
