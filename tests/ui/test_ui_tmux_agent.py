"""The UI and its child agent in a real terminal (tmux at 120x40): the script owns its process,
the UI survives the agent's end, and signals or `q` to the UI stop the agent and give the
terminal back as it was.

Each pane runs `sh -c 'python -m gradtui SCRIPT; echo gradtui-exit=$?; stty -a; sleep'`: a
non-interactive shell, so nothing but gradtui itself restores the terminal (an interactive
bash resets the tty after a job a signal killed, which would hide a raw terminal left behind).
`gradtui-exit=` is the shell being back; `stty -a` runs in that pane after gradtui, and tmux's
`#{alternate_on}` says whether the alternate screen is still on. Every wait has a timeout; the
private tmux server is killed at the end, and any process of ours still alive is SIGKILLed.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from gradtui.protocol.events import QUIT_STATUS
from tests.helpers import REPO, script
from tests.processes import children, gone

pytestmark = pytest.mark.timeout(120)

WIDTH, HEIGHT = 120, 40
START = 60.0
"""Seconds the UI and its agent (which imports torch) have to reach the first pause."""

_SERVERS = itertools.count()


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll `predicate` until true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Panes:
    """A private tmux server; each window runs gradtui on a script under a plain `sh`."""

    def __init__(self) -> None:
        self.socket = f"gradtui-agent-test-{os.getpid()}-{next(_SERVERS)}"  # one server per test
        self.started: list[int] = []
        """Every UI and agent pid seen, SIGKILLed at the end if still alive."""

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10, check=check
        )

    def open(self, name: str, fixture: str) -> None:
        """Start window `name`: gradtui on `fixture` (a script in tests/fixtures/ui), then the exit
        status and `stty -a`."""
        line = (
            f"{shlex.quote(sys.executable)} -m gradtui {shlex.quote(script('ui/' + fixture))}; "
            "echo gradtui-exit=$?; stty -a; sleep 300"
        )
        # COLUMNS/LINES from the environment (pytest's may have them) would fix the app at that
        # size, whatever the pane's.
        command = ["env", "-u", "COLUMNS", "-u", "LINES", f"PYTHONPATH={REPO}", "TERM=xterm-256color", "sh", "-c", line]
        # A session per window: each created at WIDTH x HEIGHT (a new-window takes default-size).
        self._tmux("new-session", "-d", "-s", name, "-x", str(WIDTH), "-y", str(HEIGHT), *command)
        size = self._tmux("display-message", "-p", "-t", f"{name}:", "#{window_width}x#{window_height}").stdout
        assert size.strip() == f"{WIDTH}x{HEIGHT}", size

    def screen(self, name: str) -> str:
        """What window `name` shows now."""
        return self._tmux("capture-pane", "-p", "-t", f"{name}:").stdout

    def alternate_on(self, name: str) -> bool:
        """Is window `name`'s alternate screen on (the app still drawing, or left behind)?"""
        return self._tmux("display-message", "-p", "-t", f"{name}:", "#{alternate_on}").stdout.strip() == "1"

    def keys(self, name: str, *keys: str) -> None:
        """Type keys in window `name`."""
        self._tmux("send-keys", "-t", f"{name}:", *keys)

    def wait(self, name: str, predicate: Callable[[str], bool], timeout: float = 20, what: str = "") -> str:
        """Poll window `name`'s screen until `predicate(screen)`; fail with it after `timeout`."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen(name)
            if predicate(screen):
                return screen
            time.sleep(0.1)
        pytest.fail(f"timed out after {timeout}s waiting for {what} in {name}; the screen:\n{screen}")

    def first_pause(self, name: str) -> str:
        """Wait for the app's first pause drawn at WIDTH x HEIGHT. Should the app have come up
        at another size (a resize it missed, before its SIGWINCH handler was in), a SIGWINCH
        makes it read the size again, as a terminal resize would; it must then fill the pane."""
        screen = self.wait(name, paused, START, what="the first pause")
        if not drawn_whole(screen):
            os.kill(self.ui_pid(name), signal.SIGWINCH)
            screen = self.wait(name, drawn_whole, 10, what=f"the app drawn at {WIDTH}x{HEIGHT}")
        return screen

    def ui_pid(self, name: str) -> int:
        """The UI's pid: the only child of the pane's shell."""
        shell = int(self._tmux("list-panes", "-t", f"{name}:", "-F", "#{pane_pid}").stdout.split()[0])
        ui = children(shell)
        assert len(ui) == 1, f"the pane's shell has children {ui}, not one UI"
        return ui[0]

    def processes(self, name: str) -> tuple[int, int]:
        """The UI's pid (the pane's shell's child) and its agent's (the UI's `gradtui.agent` child)."""
        ui = self.ui_pid(name)
        agents = children(ui, "gradtui.agent")
        assert len(agents) == 1, f"the UI {ui} has agent children {agents}, not one"
        self.started += [ui, agents[0]]
        return ui, agents[0]

    def returned(self, name: str, timeout: float = 15) -> tuple[int, str]:
        """Wait for the shell to be back after gradtui; its exit status and what `stty -a` said."""
        screen = self.wait(
            name,
            lambda s: "gradtui-exit=" in s and "icanon" in s,
            timeout,
            what="gradtui's end and the shell's stty -a",
        )
        status = int(re.search(r"gradtui-exit=(\d+)", screen).group(1))
        return status, screen.partition("gradtui-exit=")[2]

    def close(self) -> None:
        """Kill the tmux server and any process of ours still alive."""
        self._tmux("kill-server", check=False)
        for pid in self.started:
            if not gone(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def assert_terminal_restored(panes: Panes, name: str, stty: str) -> None:
    """The alternate screen is off and the tty is cooked again (`icanon`, `echo`, not `-icanon`)."""
    assert not panes.alternate_on(name), f"{name}: the alternate screen is still on"
    flags = stty.split()
    assert "icanon" in flags and "-icanon" not in flags, f"{name}: stty -a says\n{stty}"
    assert "echo" in flags and "-echo" not in flags, f"{name}: stty -a says\n{stty}"


def paused(screen: str) -> bool:
    """Is the app drawn and paused at its first node?"""
    return "paused at #0" in screen


def drawn_whole(screen: str) -> bool:
    """Is the app drawn at the full 120x40 (the output pane's top border on the left)?"""
    lines = screen.splitlines()
    return len(lines) >= HEIGHT - 1 and any(len(line) == WIDTH for line in lines)


@pytest.fixture
def panes():
    panes = Panes()
    try:
        yield panes
    finally:
        panes.close()


def test_the_script_owns_its_main_thread_and_fds_and_q_while_paused_leaves_no_agent(panes):
    panes.open("own", "owns_signals.py")
    panes.first_pause("own")
    screen = panes.wait("own", lambda s: "from-a-child" in s, 10, what="the shell child's output")
    assert "on MainThread" in screen  # signal.signal worked: the script is on its main thread
    assert panes.alternate_on("own")
    ui, agent = panes.processes("own")
    started = time.monotonic()
    panes.keys("own", "q")
    wait_until(lambda: gone(ui), 10, "the UI to end after q while paused")
    took = time.monotonic() - started
    wait_until(lambda: gone(agent), 5, "the agent to end with its UI")
    status, stty = panes.returned("own")
    assert status == QUIT_STATUS, status  # quit before the script ended
    assert_terminal_restored(panes, "own", stty)
    print(f"q while paused to the UI's end: {took:.2f}s")


@pytest.mark.parametrize(
    "script, how, status",
    [
        ("exits4.py", "exited with status 4", 4),
        ("crashes.py", "was killed by SIGSEGV", 128 + 11),
    ],
)
def test_the_ui_stays_open_when_the_agent_dies_then_q_restores_the_terminal(panes, script, how, status):
    panes.open("dies", script)
    panes.first_pause("dies")
    ui, agent = panes.processes("dies")
    panes.keys("dies", "c")
    # How it ended, and its last output ("leaving now", "crashing now"); waited for together,
    # as one capture can fall in the middle of a repaint.
    panes.wait(
        "dies",
        lambda s: how in " ".join(s.split()) and "ing now" in s,
        20,
        what=f"'{how}' and the script's last line on screen",
    )
    wait_until(lambda: gone(agent), 5, "the agent to be gone")
    time.sleep(0.3)
    assert not gone(ui) and panes.alternate_on("dies"), "the UI did not stay open"
    assert how in " ".join(panes.screen("dies").split())
    panes.keys("dies", "q")
    got, stty = panes.returned("dies")
    assert got == status
    assert_terminal_restored(panes, "dies", stty)


SIGNALS = {"term": (signal.SIGTERM,), "hup": (signal.SIGHUP,), "int2": (signal.SIGINT, signal.SIGINT)}
"""The signals each window's UI gets, at once."""


def test_sigterm_sighup_and_two_sigints_stop_the_agent_and_restore_the_terminal(panes):
    # Three UIs at once (each start imports torch: one after another would take three times as long).
    for name in SIGNALS:
        panes.open(name, "owns_signals.py")
    for name in SIGNALS:
        panes.first_pause(name)
    pids = {name: panes.processes(name) for name in SIGNALS}
    for name, signums in SIGNALS.items():
        for signum in signums:
            os.kill(pids[name][0], signum)
    for name, (ui, agent) in pids.items():
        wait_until(lambda: gone(agent), 10, f"{name}: the agent to be stopped")
        wait_until(lambda: gone(ui), 10, f"{name}: the UI to end (not frozen)")
        status, stty = panes.returned(name)
        # as python: killed by the (first) signal, so the shell says 128 + N (143, 129, 130)
        assert status == 128 + SIGNALS[name][0], f"{name}: gradtui exited with {status}"
        assert_terminal_restored(panes, name, stty)
