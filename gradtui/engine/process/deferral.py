"""A signal that lands while gradtui writes on the script's thread waits for the write to end.

A session's listeners (gradtui.engine.listeners) write what the run leaves behind (the
recording's transaction, the report, the headless output, a client's queue) on the thread that
emits, the script's, under their own locks. Handled in the middle of that, a SIGTERM / SIGHUP
runs the last words (gradtui.engine.process.exits.FatalSignals) while the main thread holds a lock they
need, so they time out and nothing says how the run ended; a SIGINT's KeyboardInterrupt is
raised inside the write, leaving it half done. So while the main thread is inside the fan-out
(`Deferral.inside`), a handler only notes the signal (`defers`); when the outermost fan-out
ends, the signal is raised again and the handler then in place acts on it as it would have
right after the write: FatalSignals' last words and death of the signal, python's own
KeyboardInterrupt in the script's thread (130 at exit, as before).

- SIGTERM / SIGHUP: FatalSignals' handler (installed for the whole run) asks `defers` first.
  A write that does not end within DEFER_DEADLINE seconds does not keep the process alive: it
  ends as a shell would report that signal (128 + N), without last words.
- SIGINT: python's default handler raises at once, so the noting handler is put in for the
  outermost fan-out and python's put back after it, only where python's is in place: a script
  that installed its own handler owns the signal, inside gradtui's writes too. Two calls of the
  C module `_signal` per fan-out, ~0.1 us each: `signal.signal` converts its arguments and
  result to enums (~2.5 us a call), which on a fan-out sent per node or per printed line would
  cost the script's thread more than the listeners themselves.
- A listener's wait that may hold the script for long inside the fan-out (a torchrun rank's job
  tap: a diverge hold, the ranks' rendezvous) runs `lifted`: signals act at once there, as in the
  script's own code.
- After the script's last line (`script_over`, the runner, as soon as the script's code has
  returned) until the owner's last words are said (`settle`: the ScriptFinished fan-out, the
  report and recording closed, the client's goodbye), the main thread is in gradtui's code for
  good: every signal is deferred to `settle`. Then a SIGTERM / SIGHUP kills the process at once,
  as python dies of one in its atexit functions (143, 129), with the report and recording saying
  how the script ended; a SIGINT is dropped, as python ignores a KeyboardInterrupt raised in an
  atexit function or while it waits for the script's threads at exit: the status stays the
  script's (`settle` returns it, for the owner's one-line note).

Armed only for a run an entry point owns (FatalSignals.install, on the main thread); a library
run (`gradtui.listen()`, a test's in-process session) is never deferred. Torch-free.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C signal module: it has no stub
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from gradtui.protocol.dying import die_now, flush_std_streams, signal_status

DEFER_DEADLINE = 10.0
"""Seconds a SIGTERM / SIGHUP may wait for the write it landed in before the process ends anyway."""


class Deferral:
    """The script's thread's writes and the signals that landed in them (see module doc)."""

    def __init__(self, deadline: float = DEFER_DEADLINE, overdue: Callable[[int], None] | None = None) -> None:
        """`deadline`, `overdue(signum)`: how long a fatal signal waits for the write, and what
        ends the process after that (off the main thread; by default as killed by the signal)."""
        self._deadline = deadline
        self._end = overdue or _end_overdue
        self.armed = False
        """Does a run owned by an entry point defer signals in its writes? (`arm`)"""
        self.main = threading.main_thread().ident
        """The thread whose writes are deferred: signal handlers run on it only."""
        self.depth = 0
        """How deep the main thread is in nested fan-outs (0: in the script's own code)."""
        self.pending: int | None = None
        """The signal noted inside the fan-out, raised again when the outermost one ends."""
        self._overdue: threading.Timer | None = None
        self._noting = False
        """Is the noting SIGINT handler in (put in by an outer fan-out, or for the last words)?"""
        self.over = False
        """Has the script's code ended, the owner's last words not yet said (`script_over`)?"""
        self._over_swapped: Any = None

    def arm(self, on: bool) -> None:
        """Defer signals in this process's writes from now on (or no more, forgetting one noted);
        main thread only."""
        self.armed = on and threading.get_ident() == self.main
        if not on:
            self._end_over()
            self.pending = None
            self._cancel_overdue()

    def defers(self, signum: int) -> bool:
        """For a handler: is the main thread inside a write? Then `signum` is noted (a fatal one
        wins over SIGINT) to be raised again when the write ends, and the handler returns."""
        if not self.depth:
            return False
        if self.pending is None or self.pending == signal.SIGINT:
            self.pending = signum
        if signum != signal.SIGINT and self._overdue is None:
            self._overdue = threading.Timer(self._deadline, self._end, (signum,))
            self._overdue.daemon = True
            self._overdue.start()
        return True

    def inside(self, fan_out: Callable[[Any], None], event: Any) -> None:
        """Run `fan_out(event)` with signals deferred until the outermost fan-out ends."""
        self.depth += 1
        swapped: Any = None
        try:
            if not self._noting:
                swapped = self._note_interrupts()
            fan_out(event)
        finally:
            try:
                if swapped is not None:
                    self._put_back(swapped)
            finally:
                self.depth -= 1
                if self.pending is not None and not self.depth:
                    self._act()

    def lifted(self, listener: Callable[[Any], None], event: Any) -> None:
        """Call `listener` with signals acting at once (one that may hold the script for long);
        a signal noted before it is acted on first. Only the main thread's writes are deferred, so
        elsewhere (a reader thread's Output) this is a plain call; once the script is over, nothing
        is lifted: gradtui's last words are not the script's code."""
        if self.over or threading.get_ident() != self.main:
            listener(event)
            return
        depth, self.depth = self.depth, 0
        try:
            if self.pending is not None:
                self._act()
            listener(event)
        finally:
            self.depth = depth

    def script_over(self) -> None:
        """The script's code has ended (see module doc): defer every signal until `settle`.
        Main thread of an armed run only; once."""
        if not self.armed or self.over or threading.get_ident() != self.main:
            return
        self.over = True
        self.depth += 1
        if not self._noting:
            self._over_swapped = self._note_interrupts()

    def settle(self) -> int | None:
        """The owner's last words are said (see module doc): a SIGTERM / SIGHUP noted since the
        script's end kills the process now; returns SIGINT if one was dropped, else None."""
        if not self._end_over():
            return None
        signum, self.pending = self.pending, None
        self._cancel_overdue()
        if signum is not None and signum != signal.SIGINT:
            die_now(signum)
        return signum

    def _end_over(self) -> bool:
        """Leave the last words' deferral (python's SIGINT handler back); was it in?"""
        if not self.over:
            return False
        self.over = False
        self.depth -= 1
        swapped, self._over_swapped = self._over_swapped, None
        if swapped is not None:
            self._put_back(swapped)
        return True

    def _interrupted(self, signum: int, _frame: object) -> None:
        """SIGINT's handler inside a write: note it; outside (a lifted listener), python's."""
        if not self.defers(signum):
            raise KeyboardInterrupt

    def _note_interrupts(self) -> Any:
        """Put in the noting SIGINT handler where python's is in place; what to put back, or None."""
        previous = _signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:
            return None  # the script's own handler (or SIG_IGN) owns the signal
        self._noting = True
        _signal.signal(signal.SIGINT, self._interrupted)
        return previous

    def _put_back(self, previous: Any) -> None:
        """Put python's SIGINT handler back, unless a listener installed another meanwhile."""
        self._noting = False
        if _signal.getsignal(signal.SIGINT) == self._interrupted:
            _signal.signal(signal.SIGINT, previous)

    def _act(self) -> None:
        """Raise the noted signal again: the handler now in place acts on it (see module doc)."""
        signum, self.pending = self.pending, None
        self._cancel_overdue()
        assert signum is not None
        signal.raise_signal(signum)

    def _cancel_overdue(self) -> None:
        overdue, self._overdue = self._overdue, None
        if overdue is not None:
            overdue.cancel()


def _end_overdue(signum: int) -> None:
    """A write outlived DEFER_DEADLINE after a fatal signal: end as killed by it (off the main
    thread, where the signal's disposition cannot be reset: the status a shell would report)."""
    flush_std_streams()
    os._exit(signal_status(signum))


DEFERRAL = Deferral()
"""This process's deferral: the listeners' fan-out and the signal handlers share it."""
