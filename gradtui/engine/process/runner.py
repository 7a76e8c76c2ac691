"""Run the user's script as `python script.py args` would, under a Session.

The script sees what `python script.py args` gives it: `sys.argv` (argv[0] as typed), its
real folder as `sys.path[0]`, a fresh `__main__` module in `sys.modules` (so pickling classes
it defines works, as multiprocessing and DataLoader workers need), `__file__`, `__spec__` and
`__package__` None, `__builtins__` the builtins module; plus an empty stdin (a debugger must
never steal the terminal's keys). Its stdout/stderr become `Output` events unless the caller
captures fds 1/2 itself (`capture_output=False`). Its end is reported as a `ScriptFinished`
event: exit status, the traceback of an exception (gradtui's frames trimmed) as text and as
`ErrorInfo`, or that the user quit (status `QUIT_STATUS`). From the script's last line on, a
run an entry point owns defers every signal to the owner's last words (`DEFERRAL.script_over`,
see gradtui.engine.process.deferral): a Ctrl-C there is ignored, as python ignores one at exit.
"""

from __future__ import annotations

import builtins
import codecs
import ctypes
import importlib.machinery
import io
import os
import runpy
import signal
import sys
import threading
import traceback
import types
import zipfile
from collections.abc import Callable
from typing import TextIO

from gradtui.engine.process.deferral import DEFERRAL
from gradtui.engine.process.exits import describe_signal, signal_status
from gradtui.engine.session import GradtuiQuit, Session
from gradtui.protocol import events as ev
from gradtui.protocol.errors import ErrorInfo, FrameInfo
from gradtui.protocol.lines import LineSplitter
from gradtui.protocol.places import is_gradtui_file

QUIT_STATUS = 130
"""Exit status of a run the user quit before the script ended: "stopped by the user", as a
shell reports a process ended by Ctrl-C (128 + SIGINT), so CI never takes it for success."""

QUIT_GRACE = 2.0
"""Seconds a script may take to unwind after quit before the runner stops it again and then,
if it owns the process (`hard_exit`), ends the process."""


def exit_now(status: int) -> None:
    """The default hard exit: flush the real stdout/stderr, then end the process at once."""
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


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
        self._lines = LineSplitter(name)
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
            lines = self._lines.feed(text)
        if lines is not None:
            self._session.emit(lines)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            rest = self._lines.end()
        if rest is not None:
            self._session.emit(rest)


class _BytesToText(io.RawIOBase):
    """`sys.stdout.buffer` of an _EventStream: bytes written are decoded as UTF-8 into it."""

    def __init__(self, text: _EventStream) -> None:
        super().__init__()
        self._text = text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = bytes(data)
        self._text.write(self._decoder.decode(data))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


