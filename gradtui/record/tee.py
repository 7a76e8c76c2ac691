"""The script's output lines into the recording of a UI run (`gradtui --record run.db script.py`).

Headless, the runner's own streams make every line an `Output` event; `--listen` tees fds 1
and 2. The UI's child agent does neither: the UI reads the child's pipes itself, so the
session (and the recorder listening to it) never saw a line. `TeedStreams` wraps the child's
`sys.stdout` and `sys.stderr`: every write still goes to the pipe at once (the UI shows it as
before, and a crash loses nothing), and each complete line is also handed to the recorder, on
the script's own thread, so it is filed under the pass that printed it. Only the recorder gets
them: the UI has them from the pipe already. What bypasses Python's streams (C++ logs,
subprocesses, writes to `sys.stdout.buffer`) still reaches the UI but not the recording.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO

from gradtui.protocol import events as ev
from gradtui.protocol.lines import LineSplitter


class LineTee:
    """A text stream that writes through to `stream` and emits each complete line (see module doc).
    Everything but `write`, `writelines` and `flush` is the wrapped stream's own (fileno,
    isatty, buffer, encoding...), so the script sees the stream it had."""

    def __init__(self, stream: TextIO, name: str, emit: Callable[[ev.Event], None]) -> None:
        self._stream = stream
        self._name = name
        self._emit = emit
        self._lines = LineSplitter(name)
        self._lock = threading.RLock()
        """Lines are handed on in the order written, from any thread (re-entrant: should the
        recorder's work ever print, that line joins the pending text)."""

    def __getattr__(self, attribute: str):
        return getattr(self._stream, attribute)

    def write(self, text: str) -> int:
        """Write through, then hand on the lines `text` completed."""
        written = self._stream.write(text)
        with self._lock:
            if (lines := self._lines.feed(text)) is not None:
                self._emit(lines)
        return written

    def writelines(self, lines) -> None:
        """As TextIOBase: each in turn."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush the wrapped stream (a partial line is handed on when it ends, or at `end`)."""
        self._stream.flush()

    def end(self) -> None:
        """Hand on the last partial line, if any."""
        with self._lock:
            if (rest := self._lines.end()) is not None:
                self._emit(rest)


class TeedStreams:
    """`sys.stdout` and `sys.stderr` teed while active; `restore()` puts the originals back."""

    def __init__(self, emit: Callable[[ev.Event], None]) -> None:
        self._saved = (sys.stdout, sys.stderr)
        self._tees = (LineTee(sys.stdout, "stdout", emit), LineTee(sys.stderr, "stderr", emit))
        sys.stdout, sys.stderr = self._tees

    def restore(self) -> None:
        """The last partial lines handed on, the original streams back (idempotent)."""
        for tee in self._tees:
            tee.end()
        if sys.stdout is self._tees[0] and sys.stderr is self._tees[1]:
            sys.stdout, sys.stderr = self._saved
