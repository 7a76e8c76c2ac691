"""A real terminal for the journey tests: a tmux pane on a private server, where `gradtui` runs
as a person runs it (the console script, TERM=xterm-256color, no COLUMNS/LINES), under a plain
`sh` that records the tty's modes (`stty -g`) before and after it and prints its exit status.

Everything the pane's programs write is copied to a log (`tmux pipe-pane`), so a test sees
what reached the terminal even after the alternate screen was left, and tmux itself says what
state the terminal was left in (alternate screen, cursor, mouse modes). Every wait has a
timeout; `close` kills the private server and any process of ours still alive.
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
from pathlib import Path

import pytest

from tests.procs import descendants, gone

SIZES = ((80, 24), (160, 45))
"""The terminals a person meets: a laptop split or an SSH window, and a full screen."""

START = 90.0
"""Seconds gradtui (which imports torch, in its agent too) has to reach its first pause on a
loaded machine."""

EXIT_MARK = "journey-exit="
"""What the pane's shell prints after gradtui, before its status."""

FOREIGN = (
    "Traceback",
    "Task was destroyed",
    "Exception ignored",
    "ValueError",
    "RuntimeError",
    "Error in sys.excepthook",
    "was never awaited",
    "press ctrl+q",
)
"""Words that are not gradtui's own: Python's and asyncio's complaints, Textual's hints. Looked
for in everything the terminal was sent, the UI's panes too: a journey's script prints none."""

_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|P[^\x1b]*\x1b\\|[@-Z\\-_])")
_PRIVATE_MODES = re.compile(r"\x1b\[\?([0-9;]+)([hl])")

MODES_OFF = {
    "1049": "the alternate screen",
    "1047": "the alternate screen",
    "1000": "mouse reporting",
    "1002": "mouse drag reporting",
    "1003": "mouse motion reporting",
    "1006": "SGR mouse",
    "1015": "urxvt mouse",
    "1004": "focus events",
    "2004": "bracketed paste",
}
"""DEC private modes a TUI sets and must reset on leaving (mode: what it is)."""

_SERVERS = itertools.count()


def gradtui_command() -> list[str]:
    """`gradtui` as installed beside this Python (the console script a person types), else
    `python -m gradtui`."""
    script = Path(sys.executable).with_name("gradtui")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gradtui"]


def plain_text(raw: str) -> str:
    """The log with every escape sequence removed: the words that reached the terminal."""
    return _ESCAPES.sub("", raw).replace("\r", "")


def private_modes(raw: str) -> dict[str, bool]:
    """Each DEC private mode's last setting in the log (True: set)."""
    modes: dict[str, bool] = {}
    for numbers, action in _PRIVATE_MODES.findall(raw):
        for number in numbers.split(";"):
            modes[number] = action == "h"
    return modes


