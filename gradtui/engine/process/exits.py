"""A run's process ends as `python script.py` would have ended: by the same signal.

python ends a script that raised an unhandled KeyboardInterrupt (Ctrl-C, or one raised in the
script's own code) by killing itself with SIGINT after its normal finalization (non-daemon
threads joined, atexit run), so a shell sees 130 and knows the user pressed ^C; SIGTERM and
SIGHUP, left at their default, kill it at once (143, 129). A process gradtui runs the script
in (headless, a child agent, `--listen`) must end the same way, and still leave its report,
recording and runtime file saying how the run ended. This module is torch-free: the entry
points arm it before torch is imported, so its atexit hook runs after every other one.

- `arm()`: called by a program's entry point only (never by a library call, a test's
  in-process `main([...])`), registers the atexit hook that kills the process with the signal
  `die_at_exit` recorded.
- `FatalSignals`: SIGTERM and SIGHUP handlers that run the owner's last words (in a helper
  thread, with a deadline: the main thread may hold any lock when the signal comes), then die
  of the signal at once, as python would. Installed, it also arms the deferral of signals that
  land inside gradtui's own writes on the script's thread (gradtui.engine.process.deferral), so those
  locks are not the listeners' when the last words need them. From the script's last line on
  (the runner says so) every signal waits for the owner's own last words; `restore`, called
  once they are said, then kills the process of a SIGTERM / SIGHUP that came meanwhile and
  reports a Ctrl-C that was dropped (python ignores one in its atexit functions too: the
  status stays the script's, and the owner prints IGNORED_INTERRUPT where gradtui's own lines go).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from collections.abc import Callable

from gradtui.engine.process.deferral import DEFERRAL
from gradtui.protocol.dying import die_now, flush_std_streams, signal_status

__all__ = [
    "FatalSignals",
    "IGNORED_INTERRUPT",
    "arm",
    "describe_signal",
    "die_at_exit",
    "die_now",
    "end_at_exit",
    "pending",
    "signal_status",
]

FATAL = (signal.SIGTERM, signal.SIGHUP)
"""The signals whose default action kills python at once (no finally, no atexit)."""

LAST_WORDS_DEADLINE = 3.0
"""Seconds the owner's last words (report, recording, runtime file, goodbye) may take before
the process dies of its signal anyway."""

IGNORED_INTERRUPT = (
    "gradtui: a Ctrl-C (SIGINT) came after the script had ended: ignored, as python "
    "ignores one in its atexit functions; the exit status is the script's"
)
"""gradtui's note when a SIGINT came during its last words (`FatalSignals.restore` said so)."""

_armed = False
_pending: int | None = None


def describe_signal(signum: int) -> str:
    """`was killed by SIGTERM (Terminated)`: the `how` of a run ended by a signal."""
    sig = signal.Signals(signum)
    return f"was killed by {sig.name} ({signal.strsignal(sig) or sig.name})"


def arm() -> None:
    """This process is a gradtui program's: let `die_at_exit` take effect (see module doc).

    Registered early, the hook runs last of the atexit functions (they run in reverse order),
    after the script's own, as python kills itself after running them."""
    global _armed
    if not _armed:
        _armed = True
        atexit.register(_at_exit)


def die_at_exit(signum: int | None) -> None:
    """End the process with `signum` once it has finalized (nothing if None, or if not armed)."""
    global _pending
    _pending = signum


_status_at_exit: int | None = None


def end_at_exit(status: int) -> None:
    """End the process with `os._exit(status)` once the atexit functions have run (if armed).

    For a torchrun rank: once the script and gradtui's last words are done, interpreter
    finalization can only run C++ destructors, and gloo's can abort a finished rank
    ("terminate called without an active exception", SIGABRT; plain torchrun runs too, 2 in 10
    under load here). A recorded signal (`die_at_exit`) still wins."""
    global _status_at_exit
    _status_at_exit = status


def pending() -> int | None:
    """The signal the process will end with, if one was recorded."""
    return _pending


def _at_exit() -> None:
    if _armed and _pending is not None:
        die_now(_pending)
    if _armed and _status_at_exit is not None:
        flush_std_streams()
        os._exit(_status_at_exit)


class FatalSignals:
    """SIGTERM / SIGHUP: `last_words(signum)`, then die of the signal (see module doc).

    Installed on the main thread before the script runs (a script that installs its own
    handler owns the signal from then on, as in plain python); `restore` puts back what was
    there. `last_words` runs in a helper thread and has LAST_WORDS_DEADLINE seconds."""

    def __init__(self, last_words: Callable[[int], None], deadline: float = LAST_WORDS_DEADLINE) -> None:
        self._last_words = last_words
        self._deadline = deadline
        self._previous: dict[int, object] = {}
        self._dying = threading.Event()

    def install(self) -> None:
        """Handle SIGTERM and SIGHUP where they are at their default, and defer signals in the
        listeners' writes (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in FATAL:
            if signal.getsignal(signum) is signal.SIG_DFL:
                self._previous[signum] = signal.signal(signum, self._handle)
        DEFERRAL.arm(True)

    def restore(self) -> int | None:
        """Put back the handlers that were there, where ours is still installed; then no more
        deferral. Called once the owner's last words are said (the report, the recording, the
        client's goodbye): a SIGTERM / SIGHUP that came since the script's end kills the process
        now, as python's; a Ctrl-C then was dropped (python ignores it there too): SIGINT is
        returned, for the owner's note (IGNORED_INTERRUPT). See gradtui.engine.process.deferral."""
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._handle:
                signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()
        try:
            return DEFERRAL.settle()
        finally:
            DEFERRAL.arm(False)

    def _handle(self, signum: int, _frame: object) -> None:
        if DEFERRAL.defers(signum):
            return  # landed in a listener's write: raised again when it ends
        if self._dying.is_set():
            return  # a second signal while the first one's last words are said
        self._dying.set()
        speaker = threading.Thread(target=self._speak, args=(signum,), name="gradtui-last-words", daemon=True)
        speaker.start()
        speaker.join(self._deadline)
        die_now(signum)

    def _speak(self, signum: int) -> None:
        try:
            self._last_words(signum)
        except BaseException:  # noqa: BLE001, S110 - the process dies next whatever happened; fd 2 may
            pass  # be the script's captured stderr, where gradtui's diagnostics never go
