"""Capture what the process writes to fds 1 and 2 (C++ logs, subprocesses) as Output events.

For an agent that owns the terminal it runs in (`--listen`): each fd is redirected to a pipe,
and a reader thread writes what arrives to the original fd (the terminal still shows it) and
emits it as an `Output` event for the attached client. A child agent needs none of this: its
parent reads its pipes (a recording child tees its Python streams instead: `gradtui.record.tee`).
"""

from __future__ import annotations

import codecs
import os
import sys
import threading
from collections.abc import Callable

from gradtui.protocol import events as ev
from gradtui.protocol.lines import LineSplitter


class FdTee:
    """Tee fd 1 and 2 into Output events while active (see module doc)."""

    def __init__(self, emit: Callable[[ev.Event], None]) -> None:
        self._emit = emit
        self._saved: list[tuple[int, int]] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Redirect fds 1 and 2 through pipes read by reader threads."""
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            getattr(sys, stream).flush()
            read, write = os.pipe()
            saved = os.dup(fd)
            os.dup2(write, fd)
            os.close(write)
            self._saved.append((fd, saved))
            thread = threading.Thread(
                target=self._pump, args=(read, saved, stream), daemon=True, name=f"gradtui-{stream}"
            )
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Put fds 1 and 2 back; the readers end when the pipes drain."""
        for _fd, stream in ((1, "stdout"), (2, "stderr")):
            try:
                getattr(sys, stream).flush()
            except (OSError, ValueError):
                pass
        for fd, saved in self._saved:
            os.dup2(saved, fd)  # closes the pipe's write end held at fd
        for thread in self._threads:
            thread.join(1.0)
        for _, saved in self._saved:
            os.close(saved)
        self._saved.clear()

    def _pump(self, read: int, saved: int, stream: str) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        lines = LineSplitter(stream)
        while True:
            try:
                data = os.read(read, 65536)
            except OSError:
                data = b""
            if not data:
                break
            try:
                os.write(saved, data)
            except OSError:
                pass
            if (complete := lines.feed(decoder.decode(data))) is not None:
                self._emit(complete)
        if (rest := lines.end(decoder.decode(b"", final=True))) is not None:
            self._emit(rest)
        os.close(read)