class ScriptRunner:
    """Runs one script under a session, in the calling thread (`run`) or a new one (`start`).

    `capture_output=False` leaves `sys.stdout`/`sys.stderr` alone (a caller that captures fds
    1/2 itself). `hard_exit(status)`, for a caller that owns the process (headless, the agent),
    is how a script that goes on after quit is ended (see `stop`); without it the runner never
    ends the process.
    """

    def __init__(
        self,
        path: str,
        args: list[str] | tuple[str, ...],
        session: Session,
        *,
        capture_output: bool = True,
        hard_exit: Callable[[int], None] | None = None,
        grace: float = QUIT_GRACE,
        module: bool = False,
    ) -> None:
        """`module`: `path` is a module's name, run as `python -m path` runs it (see `_run_module`)."""
        self.module = path if module else None
        """The module `python -m` would run, or None for a script."""
        self.path = module_file(path) if module else os.path.abspath(path)
        self.argv0 = self.path if module else path
        """argv[0] as python sets it: as typed for a script, the module's file for `-m`."""
        self.args = list(args)
        self.session = session
        self.capture_output = capture_output
        self.hard_exit = hard_exit
        self.grace = grace
        self.exit_status: int | None = None
        self.exit_signal: int | None = None
        """The signal python would have ended the process with: SIGINT after an unhandled
        KeyboardInterrupt, SIGTERM / SIGHUP after `end_by_signal` (see gradtui.engine.process.exits)."""
        self.thread_id: int | None = None
        """The thread `run` runs in (set when it starts)."""
        self.finished = threading.Event()
        """Set when `run` has returned: the script unwound, torch's functions restored."""
        self._thread: threading.Thread | None = None
        self._interrupt = threading.Lock()
        self._interruptible = False
        """True while the script's own code runs: only then may `interrupt` raise in its thread."""
        self._sent_quit = False
        """An async quit was sent into the script's thread (it may not have arrived yet)."""
        self._announce = threading.Lock()
        self._announced = False
        """ScriptFinished was emitted (by `run`, or by the hard exit): never twice."""
        self.ending: ev.ScriptFinished | None = None
        """The ScriptFinished announced, once it was (its traceback: what python would print)."""

    def run(self) -> int:
        """Run the script to its end in this thread; emit ScriptFinished; return exit status.

        If the session was quit before the script started, the script never runs: status
        QUIT_STATUS, announced as a quit like any other.
        """
        self.thread_id = threading.get_ident()
        if self.hard_exit is not None:
            threading.Thread(target=self._watch, name="gradtui-quit-watch", daemon=True).start()
        try:
            if self.session.quitting:
                self.exit_status = QUIT_STATUS
                self._finish(ev.ScriptFinished(QUIT_STATUS, None, True, 0))
            else:
                self.exit_status = self._run()
        finally:
            self.finished.set()
        return self.exit_status

    def _run(self) -> int:
        session = self.session
        argv = [self.argv0, *self.args]
        try:
            session.emit(ev.ScriptStarted(self.path, tuple(argv)))
        except KeyboardInterrupt as exc:  # a Ctrl-C in its writes, raised once they are done (engine.deferral)
            return self._interrupted_first(exc)
        saved: tuple[list[str], list[str], TextIO, TextIO, TextIO] = (
            sys.argv,
            list(sys.path),
            sys.stdout,
            sys.stderr,
            sys.stdin,
        )
        out = err = None
        if self.capture_output:
            out, err = _EventStream(session, "stdout"), _EventStream(session, "stderr")
        status, tb, quit_, error = 0, None, False, None
        sys.argv = argv
        # python resolves links for sys.path[0] (`-m`: the working folder). Inserted, not replacing the
        # launcher's entry: the launcher knows whether its own first entry is one python would not have.
        sys.path.insert(0, os.getcwd() if self.module else os.path.dirname(os.path.realpath(self.path)))
        if out is not None and err is not None:
            sys.stdout, sys.stderr = out, err
        sys.stdin = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        try:
            session.install()
            self._interruptible = True
            self._run_main()
        except BaseException as exc:  # noqa: BLE001 - however the script ended, that is the result
            DEFERRAL.script_over()  # from its last line on, a signal waits for gradtui's last words
            match exc:
                case GradtuiQuit():
                    quit_, status = True, QUIT_STATUS
                case SystemExit():
                    status, tb = _exit_status(exc)
                case KeyboardInterrupt():  # python prints it, then kills itself with SIGINT: 130
                    self.exit_signal = signal.SIGINT
                    status, (tb, error) = signal_status(signal.SIGINT), self._format(exc)
                case _:
                    status, (tb, error) = 1, self._format(exc)
        finally:
            DEFERRAL.script_over()
            self._disarm()
            session.uninstall()
            if out is not None and err is not None:
                out.flush()
                err.flush()
            sys.argv, sys.path[:] = saved[0], saved[1]
            sys.stdout, sys.stderr, sys.stdin = saved[2], saved[3], saved[4]
        self._finish(ev.ScriptFinished(status, tb, quit_, session.passes, error=error))
        return status

    def _interrupted_first(self, exc: KeyboardInterrupt) -> int:
        """A KeyboardInterrupt before the script's first line: it ends as python's would then
        (130, the process killed by SIGINT at exit), announced as any other end."""
        DEFERRAL.script_over()
        self.exit_signal = signal.SIGINT
        status = signal_status(signal.SIGINT)
        tb, error = self._format(exc)
        self._finish(ev.ScriptFinished(status, tb, False, self.session.passes, error=error))
        return status

    def _run_main(self) -> None:
        """Execute the script as python does with `python script.py`: in a fresh `__main__`
        module that is `sys.modules["__main__"]` while it runs (a zip archive through runpy);
        a module as `python -m` does (`_run_module`)."""
        if self.module is not None:
            _run_module(self.module)
            return
        if not self.path.endswith(".py") and zipfile.is_zipfile(self.path):
            runpy.run_path(self.path, run_name="__main__")
            return
        main = types.ModuleType("__main__")
        main.__dict__.update(
            __file__=self.path,
            __cached__=None,
            __builtins__=builtins,
            __annotations__={},
            __loader__=importlib.machinery.SourceFileLoader("__main__", self.path),
        )
        with io.open_code(self.path) as f:
            source = f.read()
        code = compile(source, self.path, "exec", dont_inherit=True)  # the coding cookie, as python reads it
        saved = sys.modules.get("__main__")
        sys.modules["__main__"] = main
        try:
            exec(code, main.__dict__)  # noqa: S102 - running the user's script is the point
        finally:
            if saved is not None:
                sys.modules["__main__"] = saved
            else:
                del sys.modules["__main__"]

    def end_by_signal(self, signum: int) -> bool:
        """The process is about to die of `signum` (SIGTERM, SIGHUP): announce the script's end
        as a shell would report it (128 + N, how it was killed), unless it was announced already;
        True if this call announced it. Safe from any thread: the script is not unwound."""
        self.exit_signal = signum
        self.exit_status = signal_status(signum)
        return self._finish(
            ev.ScriptFinished(self.exit_status, None, False, self.session.passes, how=describe_signal(signum))
        )

    def _finish(self, event: ev.ScriptFinished) -> bool:
        """Emit ScriptFinished unless it was already; True if this call emitted it. On the main
        thread of an owned run, the script is over from here (a signal waits for the last words)."""
        DEFERRAL.script_over()
        with self._announce:
            if self._announced:
                return False
            self._announced = True
            self.ending = event
        self.session.emit(event)
        return True

    def _format(self, exc: BaseException) -> tuple[str, ErrorInfo]:
        """The traceback without gradtui's frames (also those between user frames, e.g. the
        session's backward wrappers when a user hook raises during backward), as text and data."""
        kept = []
        tb = exc.__traceback__
        while tb is not None:
            if not _is_internal(tb.tb_frame.f_code.co_filename):
                kept.append(tb)
            tb = tb.tb_next
        tb = None
        for entry in reversed(kept):
            tb = types.TracebackType(tb, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        kind = type(exc)
        name = (
            kind.__qualname__
            if kind.__module__ in ("builtins", "__main__")
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        frames = tuple(
            FrameInfo(f.filename, f.lineno or 0, f.name, (f.line or "").strip()) for f in traceback.extract_tb(tb)
        )
        return "".join(traceback.format_exception(kind, exc, tb)), ErrorInfo(name, str(exc), frames)

    def start(self) -> threading.Thread:
        """Run the script in a new daemon thread named `gradtui-script`."""
        self._thread = threading.Thread(target=self.run, name="gradtui-script", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 2.0) -> bool:
        """Quit: unblock a paused hook, interrupt a busy script; True if `run` returned in time.

        Blocks up to `timeout`; the UI instead calls `session.quit()` and `interrupt()` itself
        and polls `finished`, so its event loop never blocks. With `hard_exit`, a script that
        still runs `grace` seconds after quit (it swallows BaseException) is stopped again, then
        the process ends (`_watch`), whoever asked for the quit.
        """
        self.session.quit()
        if self.thread_id is None:
            return True  # not started: `run` will see the quit and not start the script
        if not self.finished.wait(min(0.3, timeout)):
            self.interrupt()
        return self.finished.wait(timeout)

    def _watch(self) -> None:
        """Watchdog of a runner that owns its process: after a quit, give the script `grace`
        seconds to unwind, stopping it a second time half-way; then announce the end
        (ScriptFinished, so listeners write what they keep) and `hard_exit(QUIT_STATUS)`."""
        while not self.finished.wait(0.05):
            if self.session.quitting:
                break
        else:
            return
        if self.finished.wait(self.grace / 2):
            return
        self.interrupt()  # the second stop
        if self.finished.wait(self.grace / 2):
            return
        announced = self._finish(
            ev.ScriptFinished(
                QUIT_STATUS,
                None,
                True,
                self.session.passes,
                how=f"hard exit: the script went on {self.grace:g} s after quit (it catches BaseException?)",
            )
        )
        if announced and self.hard_exit is not None:
            self.hard_exit(QUIT_STATUS)

    def interrupt(self) -> None:
        """Raise GradtuiQuit in the script's thread, if the script's own code is running.

        For a script that is not paused (e.g. in a forward pass). The exception arrives at the
        next Python bytecode, so a blocking C call (time.sleep(60)) ends first.
        """
        with self._interrupt:
            if self._interruptible and self.thread_id is not None:
                self._sent_quit = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread_id), ctypes.py_object(GradtuiQuit)
                )

    def _disarm(self) -> None:
        """Leave the script's code: no more async quits, and cancel one not yet delivered."""
        with self._interrupt:
            if self._interruptible:
                self._interruptible = False
                if self._sent_quit:
                    self._sent_quit = False
                    _cancel_async_exception()


