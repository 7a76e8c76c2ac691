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


def test_commands_left_when_the_script_ends_are_named_not_dropped():
    """`gradtui --headless`: the script ends during `continue` (its breakpoint never hits), before
    `print` and `flow`; they were dropped without a word. They are named, as a replay names them."""
    import os
    import subprocess
    import sys

    from tests.helpers import REPO, SCRIPTS

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--headless",
            "-c",
            "break pass 99",
            "-c",
            "continue",
            "-c",
            "print",
            "-c",
            "flow",
            str(SCRIPTS / "chain.py"),
        ],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["script exited with status 0", "(gradtui) -- the run has ended: not run: print; flow"]
