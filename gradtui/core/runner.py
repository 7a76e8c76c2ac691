"""Run the user's script as `python script.py args` would, under a Session.

The script runs as `__main__` with its own `sys.argv`, its folder first on `sys.path`, an
empty stdin (a debugger must never steal the terminal's keys), and its stdout/stderr turned
into `Output` events. Its end is reported as a `ScriptFinished` event: exit status, the
traceback of an exception (frames of gradtui and runpy trimmed), or that the user quit.
"""

from __future__ import annotations

import codecs
import ctypes
import io
import os
import runpy
import sys
import threading
import traceback
import types
from typing import TextIO

from gradtui.core import events as ev
from gradtui.core.events import QUIT_STATUS
from gradtui.core.session import GradtuiQuit, Session


class _EventStream(io.TextIOBase):
    """A text stream that emits each complete line it receives as an `Output` event.

    It passes for `sys.stdout` where scripts reach past `write`: `buffer` takes bytes (UTF-8),
    `reconfigure(line_buffering=True)` is accepted, and `fileno()` is the process's own stream's
    (so `faulthandler.enable()` works; what is written there directly is not captured).
    """

    def __init__(self, session: Session, name: str) -> None:
        super().__init__()
        self._session = session
        self._name = name
        self._pending = ""
        self._lock = threading.Lock()
        self.buffer = _BytesToText(self)
        """The binary layer under the text stream, as `sys.stdout.buffer` is."""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        real = getattr(sys, f"__{self._name}__", None)
        if real is None:
            raise io.UnsupportedOperation("fileno")
        return real.fileno()

    def reconfigure(self, **options: object) -> None:
        """Accept io.TextIOWrapper's options (line_buffering, write_through...): lines are sent
        as soon as they are complete anyway."""

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            if "\n" not in self._pending:
                return len(text)
            complete, _, self._pending = self._pending.rpartition("\n")
        self._session.emit(ev.Output(self._name, complete + "\n"))  # type: ignore[arg-type]
        return len(text)

    def flush(self) -> None:
        with self._lock:
            rest, self._pending = self._pending, ""
        if rest:
            self._session.emit(ev.Output(self._name, rest))  # type: ignore[arg-type]


class _BytesToText(io.RawIOBase):
    """`sys.stdout.buffer` of an _EventStream: bytes written are decoded as UTF-8 into it."""

    def __init__(self, text: _EventStream) -> None:
        super().__init__()
        self._text = text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        data = bytes(data)
        self._text.write(self._decoder.decode(data))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


class ScriptRunner:
    """Runs one script under a session, in the calling thread (`run`) or a new one (`start`)."""

    def __init__(self, path: str, args: list[str] | tuple[str, ...], session: Session,
                 capture_output: bool = True) -> None:
        """`capture_output=False`: leave sys.stdout/sys.stderr alone (an agent whose fds 1/2 are
        already captured at the fd level)."""
        self.path = os.path.abspath(path)
        self.capture_output = capture_output
        self.args = list(args)
        self.session = session
        self.exit_status: int | None = None
        self.thread_id: int | None = None
        """The thread `run` runs in (set when it starts)."""
        self.finished = threading.Event()
        """Set when `run` has returned: the script unwound, torch's functions restored."""
        self._thread: threading.Thread | None = None
        self._interrupt = threading.Lock()
        self._interruptible = False
        """True while the script's own code runs: only then may `interrupt` raise in its thread."""

    def run(self) -> int:
        """Run the script to its end in this thread; emit ScriptFinished; return exit status.

        Does nothing (status 0) if the session was quit before the script started.
        """
        self.thread_id = threading.get_ident()
        try:
            if self.session.quitting:
                self.exit_status = 0
            else:
                self.exit_status = self._run()
        finally:
            self.finished.set()
        return self.exit_status

    def _run(self) -> int:
        session = self.session
        session.emit(ev.ScriptStarted(self.path, (self.path, *self.args)))
        saved: tuple[list[str], list[str], TextIO, TextIO, TextIO] = (
            sys.argv, list(sys.path), sys.stdout, sys.stderr, sys.stdin)
        if self.capture_output:
            out, err = _EventStream(session, "stdout"), _EventStream(session, "stderr")
        else:
            out, err = sys.stdout, sys.stderr
        status, tb, quit_ = 0, None, False
        sys.argv = [self.path, *self.args]
        sys.path.insert(0, os.path.dirname(self.path))
        sys.stdout, sys.stderr, sys.stdin = out, err, io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        try:
            session.install()
            self._interruptible = True
            runpy.run_path(self.path, run_name="__main__")
        except GradtuiQuit:
            status, quit_ = QUIT_STATUS, True
        except SystemExit as exc:
            status, tb = _exit_status(exc)
        except BaseException as exc:  # noqa: BLE001 - the script's error is the result
            status, tb = 1, self._format(exc)
        finally:
            self._disarm()
            session.uninstall()
            out.flush()
            err.flush()
            sys.argv, sys.path[:] = saved[0], saved[1]
            sys.stdout, sys.stderr, sys.stdin = saved[2], saved[3], saved[4]
        session.emit(ev.ScriptFinished(status, tb, quit_, session.passes))
        return status

    def _format(self, exc: BaseException) -> str:
        """The traceback without gradtui's and runpy's frames (also those between user frames,
        e.g. the session's backward wrappers when a user hook raises during backward)."""
        kept = []
        tb = exc.__traceback__
        while tb is not None:
            if _is_user_file(tb.tb_frame.f_code.co_filename):
                kept.append(tb)
            tb = tb.tb_next
        tb = None
        for entry in reversed(kept):
            tb = types.TracebackType(tb, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        return "".join(traceback.format_exception(type(exc), exc, tb))

    def start(self) -> threading.Thread:
        """Run the script in a new daemon thread named `gradtui-script`."""
        self._thread = threading.Thread(target=self.run, name="gradtui-script", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 2.0) -> bool:
        """Quit: unblock a paused hook, interrupt a busy script; True if `run` returned in time.

        Blocks up to `timeout`; the UI instead calls `session.quit()` and `interrupt()` itself
        and polls `finished`, so its event loop never blocks.
        """
        self.session.quit()
        if self.thread_id is None:
            return True  # not started: `run` will see the quit and not start the script
        if not self.finished.wait(min(0.3, timeout)):
            self.interrupt()
        return self.finished.wait(timeout)

    def interrupt(self) -> None:
        """Raise GradtuiQuit in the script's thread, if the script's own code is running.

        For a script that is not paused (e.g. in a forward pass). The exception arrives at the
        next Python bytecode, so a blocking C call (time.sleep(60)) ends first.
        """
        with self._interrupt:
            if self._interruptible and self.thread_id is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread_id), ctypes.py_object(GradtuiQuit))

    def _disarm(self) -> None:
        """Leave the script's code: no more async quits, and cancel one not yet delivered."""
        with self._interrupt:
            if self._interruptible:
                self._interruptible = False
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_user_file(filename: str) -> bool:
    return not (filename.startswith(_PACKAGE_DIR) or os.path.basename(filename) == "runpy.py"
                or filename.startswith("<frozen"))


def _exit_status(exc: SystemExit) -> tuple[int, str | None]:
    """Exit status and message of sys.exit(code), as the interpreter would report them."""
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, None
    return 1, f"{code}\n"
