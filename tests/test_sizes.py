"""The sizes DESIGN.md asks for, checked statically over the source (`ast`): no function over 60
lines and no class over 300, in the whole package (gradtui/ui too) and in benchmarks/. What is over
today is listed, and the list only shrinks."""

from __future__ import annotations

import ast
import pathlib

import pytest

import gradtui

pytestmark = pytest.mark.timeout(60)

ROOT = pathlib.Path(gradtui.__file__).resolve().parent.parent
FUNCTION_LINES = 60
CLASS_LINES = 300

KNOWN_OVER: set[str] = set()
"""`path:name` of what may be over its size for now (none today): a list that only shrinks."""


def _sources() -> list[pathlib.Path]:
    return sorted([*(ROOT / "gradtui").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")])


def oversized() -> set[str]:
    """`path:name` of every function over FUNCTION_LINES and every class over CLASS_LINES."""
    found = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
            limit = {ast.FunctionDef: FUNCTION_LINES, ast.AsyncFunctionDef: FUNCTION_LINES,
                     ast.ClassDef: CLASS_LINES}.get(type(node))
            if limit is not None and lines > limit:
                found.add(f"{path.relative_to(ROOT).as_posix()}:{node.name}")  # type: ignore[attr-defined]
    return found


def test_no_function_over_60_lines_and_no_class_over_300():
    found = oversized()
    assert found - KNOWN_OVER == set(), f"over {FUNCTION_LINES} lines (a function) or {CLASS_LINES} (a class): {sorted(found - KNOWN_OVER)}"
    assert KNOWN_OVER <= found, f"no longer over its size, drop from KNOWN_OVER: {sorted(KNOWN_OVER - found)}"
