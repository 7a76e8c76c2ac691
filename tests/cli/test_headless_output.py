"""The headless printer's own lines (pauses, pass ends, the exit status) never run into the
script's output, even when the script leaves a line unfinished."""

from __future__ import annotations

import pytest

from tests.helpers import run_headless

pytestmark = pytest.mark.timeout(60)


def test_lines_of_gradtui_start_after_an_unfinished_line(tmp_path):
    path = tmp_path / "no_newline.py"
    path.write_text(
        "import torch\n"
        "x = torch.tensor([1.0], requires_grad=True)\n"
        "print('before', end='', flush=True)\n"
        "(x * 2).sum().backward()\n"
        "print('après ✓', end='')\n"
        "raise SystemExit('bye')\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["continue"])
    lines = run.output.splitlines()
    assert "before" in lines
    assert any(line.startswith("pass 0 · ") for line in lines)
    assert "après ✓" in lines
    assert lines[-2:] == ["bye", "script exited with status 1"]