def _run_module(name: str) -> None:
    """Run module `name` as `python -m name` does, on this (the script's) thread: runpy finds it
    (a package runs its `__main__`), imports its parent packages, and runs it as `__main__` with
    `__package__` and `__spec__` set, so its relative imports work; sys.argv[0] is its file and
    `sys.modules["__main__"]` its module while it runs (runpy's `alter_sys`). A module that
    cannot be found raises ImportError, reported as python reports it."""
    runpy.run_module(name, run_name="__main__", alter_sys=True)


def module_file(name: str) -> str:
    """The file `python -m name` would run (a package's `__main__.py`), found without running
    anything (no package's `__init__` is imported: that is the script's first act, under the
    session); `name` itself when it cannot be found so (runpy then says why it cannot run it)."""
    search: list[str] | None = [os.getcwd(), *sys.path]
    spec = None
    parts = name.split(".")
    for i, part in enumerate(parts):
        try:
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]) if i else part, search)
        except (ImportError, ValueError):
            return name
        if spec is None:
            return name
        search = list(spec.submodule_search_locations or []) or None
        if search is None and i < len(parts) - 1:
            return name
    if spec is not None and spec.submodule_search_locations:  # a package: its __main__
        spec = importlib.machinery.PathFinder.find_spec(f"{name}.__main__", list(spec.submodule_search_locations))
    return spec.origin if spec is not None and spec.origin else name


class _Cancelled(BaseException):
    """What replaces an async quit that did not arrive, to be delivered and caught at once."""


def _cancel_async_exception() -> None:
    """Cancel an async exception not yet delivered to this thread. Not by setting NULL: CPython
    (3.11) then leaves the thread's eval breaker set for good, and with a profiler or tracer on
    (cProfile, coverage, a debugger) the interpreter spins at the next function entry. A pending
    exception replaced by one delivered here (as the call returns, or at the latest at the loop's
    backward jump) and caught clears it."""
    try:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), ctypes.py_object(_Cancelled))
        for _ in range(2):
            pass
    except _Cancelled:
        pass


def _is_internal(filename: str) -> bool:
    """A frame tracebacks drop: gradtui's own, or runpy's (a zip archive runs through it)."""
    return is_gradtui_file(filename) or os.path.basename(filename) == "runpy.py" or filename == "<frozen runpy>"


def _exit_status(exc: SystemExit) -> tuple[int, str | None]:
    """Exit status and message of sys.exit(code), as the interpreter would report them."""
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, None
    return 1, f"{code}\n"
