"""The package's public names: loaded lazily, then kept."""

import pytest

import numba_gemm


def test_every_public_name_resolves():
    for name in numba_gemm.__all__:
        assert getattr(numba_gemm, name) is not None, name


def test_a_resolved_name_is_kept_in_the_module():
    from numba_gemm import api, triple_product

    assert numba_gemm.matmul is api.matmul and numba_gemm.triple is triple_product.triple
    # later lookups are plain module attributes, not calls of the module's __getattr__
    assert (
        vars(numba_gemm)["matmul"] is api.matmul
        and vars(numba_gemm)["triple"] is triple_product.triple
    )


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'matmull'"):
        getattr(numba_gemm, "matmull")  # noqa: B009 (the attribute lookup is the test)


def _imports_of_each_module() -> dict[str, set[str]]:
    """{module: the modules of numba_gemm and jax_bridge it imports}, read from the source
    (function-level imports included), each name resolved to the module that defines it."""
    import ast
    from pathlib import Path

    root = Path(numba_gemm.__file__).parents[1]
    modules = {}
    for package in ("numba_gemm", "jax_bridge"):
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    imports = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1]
                        + ([base] if base else [])
                    )
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    found.add(target if target in modules else base)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        imports[name] = {m for m in found if m in modules and m != name}
    return imports


def test_the_library_has_no_import_circles():
    # Package __init__ files only re-export (lazily, for numba_gemm): their edges are left out.
    imports = {
        name: {m for m in targets if m not in ("numba_gemm", "jax_bridge")}
        for name, targets in _imports_of_each_module().items()
    }
    done, path = set(), []

    def visit(module):
        if module in path:
            raise AssertionError(
                "import circle: " + " -> ".join(path[path.index(module) :] + [module])
            )
        if module in done:
            return
        path.append(module)
        for target in sorted(imports[module]):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(imports):
        visit(module)


def test_layers_import_downwards_only():
    imports = _imports_of_each_module()
    # The config lookup sits below api; the tuner above it. The library never imports the
    # bridge; only the command line (``python -m numba_gemm demo``) sits above both.
    assert "numba_gemm.api" not in imports["numba_gemm.tuned_configs"]
    assert "numba_gemm.autotune" not in imports["numba_gemm.api"]
    for module, targets in imports.items():
        if module.startswith("numba_gemm") and module != "numba_gemm.__main__":
            assert not any(t.startswith("jax_bridge") for t in targets), module
    # kernels and the pure-Python models know nothing of each other
    for module, targets in imports.items():
        if module.startswith("numba_gemm.model"):
            assert not any(t.startswith("numba_gemm.kernels") for t in targets), module
        if module.startswith("numba_gemm.kernels"):
            assert not any(t.startswith("numba_gemm.model") for t in targets), module


def test_the_library_does_not_import_the_test_helpers():
    import ast
    from pathlib import Path

    root = Path(numba_gemm.__file__).parents[1]
    for package in ("numba_gemm", "jax_bridge"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                assert not any(
                    n in ("checks", "tests", "conftest") or n.startswith("tests.") for n in names
                ), f"{path} imports {names}"


def test_the_version_is_defined_once():
    import tomllib
    from importlib import metadata
    from pathlib import Path

    import jax_bridge

    root = Path(numba_gemm.__file__).parents[1]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "numba_gemm.__version__"
    }
    assert jax_bridge.__version__ == numba_gemm.__version__
    assert f"## {numba_gemm.__version__} " in (root / "CHANGELOG.md").read_text()
    try:
        installed = metadata.version("numba-gemm")
    except metadata.PackageNotFoundError:  # run from a checkout on PYTHONPATH (the GPU suite)
        installed = numba_gemm.__version__
    assert installed == numba_gemm.__version__


def test_without_a_gpu_or_the_simulator_the_error_says_how_to_run():
    """No GPU and no NUMBA_ENABLE_CUDASIM: one short RuntimeError that says how to switch the
    simulator on, not Numba's CudaSupportError from deep inside a copy."""
    import os
    import subprocess
    import sys

    from numba import cuda

    if cuda.is_available() and not cuda.config.ENABLE_CUDASIM:
        pytest.skip("a GPU is present: host operands run on it")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    code = "import numpy as np, numba_gemm; numba_gemm.matmul(np.ones((3, 4)), np.ones((4, 5)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("RuntimeError: numba-gemm runs")
    assert "NUMBA_ENABLE_CUDASIM=1" in result.stderr and "CudaSupportError" not in result.stderr
