"""The desync guard: a collective stuck while no rank of the job is paused is named, and the
rank ends as the script's own timeout would have ended it.

While the job can pause, every group's timeout is raised (see `RankLink.can_pause`): a
collective in flight keeps the timeout it was launched with, and a rank-specific branch can
make a peer pause after this rank launched one. A real desync (a rank that never joins a
collective) would then hang for the raised timeout. So each rank's guard thread looks, a few
times a second, at where the script's thread is: if it has sat in a collective (a
`torch.distributed` call, or the backward's final callback where DDP waits for its
all-reduce) with no progress on this rank and no rank of the job paused or parked for longer
than the script's own timeout, the guard prints which collective and where, and ends the rank
with exit status 1, as the timeout's `RuntimeError` would have (gloo cannot abort an operation
in flight: verified here, torch 2.13, `_abort_process_group` leaves a waiting barrier waiting).

On rank 0 the guard also tells the hub when the job's client attaches or goes (`client`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, NamedTuple

from gradtui.protocol.places import GRADTUI_DIR

if TYPE_CHECKING:  # the session imports the engine; only its type is needed here
    from gradtui.distributed.rank import RankLink
    from gradtui.engine.session import Session

TICK = 0.25
"""Seconds between two looks at the script's thread."""

_TORCH = os.sep + "torch" + os.sep
_DIST = _TORCH + "distributed" + os.sep
_AUTOGRAD = _TORCH + "autograd" + os.sep
_WRAPPERS = frozenset({"wrapper", "inner", "_fn", "decorated"})
"""Names of torch.distributed's decorators' frames (c10d_logger's `wrapper` around `barrier`)."""


class Stuck(NamedTuple):
    """Where the script's thread waits in a collective."""

    what: str
    """The collective (`barrier`, `all_reduce`, `the backward's final callback`...)."""
    where: str
    """The script's own line that led there (FILE:LINE), or ""."""


def _ours(path: str) -> bool:
    """Is `path` a file of gradtui's own package? (By its folder: a checkout or a venv whose path
    says "gradtui" holds torch's and the script's files too.)"""
    return os.path.abspath(path).startswith(GRADTUI_DIR)


def stuck_at(frame: FrameType | None) -> Stuck | None:
    """Is the innermost Python frame in a collective? Which one, called from where in the script."""
    if frame is None:
        return None
    name = frame.f_code.co_filename
    if _DIST in name and not _ours(name):
        what = frame.f_code.co_name
    elif _AUTOGRAD in name and frame.f_code.co_name == "_engine_run_backward":
        what = "the backward pass (DDP's all-reduce waits in its final callback)"
    else:
        return None
    caller: FrameType | None = frame
    while caller is not None and (_TORCH in caller.f_code.co_filename or _ours(caller.f_code.co_filename)):
        code = caller.f_code
        if _DIST in code.co_filename and not _ours(code.co_filename) and code.co_name not in _WRAPPERS:
            what = code.co_name  # the outermost torch.distributed call (all_reduce, barrier)
        caller = caller.f_back
    where = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}" if caller is not None else ""
    return Stuck(what, where)


class Guard:
    """One rank's desync guard (see module doc), a daemon thread."""

    def __init__(
        self,
        link: RankLink,
        session: Session,
        thread_id: int,
        end: Callable[[str], None],
        attached: Callable[[], bool] | None = None,
        on_client: Callable[[bool], None] | None = None,
    ) -> None:
        """`link`: the rank's RankLink; `thread_id`: the script's thread; `end(message)`: name
        the stuck collective and end the rank; `attached`/`on_client`: rank 0's client, watched."""
        self.link, self.session, self._thread_id = link, session, thread_id
        self._end, self._attached, self._on_client = end, attached, on_client
        self._stop = threading.Event()
        self.limit: timedelta | None = link.timeouts.script_timeout()
        """The script's own timeout (the default group's, before gradtui raised it)."""

    def start(self) -> None:
        """Start watching."""
        threading.Thread(target=self._run, name="gradtui-dist-guard", daemon=True).start()

    def stop(self) -> None:
        """Stop watching (the script ended)."""
        self._stop.set()

    def _run(self) -> None:
        client = False
        since, seen = time.monotonic(), -1
        while not self._stop.wait(TICK):
            if self._attached is not None and self._on_client is not None and self._attached() != client:
                client = not client
                self._on_client(client)
            now = time.monotonic()
            stuck = self._stuck()
            if stuck is None or self.link.progress != seen:
                since, seen = now, self.link.progress
                continue
            limit = self.limit or self.link.timeouts.script_timeout()
            if limit is not None and now - since > limit.total_seconds():
                self._end(
                    f"gradtui: rank {self.link.rank}: {stuck.what}"
                    f"{f' (from {stuck.where})' if stuck.where else ''} has waited "
                    f"{now - since:.0f} s with no rank of the job paused, past the script's "
                    f"timeout of {limit.total_seconds():g} s: a collective another rank never "
                    f"joined (a desync); ending this rank as that timeout would\n"
                )
                return

    def _stuck(self) -> Stuck | None:
        """The collective the script's thread waits in, if the raised timeouts are all that keep
        it waiting (no rank paused, parked or told to park)."""
        link = self.link
        if not link.timeouts.raised or link.holding or self.session.quitting:
            return None
        return stuck_at(sys._current_frames().get(self._thread_id))
