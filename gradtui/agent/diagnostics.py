"""gradtui's own diagnostic lines, kept out of the script's output stream.

Under `--listen` the process's fd 2 is captured (`FdTee`) and sent to clients and recordings as
the *script's* stderr, so a line gradtui writes about itself (an `accept` that failed, a peer that
broke the protocol) must not go there. `Diagnostics` duplicates fd 2 when it is made, before the
capture starts, and writes there: the terminal (or whatever the user redirected the agent's
stderr to) sees it, the script's stream does not. Each kind of line is written once, so a peer
that repeats a failure cannot flood the terminal.
"""

from __future__ import annotations

import os
import threading


class Diagnostics:
    """One line per kind of problem, to the stderr the agent had when this was made."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.dup(2)
        except OSError:
            self._fd = None  # no stderr at all: nowhere to say it
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def once(self, kind: str, line: str) -> None:
        """Write `gradtui: LINE` unless a line of this `kind` was written already."""
        with self._lock:
            if kind in self._said or self._fd is None:
                return
            self._said.add(kind)
            try:
                os.write(self._fd, f"gradtui: {line}\n".encode(errors="replace"))
            except OSError:
                pass

    def close(self) -> None:
        """Release the duplicated fd (later lines are dropped)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