class Terminal:
    """One tmux pane of `width` x `height` running `command` (a list of words) under `sh`."""

    def __init__(
        self, command: list[str], folder: Path, width: int, height: int, env: dict[str, str] | None = None
    ) -> None:
        self.folder = folder
        self.width, self.height = width, height
        self.socket = f"gradtui-journey-{os.getpid()}-{next(_SERVERS)}"
        self.log = folder / "terminal.log"
        self.before, self.after = folder / "stty.before", folder / "stty.after"
        go = folder / "go"
        # The shell waits (bounded) until the log is piped, so nothing the terminal shows is missed.
        line = (
            f"i=0; while [ ! -e {shlex.quote(str(go))} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
            f"stty -g > {shlex.quote(str(self.before))}; {shlex.join(command)}; "
            f"echo {EXIT_MARK}$?; stty -g > {shlex.quote(str(self.after))}; sleep 600"
        )
        variables = {"TERM": "xterm-256color", **(env or {})}
        words = ["env", "-u", "COLUMNS", "-u", "LINES", *(f"{k}={v}" for k, v in variables.items()), "sh", "-c", line]
        self._tmux("new-session", "-d", "-s", "j", "-x", str(width), "-y", str(height), *words)
        self.shell = int(self._tmux("list-panes", "-t", "j", "-F", "#{pane_pid}").stdout.split()[0])
        self.socket_path = self._tmux("display-message", "-p", "#{socket_path}").stdout.strip()
        """The server's socket file, which tmux leaves behind when killed."""
        self._tmux("pipe-pane", "-o", "-t", "j", f"cat >> {shlex.quote(str(self.log))}")
        go.touch()
        self.pids: set[int] = {self.shell}
        """Every process seen below the pane, SIGKILLed at `close` if still alive."""

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10, check=check
        )

    def screen(self) -> str:
        """What the pane shows now."""
        return self._tmux("capture-pane", "-p", "-t", "j", check=False).stdout

    def keys(self, *keys: str) -> None:
        """Press keys (tmux key names: `q`, `C-q`, `Enter`)."""
        self.pids.update(descendants(self.shell))
        self._tmux("send-keys", "-t", "j", *keys)

    def text(self, text: str) -> None:
        """Type literal text."""
        self._tmux("send-keys", "-t", "j", "-l", text)

    def wait(self, predicate: Callable[[str], object], what: str, timeout: float = 30) -> str:
        """Poll the screen until `predicate(screen)`; fail with the last screen after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                self.pids.update(descendants(self.shell))
                return screen
            if time.monotonic() > deadline:
                pytest.fail(
                    f"timed out after {timeout}s waiting for {what}; the screen:\n{screen}"
                    f"\nthe terminal's words:\n{self.words()[-3000:]}"
                )
            time.sleep(0.1)

    def raw(self) -> str:
        """Everything written to the terminal so far, escape sequences and all."""
        return self.log.read_bytes().decode("utf-8", "replace") if self.log.exists() else ""

    def words(self) -> str:
        """Everything written to the terminal so far, without escape sequences."""
        return plain_text(self.raw())

    def exit_status(self, timeout: float = 30) -> int:
        """gradtui's exit status, once the pane's shell has printed it (and `stty -g` after)."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(re.escape(EXIT_MARK) + r"(\d+)", self.words())
            if found and self.after.exists() and self.after.stat().st_size:
                return int(found.group(1))
            if time.monotonic() > deadline:
                pytest.fail(f"gradtui did not end within {timeout}s; the screen:\n{self.screen()}")
            time.sleep(0.1)

    def flag(self, name: str) -> str:
        """One of tmux's format variables for the pane (its terminal's state as tmux sees it)."""
        return self._tmux("display-message", "-p", "-t", "j", f"#{{{name}}}").stdout.strip()

    def assert_clean_exit(self, status: int, own_words: Callable[[str], bool] = lambda line: False) -> str:
        """gradtui ended with `status`; nothing but its own words reached the terminal after it
        left the alternate screen (each paragraph there gradtui's, or one `own_words` accepts),
        none of FOREIGN anywhere; and the terminal is as it found it. Returns the words printed
        on the main screen."""
        got = self.exit_status()
        raw, words = self.raw(), self.words()
        for foreign in FOREIGN:
            assert foreign not in words, f"{foreign!r} reached the terminal:\n{words[-4000:]}"
        assert got == status, f"exit status {got}, not {status}:\n{words[-3000:]}"
        # What the main screen got: everything after the last time the alternate screen was left.
        left = max(raw.rfind("\x1b[?1049l"), 0)
        after = plain_text(raw[left:]).split(EXIT_MARK)[0]
        # Each paragraph (a message wrapped at the terminal's width is one) is gradtui's.
        for paragraph in re.split(r"\n\s*\n", after):
            text = " ".join(paragraph.split())
            assert not text or text.startswith("gradtui") or own_words(text), (
                f"not gradtui's words on the terminal: {text!r}\n{after}"
            )
        # The terminal as it was: tty modes, and every mode the app set reset (tmux's view, and the log's).
        assert self.before.read_text() == self.after.read_text(), "the tty's modes changed (stty -g)"
        assert self.flag("alternate_on") == "0", "the alternate screen was left on"
        assert self.flag("cursor_flag") == "1", "the cursor was left hidden"
        assert self.flag("mouse_any_flag") == "0", "mouse reporting was left on"
        modes = private_modes(raw)
        assert modes.get("25", True), "the cursor was left hidden (no ESC[?25h after the last ESC[?25l)"
        for mode, what in MODES_OFF.items():
            assert not modes.get(mode, False), f"{what} (mode {mode}) was left on"
        return after

    def server_pid(self) -> int:
        """The pid of the pane's private tmux server (stopping it freezes the terminal)."""
        return int(self._tmux("display-message", "-p", "#{pid}").stdout.strip())

    def close_pane(self) -> None:
        """Close the pane as a terminal window is closed: tmux hangs it up (SIGHUP to what runs
        in it) and the terminal is gone."""
        self.pids.update(descendants(self.shell))
        self._tmux("kill-pane", "-t", "j", check=False)

    def close(self) -> None:
        """Kill the private tmux server (and remove its socket file), then every process of ours
        that outlived it."""
        self.pids.update(descendants(self.shell))
        self._tmux("kill-server", check=False)
        if self.socket_path:
            Path(self.socket_path).unlink(missing_ok=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(gone(pid) for pid in self.pids):
            time.sleep(0.05)
        for pid in self.pids:
            if not gone(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
