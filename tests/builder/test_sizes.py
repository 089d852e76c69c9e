"""The build stage stays readable: no module in bot/builder/ over 500 lines, no function there over 60 (issue 22).

A function's length runs from its `def` line (decorators excluded) to its last line, docstring and comments
included; a nested function counts on its own and inside the function that holds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

BUILD = Path(__file__).resolve().parents[2] / "bot" / "builder"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def long_functions(source: str) -> dict[str, int]:
    """`name:line` -> length of every function of `source` over `MAX_FUNCTION_LINES`."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found[f"{node.name}:{node.lineno}"] = length
    return found


def _modules() -> list[Path]:
    return sorted(BUILD.glob("*.py"))


def test_the_build_stage_is_where_the_limits_look():
    assert {"group.py", "draft.py", "target.py", "check_ir.py", "validate.py"} <= {p.name for p in _modules()}


def test_no_build_module_is_over_500_lines():
    lines = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in _modules()}
    assert not {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}, "split these modules of bot/builder/"


def test_no_build_function_is_over_60_lines():
    long = {
        f"{path.name} {name}": length
        for path in _modules()
        for name, length in long_functions(path.read_text(encoding="utf-8")).items()
    }
    assert not long, f"split these functions of bot/builder/ (lines): {long}"


def test_a_function_of_61_lines_is_found_and_one_of_60_is_not():
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    source = f"def fits():\n{body}\n\n\ndef too_long():\n{body}\n    return 1\n"
    assert long_functions(source) == {"too_long:63": 61}
