"""A fork of the debugged process (`os.fork`, multiprocessing's fork start method): it runs on
unhooked, and it does not outlive the agent.

No client can reach a forked child (the agent's threads and sockets stay in the parent), so a
pause there would wait forever, and the parent, waiting for its child, with it. At the fork
(`os.register_at_fork`), the child's session stops debugging and sends nothing, its copies of the
agent's sockets are closed, and it is tied to the agent (Linux: it gets SIGKILL when the agent's
process goes, however it goes, so no process outlives the job). The first forked child says so,
once, on the agent's own stderr; later ones are silent. A forked child that runs off the script's
end ends there (`end_child`): the agent's last words (the runtime file, the recording, the
goodbye) are the parent's.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the engine (torch) is imported by the run, not by importing the agent
    from gradtui.agent.server import AgentServer
    from gradtui.engine.session import Session

_PR_SET_PDEATHSIG = 1


class ForkGuard:
    """What a fork of the agent's process does in the child (see module doc)."""

    def __init__(self, session: Session, server: AgentServer) -> None:
        self._session = session
        self._server = server
        self._agent = os.getpid()
        self._active = False
        self._told = False
        """A child was forked already: it said what gradtui does with forks (later ones need not)."""
        self.in_child = False
        """Is this process a forked child of the agent's?"""
        try:
            self._stderr: int | None = os.dup(2)  # before fd 2 is captured: the agent's own stderr
        except OSError:
            self._stderr = None

    def install(self) -> None:
        """Act at every fork from now on, until `close` (os.register_at_fork cannot be undone)."""
        self._active = True
        os.register_at_fork(after_in_parent=self._parent, after_in_child=self._child)

    def close(self) -> None:
        """The run is over: later forks are the process's own business."""
        self._active = False
        if self._stderr is not None and not self.in_child:
            os.close(self._stderr)
            self._stderr = None

    def _parent(self) -> None:
        if self._active:
            self._told = True

    def _child(self) -> None:
        if not self._active or os.getpid() == self._agent:
            return
        self.in_child = True
        self._active = False  # the child's own forks are its business
        self._session.forked()
        self._server.forked()
        _die_with(self._agent)
        if not self._told and self._stderr is not None:
            try:
                os.write(
                    self._stderr,
                    (
                        f"gradtui: process {os.getpid()} was forked from the script's process: it runs "
                        "on unhooked (gradtui debugs the process it started) and ends with it\n"
                    ).encode(),
                )
            except OSError:
                pass

    def end_child(self, status: int, traceback: str | None) -> None:
        """In a forked child that ran off the script's end: print its traceback (if it raised) as
        python would, and end the process with `status`, skipping the parent's last words."""
        if traceback:
            try:
                sys.stderr.write(traceback if traceback.endswith("\n") else traceback + "\n")
            except (OSError, ValueError):
                pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)


def _die_with(parent: int) -> None:
    """Linux: SIGKILL this process when `parent` ends (and at once if it has already)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)
