"""A guard against accidents, not a cap: no source file of the package or the benchmarks over
1,000 lines. Modules are cut by idea, not by length (a long module that is one idea beats three
that are not); a file this long has usually grown a second idea, or a generated table."""

from __future__ import annotations

import pathlib

import pytest

import gradtui

pytestmark = pytest.mark.timeout(60)

ROOT = pathlib.Path(gradtui.__file__).resolve().parent.parent
FILE_LINES = 1000


def _sources() -> list[pathlib.Path]:
    return sorted([*(ROOT / "gradtui").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")])


def test_no_source_file_over_a_thousand_lines():
    over = {
        path.relative_to(ROOT).as_posix(): n
        for path in _sources()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > FILE_LINES
    }
    assert over == {}, f"over {FILE_LINES} lines (still one idea?): {over}"
