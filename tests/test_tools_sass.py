"""tools/sass.py's reading of nvdisasm output (the compile itself needs the `sass` extra)."""

import pytest

from tools.sass import CLOSE, LOOP_MIN, instructions, k_loops, load_to_use


def _sass(body: list[str], loop_back: bool = True) -> str:
    lines = [
        "\t.text.kernel:",
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
        ".L_x_1:",
    ]
    lines += [
        f"        /*{16 * (i + 1):04x}*/                   {text} ;" for i, text in enumerate(body)
    ]
    if loop_back:
        lines.append(f"        /*{16 * (len(body) + 1):04x}*/              @P0 BRA `(.L_x_1) ;")
    lines.append(f"        /*{16 * (len(body) + 2):04x}*/                   EXIT ;")
    return "\n".join(lines)


def test_instructions_and_labels():
    body, labels = instructions(_sass(["LDS.128 R4, [R2]", "FFMA R8, R4, R5, R8"]))
    assert body[0] == "MOV R1, c[0x0][0x28]" and body[-1] == "EXIT"
    assert labels == {".L_x_1": 1} and body[3] == "@P0 BRA `(.L_x_1)"


@pytest.mark.parametrize("gap, predicate", [(1, ""), (4, "@!P1 "), (9, "@P2 ")])
def test_load_to_use_counts_instructions_to_the_first_ffma_reading_the_load(gap, predicate):
    # R6 is the third register of the 16-byte load into R4..R7; R8 and R40 are not its.
    loop = (
        [f"{predicate}LDS.128 R4, [R2+0x10]"]
        + ["IADD3 R9, R9, 0x1, RZ"] * (gap - 1)
        + ["FFMA R6, R40, R41, R6", "FFMA R8, R6, R41, R8", "FFMA R9, R40, R7, R9"]
    )
    # the first FFMA writes R6 but reads R40, R41, R6: it reads the load (R6) too
    assert load_to_use(loop) == [gap]
    assert load_to_use(["LDS R4, [R2]", "FFMA R8, R40, R41, R8", "FFMA R8, R44, R4, R8"]) == [2]
    assert load_to_use(["LDS R4, [R2]", "FFMA R4, R40, R41, R8"]) == []  # writes R4, reads not


def test_k_loops_keeps_long_loops_with_ffmas_only():
    step = ["LDS.128 R4, [R2]"] + ["IMAD R9, R9, R9, RZ"] * CLOSE + ["FFMA R8, R4, R5, R8"]
    long_loop = step * (LOOP_MIN // len(step) + 1)
    (loop,) = k_loops(_sass(long_loop))
    assert loop["start"] == 1 and loop["instructions"] == len(long_loop) + 1
    assert loop["ffma"] == long_loop.count("FFMA R8, R4, R5, R8")
    assert loop["nearest"] == [CLOSE + 1] * 3 and loop["close"] == 0
    assert k_loops(_sass(step * 3)) == []  # too short to be a k loop
    assert k_loops(_sass(long_loop, loop_back=False)) == []  # no branch back
    assert k_loops(_sass(["IMAD R9, R9, R9, RZ"] * LOOP_MIN)) == []  # no FFMA: not a k loop


def test_dump_writes_each_launchs_sass(tmp_path, monkeypatch, capsys):
    # The compile needs the `sass` extra; here two launches with made-up SASS stand in for it.
    from types import SimpleNamespace

    import tools.sass as sass

    def launch(name):
        return SimpleNamespace(
            kernel=SimpleNamespace(py_func=SimpleNamespace(__name__=name)), grid=(128,), block=256
        )

    texts = {"tiled_kernel": _sass(["FFMA R8, R4, R5, R8"]), "fused_kernel": _sass(["EXIT"])}
    monkeypatch.setattr(sass, "_fake_h100", lambda: None)
    monkeypatch.setattr(
        sass, "_launches", lambda args: [launch("tiled_kernel"), launch("fused_kernel")]
    )
    monkeypatch.setattr(
        sass, "compile_launch", lambda one: (texts[one.kernel.py_func.__name__], 96, 0, 4096)
    )
    sass.main(["triple", "512", "--dump", str(tmp_path / "out")])
    assert (tmp_path / "out" / "0-tiled_kernel.sass").read_text() == texts["tiled_kernel"]
    assert (tmp_path / "out" / "1-fused_kernel.sass").read_text() == texts["fused_kernel"]
    assert "tiled_kernel: grid 128 x 256 threads, 96 registers" in capsys.readouterr().out


def test_config_reads_the_algorithms_config_from_ints():
    from numba_gemm.kernels.hopper import WgmmaConfig
    from numba_gemm.kernels.mma import MmaConfig
    from tools.sass import _config

    assert _config("128,256,4,8", "wgmma") == WgmmaConfig(128, 256, 4, 8)
    assert _config("128,128,32,2,2,3,8", "mma") == MmaConfig(128, 128, 32, 2, 2, 3, 8)
    assert _config(None, "wgmma") is None
    with pytest.raises(SystemExit, match="--config needs --algorithm"):
        _config("128,256,4,8", "auto")


def test_launches_plan_each_kernel_as_on_an_h100(tmp_path):
    # tools/sass.py's planning half, run for real (a fresh process: it answers numba-cuda's
    # device queries as an H100 would, with no simulator and no driver); only the compile (the
    # `sass` extra's NVVM) is stubbed.
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = (
        "import tools.sass as sass\n"
        "sass.compile_launch = lambda launch: ('', 32, 0, 1024)\n"
        "for argv in (['matmul', '1024', '10', '512', '--dtype', 'bfloat16'],\n"
        "             ['matmul', '2048', '2048', '2048', '--dtype', 'bfloat16'],\n"
        "             ['matmul', '2048', '2048', '2048', '--dtype', 'bfloat16',\n"
        "              '--tensor-maps', 'device'],\n"
        "             ['matmul', '512', '512', '512'],\n"
        "             ['triple', '512']):\n"
        "    sass.main(argv)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    kernels = [line.split(":")[0] for line in done.stdout.splitlines() if "threads" in line]
    # 2048^3 bf16: the default tiles, persistent and warp-specialised (TMA both ways)
    assert kernels[:4] == ["mma_kernel", "persistent_producer_kernel",
                           "persistent_producer_kernel", "tiled_kernel"]  # fmt: skip
    assert len(kernels) > 4  # the triple product's launches
    assert "grid 32 x 64 threads" in done.stdout  # 1024 x 10: the narrow mma tiles
