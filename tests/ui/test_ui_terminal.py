"""The real `gradtui` process in a pseudo-terminal: what Pilot cannot see, such as how long
the process takes to end after the app has closed."""

from __future__ import annotations

import os
import select
import signal
import sys
import time

import pytest

from gradtui.core.events import QUIT_STATUS

from conftest import REPO
from ui_helpers import ui_script

pty = pytest.importorskip("pty")

pytestmark = pytest.mark.timeout(60)


def _drain(fd: int, seconds: float, until: bytes | None = None) -> bytes:
    """Read what the app draws for `seconds` (or until `until` shows up)."""
    seen, end = b"", time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            seen += chunk
            if until is not None and until in seen:
                break
    return seen


def test_q_while_the_script_sits_in_a_c_call_ends_the_process():
    """The app closed at once, but the process then waited for the script's time.sleep(60):
    asyncio.run joined the executor thread the script runs in."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: become gradtui
        os.environ.update(TERM="xterm-256color", PYTHONPATH=str(REPO))
        os.execv(sys.executable, [sys.executable, "-m", "gradtui", ui_script("sleeps.py")])
    status = None
    try:
        assert b"sleeping" in _drain(fd, 30, until=b"sleeping"), "the app did not show the script's output"
        _drain(fd, 0.5)
        started = time.monotonic()
        os.write(fd, b"q")
        while status is None and time.monotonic() < started + 10:
            _drain(fd, 0.1)
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
        assert status == QUIT_STATUS, "gradtui was still running 10 s after q (or did not say it was quit)"  # the script's sleep has 50 s left
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
