"""The README: a front page of at most 300 lines whose examples run, whose Performance table is
what ``python -m numba_gemm bench --readme`` prints from the committed results, and whose links
all resolve."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
TABLE_START = "<!-- performance table: python -m numba_gemm bench --readme -->\n"
TABLE_END = "<!-- end of performance table -->"


def test_the_readme_is_a_front_page():
    assert len(README.splitlines()) <= 300
    # Nothing the reader cannot see: no issue numbers, sessions or dated experiment names.
    assert not re.search(r"\bissue \d|\bsession|-noise-floor|-calibrated-rounds", README, re.I)


def test_the_performance_table_is_generated_from_the_results():
    from numba_gemm.report import readme_table

    start = README.index(TABLE_START) + len(TABLE_START)
    assert README[start : README.index(TABLE_END)].strip() == readme_table().strip()


def test_every_link_and_results_file_exists():
    targets = re.findall(r"\]\(([^)#]+)\)", README) + re.findall(
        r"`(benchmarks/results/[^`]+)`", README
    )
    assert targets
    for target in targets:
        if target.startswith("http") or "<" in target:  # a web page, or a pattern
            continue
        assert (ROOT / target).exists(), target


@pytest.mark.parametrize(
    "index", range(len(re.findall(r"```python\n", README))), ids=lambda i: f"example{i}"
)
def test_the_python_examples_run(index):
    # On the simulator in CI (small sizes on purpose), on the GPU where there is one.
    code = re.findall(r"```python\n(.*?)```", README, re.S)[index]
    exec(compile(code, f"README example {index}", "exec"), {})
