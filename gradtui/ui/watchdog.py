"""The last resort of a UI told to quit by a signal: end the process if the app has not.

`run_app` (gradtui.ui.run) arms a QuitWatchdog when SIGINT, SIGTERM or SIGHUP arrives; the
app's own quit path runs as ever, and the watchdog acts only if that has not ended the app
within its grace period (see QuitWatchdog for why it may never).
"""

from __future__ import annotations

import os
import sys
import termios
import threading
from collections.abc import Callable

from gradtui.protocol.dying import signal_status
from gradtui.protocol.events import QUIT_STATUS
from gradtui.wire.target import DebugTarget

RESTORE_WAIT = 0.5
"""Seconds the watchdog waits for its write of the terminal modes (a dead tty may block it)."""

RESTORE = "\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l\x1b[?7h\x1b[<u\x1b[?1049l\x1b[?25h\x1b[?1004l"
"""What Textual's LinuxDriver writes when it leaves application mode: mouse reporting and
bracketed paste off, line wrap and the cursor back on, the main screen back."""


class QuitWatchdog:
    """Ends the process if the app has not ended `grace` seconds after a signal asked it to quit.

    Once its terminal is gone (tmux killed, an SSH connection dropped) Textual's writer thread
    dies on EIO, or blocks for ever in a write nobody reads; its queue (30 writes) fills, and
    the next frame's write or `LinuxDriver.close` (`WriterThread.stop`) waits on it for ever:
    the app never ended and the process sat there, its script with it. The watchdog is a
    timer thread: it stops the target (a child agent's process group is SIGKILLed; an agent
    attached to over the wire sees its client go, as after any crash of the client), gives
    the terminal back what it can, and ends the process as python would have ended of the
    signal that armed it (`signal_status`: 130, 143, 129), QUIT_STATUS if none is known."""

    def __init__(self, target: DebugTarget, driver: Callable[[], object | None], grace: float) -> None:
        self.target = target
        self.driver = driver
        """The app's Textual driver now (None before it started): its saved terminal modes."""
        self.grace = grace
        self._armed = threading.Event()
        self._ended = threading.Event()
        self._was_armed = False
        self._signum: int | None = None

    def start(self) -> None:
        """Start the watching thread (idle until `arm`): a signal handler only sets an event,
        it starts no thread (that takes locks the interrupted main thread may hold)."""
        threading.Thread(target=self._watch, name="gradtui-quit-watchdog", daemon=True).start()

    def arm(self, signum: int | None = None) -> None:
        """Start the countdown for `signum` (once: a second signal does not restart it)."""
        if not self._was_armed:  # the flag first: a signal handler may be re-entered
            self._was_armed = True
            self._signum = signum
            self._armed.set()

    def disarm(self) -> None:
        """The app ended: no countdown, and the thread ends."""
        self._ended.set()
        self._armed.set()

    def _watch(self) -> None:
        self._armed.wait()
        if not self._ended.wait(self.grace):
            self._fire()

    def _fire(self) -> None:
        kill = getattr(self.target, "kill_now", None)
        if kill is not None:
            kill()
        restore_terminal(self.driver())
        os._exit(QUIT_STATUS if self._signum is None else signal_status(self._signum))


def restore_terminal(driver: object | None) -> None:
    """Put back the terminal modes Textual saved and leave its screen, as far as the terminal
    lets: the write is made from a thread of its own and waited on only RESTORE_WAIT seconds,
    since a terminal nobody reads any more blocks it."""
    attrs, fileno = getattr(driver, "attrs_before", None), getattr(driver, "fileno", None)
    if attrs is not None and isinstance(fileno, int):
        try:
            termios.tcsetattr(fileno, termios.TCSANOW, attrs)  # TCSANOW: no wait for output to drain
        except (termios.error, OSError):
            pass
    stream = sys.__stderr__  # where Textual's LinuxDriver writes
    if stream is None:
        return

    def write() -> None:
        try:
            os.write(stream.fileno(), RESTORE.encode())
        except (OSError, ValueError):
            pass

    writer = threading.Thread(target=write, name="gradtui-restore", daemon=True)
    writer.start()
    writer.join(RESTORE_WAIT)
