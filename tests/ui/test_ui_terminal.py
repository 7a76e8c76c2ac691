"""The real `gradtui` process in a pseudo-terminal: what Pilot cannot see, such as how long
the process takes to end after the app has closed."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

from gradtui.protocol.events import QUIT_STATUS
from gradtui.ui.client import QUIT_GRACE
from gradtui.wire.runtime import alive
from tests.helpers import REPO, example, script

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
        os.execv(sys.executable, [sys.executable, "-m", "gradtui", script("ui/sleeps.py")])
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
        assert status == QUIT_STATUS, (
            "gradtui was still running 10 s after q (or did not say it was quit)"
        )  # the script's sleep has 50 s left
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


# ---- the terminal goes away (issue: the UI hung for ever after SIGHUP) -----------------------

HANGUP_BOUND = QUIT_GRACE + 10
"""Seconds the UI may take to end once its terminal is gone: the watchdog's grace, and room for
a loaded machine. Before the watchdog it never ended."""


def _start_ui(script: str) -> tuple[int, int]:
    """`python -m gradtui SCRIPT` on a new 120x40 pty; (pid, master fd)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: become gradtui
        # os.environ's copy, not the C environment: something in the test process sets
        # COLUMNS/LINES there (80x24), which would fix the app's size (no redraw on a resize)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(TERM="xterm-256color", PYTHONPATH=str(REPO))
        os.execve(sys.executable, [sys.executable, "-m", "gradtui", script], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    return pid, fd


def _agents(pid: int) -> list[int]:
    """The UI's child processes (its agent)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=10).stdout
    return [int(p) for p in out.split()]


def _exit_status(pid: int, timeout: float) -> int | None:
    """Wait (polling, at most `timeout` seconds) for `pid` to end; its exit status, None if it did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(raw)
        time.sleep(0.05)
    return None


def _end(pid: int, agents: list[int], status: int | None) -> None:
    """Kill what is left of a UI and its agents (the UI's own group is its session)."""
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    for agent in agents:
        try:
            os.killpg(agent, signal.SIGKILL)  # the agent leads a group of its own
        except ProcessLookupError:
            pass


def _fill(fd: int, pid: int) -> None:
    """Resize the terminal (each size a whole redraw) and read none of it, until the UI's writes
    block and then its event loop: Textual's writer thread waits in a tty write (`wait_woken`)
    while the main thread waits on a lock (the writer's full queue), three looks in a row; at
    most MAX_REDRAWS (where /proc does not say, the redraws alone fill the queue)."""
    blocked = 0
    for i in range(MAX_REDRAWS):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40 + i % 2, 120 + i % 7, 0, 0))
        time.sleep(0.05)
        blocked = blocked + 1 if _writes_blocked(pid) else 0
        if blocked >= 3:
            return


MAX_REDRAWS = 150
"""Redraws `_fill` makes at most (about 50 filled the queue at 120x40 here)."""


def _writes_blocked(pid: int) -> bool:
    """Is the main thread of `pid` waiting on a lock while one of its threads waits in a tty write?"""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            main = f.read()
        waits = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/wchan") as f:
                waits.append(f.read())
    except OSError:
        return False
    return main.startswith("futex") and "wait_woken" in waits


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["closed", "frozen"])
def test_the_ui_ends_when_its_terminal_is_gone(how):
    """`closed`: the terminal's master side closes (tmux killed, sshd gone): the kernel hangs
    the pty up, SIGHUP, every write fails with EIO and Textual's writer thread dies. `frozen`:
    nobody reads the terminal any more (a stalled SSH connection) and redraws fill it, so the
    writer thread blocks in a write and the event loop in a write to its full queue; then
    SIGHUP. Either way Textual's driver waited for ever on its writer thread. The UI must end
    (as python ends of SIGHUP) and its agent with it, so the script is not left running."""
    pid, fd = _start_ui(example("chain.py"))
    status, agents, closed = None, [], False
    try:
        assert b"paused" in _drain(fd, 60, until=b"paused"), "the app did not draw its first pause"
        agents = _agents(pid)
        assert agents, "no agent process under the UI"
        if how == "closed":
            os.close(fd)
            closed = True
        else:
            _fill(fd, pid)
            os.kill(pid, signal.SIGHUP)
        status = _exit_status(pid, HANGUP_BOUND)
        assert status is not None, f"the UI had not ended {HANGUP_BOUND:.0f} s after its terminal went"
        # as python ends of SIGHUP: killed by it, or (the watchdog, Textual stuck) its status 129
        assert status in (-signal.SIGHUP, 128 + signal.SIGHUP), status
        deadline = time.monotonic() + 10
        while any(alive(agent) for agent in agents) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(agent) for agent in agents), "the agent (the script) outlived its UI"
    finally:
        _end(pid, agents, status)
        if not closed:
            os.close(fd)
