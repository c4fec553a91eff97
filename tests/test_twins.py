"""Every PTX building block and its simulator twin take the same parameters.

The kernels are one source for the GPU and the simulator: each building block of
``kernels/{ptx,warpgroup,fragments,tma}.py`` is chosen at import by ``SIMULATED``, its inline-PTX
form (an ``@intrinsic`` or a device function) or a plain-Python twin. A twin that took its
parameters in another order or by other names would run on the simulator and fail, or
compute something else, on a GPU. This test imports the modules both ways (two processes: the
flag is read once, when Numba is imported) and compares, name by name, the parameters of every
block, and of the blocks that each factory builds from the arguments below.
"""

import json
import os
import subprocess
import sys

import pytest

MODULES = ("ptx", "warpgroup", "fragments", "tma")

# Factories of device functions, with arguments to build one each: the blocks they build are
# compared too.
BUILDS = {
    "ptx.cp_async": (16,),
    "ptx.cp_async_wait": (1,),
    "warpgroup.tile_slot": ("k", 2),
    "warpgroup.wgmma": ("bf16", 128, "k", "x"),
    "warpgroup.wgmma_registers": ("tf32", 128, "k"),
    "warpgroup.registers_read": (16,),
    "warpgroup.register_fragment_loader": ("x", 128),
    "warpgroup.wgmma_wait": (1,),
    "warpgroup.named_barrier": (1, 256),
    "warpgroup.set_max_registers": (40, False),
    "fragments.fragment_loader": ("bf16", "uint16", 1, 24, "a"),
    "fragments.splitter": ("tf32", 2),
    "fragments.operand_part": ("tf32",),
    "fragments.mma": ("bf16",),
    "fragments.output_converter": ("bfloat16",),
    "fragments.input_converter": ("float16",),
    "tma.tma_load": ((64, 128, 1),),
    "tma.tma_store": ((64, 128, 1),),
    "tma.bulk_wait": (0, True),
}

PROBE = """
import importlib, inspect, json, sys
import numpy as np

def parameters(obj):
    # an @intrinsic's typer takes the typing context first; a device function is its Python
    # function (py_func on a GPU, fn on the simulator); anything else is called as it is
    if type(obj).__name__ == "_Intrinsic":
        return list(inspect.signature(obj._defn).parameters)[1:]
    function = getattr(obj, "py_func", None) or getattr(obj, "fn", None) or obj
    function = getattr(function, "__wrapped__", function)
    return list(inspect.signature(function).parameters)

def argument(value):
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, str) and value in ("uint16", "bfloat16", "float16"):
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16) if value == "bfloat16" else np.dtype(value)
    return value

builds = json.loads(sys.argv[1])
found = {}
for module_name in sys.argv[2].split(","):
    module = importlib.import_module("numba_gemm.kernels." + module_name)
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj) and not isinstance(obj, type) and not isinstance(obj, np.dtype):
            key = module_name + "." + name
            found[key] = parameters(obj)
            if key in builds:
                found[key + "(...)"] = parameters(obj(*map(argument, builds[key])))
print(json.dumps(found))
"""


def _blocks(simulated: bool) -> dict:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1" if simulated else "0"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(BUILDS), ",".join(MODULES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def both_forms():
    return _blocks(True), _blocks(False)


def test_every_block_has_a_twin(both_forms):
    twins, ptx = both_forms
    assert set(twins) == set(ptx)
    assert set(BUILDS) <= set(ptx), "a factory named in BUILDS is no longer exported"
    assert all(f"{key}(...)" in ptx for key in BUILDS)


@pytest.mark.parametrize("module", MODULES)
def test_twins_take_the_parameters_of_their_ptx_forms(both_forms, module):
    twins, ptx = both_forms
    names = sorted(key for key in ptx if key.startswith(module + "."))
    assert names
    differ = [f"{name}: twin {twins.get(name)}, PTX {ptx[name]}" for name in names
              if twins.get(name) != ptx[name]]  # fmt: skip
    assert not differ, "\n".join(differ)
