"""The UI and the engine die of a signal by one body (gradtui.protocol.dying): as python does,
the streams flushed first, then killed by the signal itself (a shell sees 128 + N)."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gradtui

PACKAGE = Path(gradtui.__file__).resolve().parent


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_die_now_flushes_then_dies_of_the_signal(signum):
    code = (
        "import sys\nfrom gradtui.protocol.dying import die_now\n"
        "sys.stdout.write('unflushed')\n"  # a pipe: block-buffered, lost if not flushed
        f"die_now({int(signum)})\nprint('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signum, (done.returncode, done.stderr)
    assert done.stdout == "unflushed"


def _defined(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(node, ast.FunctionDef)}


def test_the_ui_and_the_engine_share_one_way_to_die():
    """No twin of `die_now` or `signal_status` in the UI's watchdog or the engine's exits: both take them
    from gradtui.protocol.dying (the UI may import no engine module)."""
    from gradtui.engine.process import exits
    from gradtui.protocol import dying
    from gradtui.ui import run, watchdog

    for path in (
        PACKAGE / "ui" / "watchdog.py",
        PACKAGE / "engine" / "process" / "exits.py",
        PACKAGE / "ui" / "run.py",
    ):
        assert not _defined(path) & {"die_now", "die_of", "signal_status", "_flush"}, path.name
    assert exits.die_now is dying.die_now and run.die_now is dying.die_now
    assert watchdog.signal_status is dying.signal_status is exits.signal_status
