"""What an agent plugs in to be one rank of a job: one session listener, one command filter.

`JobTap` stands between a rank's session and its agent's server. Until torch.distributed is
initialised it only passes events on. At the first backward pass after that (the script's own
`init_process_group` has run by then; `gradtui.listen()` called after it joins at once), the
rank joins the job: it writes its agent's address and token to the job's store (`a/RANK`),
installs follow mode's gate as the session's `follow` hook, and on rank 0 starts the hub,
which connects to every other rank's agent; from then on rank 0's events go through the hub
and the job's client is served by rank 0's agent.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gradtui.distributed import job
from gradtui.distributed.orders import Diverge, RankOrder, Release, from_wire_form
from gradtui.distributed.rank import RankLink
from gradtui.engine.process.deferral import DEFERRAL
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command

if TYPE_CHECKING:  # the session imports the engine; only its type is needed here
    from gradtui.engine.session import Session


class JobTap:
    """A rank's plug (see module doc): the session listener in front of `server`."""

    def __init__(
        self,
        session: Session,
        submit: Callable[[Command, int], None],
        quit_: Callable[[], None],
        listener: socket.socket,
        token: str,
    ) -> None:
        """The agent's session, its own command and quit paths, and where it listens."""
        self.session, self._submit, self._quit, self._token = session, submit, quit_, token
        self.server: Any = None
        """The agent's server, the listener behind this one (`serve`)."""
        self.link: RankLink | None = None
        self.hub: Any = None
        self.checks: Any = None
        self.guard: Any = None
        host, port = listener.getsockname()[:2]
        if host in ("0.0.0.0", "::"):
            host = socket.getfqdn()  # listening on every interface: rank 0 reaches it by name
        self._address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def serve(self, server: Callable[[ev.Event], None]) -> None:
        """Pass events on to `server` (built after this tap: its hooks are this tap's methods)."""
        self.server = server

    # ---- the session listener --------------------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        """Session listener. Called in the session's fan-out, where a signal waits for the write
        it lands in (gradtui.engine.process.deferral): the hub's and the server's locks are never held when
        the last words need them. Only the waits that may hold the script for long, the ranks'
        rendezvous of `join` and a diverge check's exchange and hold, let signals act at once."""
        if self.link is None and isinstance(event, ev.PassStarted) and job.initialized():
            DEFERRAL.lifted(self._join, event)
        if self.link is not None:
            self.link.on_event(event)
        if self.guard is not None and isinstance(event, ev.ScriptFinished):
            self.guard.stop()
        if self.checks is not None:
            DEFERRAL.lifted(self.checks.on_event, event)  # may hold the script here (break diverge)
        if self.hub is not None:
            self.hub.on_event(0, event)
        else:
            self.server(event)

    def _join(self, _event: ev.PassStarted) -> None:
        self.join()

    def join(self) -> None:
        """Join the job: register in its store, gate every node, start the hub on rank 0."""
        from gradtui.distributed.checks import Checks

        rank, world = job.rank_and_world()
        store = job.job_store()
        self.link = RankLink(self.session, store, rank, world)
        self.checks = Checks(self.session, store, rank, world, self.link)
        checks = self.checks
        self.link.armed = lambda: checks.diverge
        self.session.follow = self.link.follow
        store.set(f"a/{rank}", json.dumps({"address": self._address, "token": self._token, "pid": os.getpid()}))
        if rank == 0:
            from gradtui.distributed.hub import JobHub

            hub = JobHub(world, self.server, self, store)
            try:
                hub.connect_all()
            except Exception as exc:  # noqa: BLE001 - a rank that never registers: debug this one alone
                print(f"gradtui: could not reach every rank's agent ({exc}); debugging rank 0 alone", file=sys.stderr)
                self.link.control(Release())
                return
            self.hub = hub
            self._on_sigterm()
            attached = getattr(self.server, "attached", None)
            hub.attached = lambda: attached is not None and attached.is_set()
            self._guard(lambda: attached is not None and attached.is_set(), hub.client)
            print(
                f"gradtui: job of {world} ranks; attach to rank 0's agent at {self._address}",
                file=sys.stderr,
                flush=True,
            )
        else:
            self._guard()

    def _guard(
        self, attached: Callable[[], bool] | None = None, on_client: Callable[[bool], None] | None = None
    ) -> None:
        """Start this rank's desync guard (gradtui.distributed.guard) for the script's thread."""
        import threading

        from gradtui.distributed.guard import Guard

        assert self.link is not None
        self.guard = Guard(self.link, self.session, threading.get_ident(), self._end_stuck, attached, on_client)
        self.guard.start()

    def _end_stuck(self, message: str) -> None:
        """A collective is stuck with no rank paused (a desync): say so and end this rank, exit
        status 1, as the script's own timeout would have (its RuntimeError, uncaught)."""
        # As an event, not through fd 2: the agent's tee of fd 2 might not pass it on before the
        # exit, while closing the server sends what is pending (rank 0's to the client, another
        # rank's to the hub, which relays it).
        self.session.emit(ev.Output("stderr", message))
        close = getattr(self.server, "close", None)
        try:
            if close is not None:
                close(message.strip(), timeout=1.0)
        finally:
            os._exit(1)

    def _on_sigterm(self) -> None:
        """torchrun stops the job with SIGTERM when a rank fails: if the script left SIGTERM to
        its default, rank 0 first tells the client which rank died (and says goodbye), then dies
        of SIGTERM as it would have, so torchrun reports the same. Main thread only."""
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return  # the script's own handler (checkpoint on SIGTERM): not ours to touch

        def stop(signum: int, frame: Any) -> None:
            try:
                self.hub.notice_deaths()
                close = getattr(self.server, "close", None)
                if close is not None:
                    close("rank 0 got SIGTERM (torchrun stops the job when a rank fails)", timeout=1.0)
            finally:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

        try:
            signal.signal(signal.SIGTERM, stop)
        except ValueError:
            pass  # not the main thread

    # ---- commands --------------------------------------------------------------------------

    def submit(self, command: Command, request: int) -> None:
        """The agent's command path: the job's client's commands (through the hub on rank 0),
        else this rank's own (the hub's, or a lone rank's client's)."""
        if self.hub is not None and request >= 0:
            self.hub.submit(command, request)  # the job's client, on rank 0
        else:
            self.local_submit(command, request)

    def local_submit(self, command: Command, request: int) -> None:
        """A command for this rank's own session (or its diverge hold)."""
        if self.checks is not None and self.checks.held:
            self.checks.submit(command, request)
        else:
            self._submit(command, request)

    def order(self, data: bytes) -> None:
        """An order frame from the hub (its wire form): done once this rank has joined the job
        and is not the hub's own (rank 0's come as calls); ProtocolError if it is not one."""
        order = from_wire_form(data)
        if self.link is not None and self.hub is None:
            self.control(order)

    def control(self, order: RankOrder) -> None:
        """One of the hub's orders (gradtui.distributed.orders): the diverge check's is this
        tap's, the others the rank's link's."""
        match order:
            case Diverge(armed=armed):
                if self.checks is not None:
                    self.checks.diverge = armed
            case _:
                if self.link is not None:
                    self.link.control(order)

    def quit(self) -> None:
        """The client quit (or the hub heard a typed `quit`): the run's quit path."""
        self.session.run_quit.quit()

    def quit_job(self) -> None:
        """A job rank's way out of the run (the session's `run_quit` takes it): on rank 0 with a
        hub, every rank; else this rank."""
        if self.hub is not None:
            self.hub.quit_all()
        else:
            self.quit_self()

    def quit_self(self) -> None:
        """This rank's own quit path."""
        self._quit()

    def detached(self) -> None:
        """The agent's client went: on rank 0 the job's client (release every rank); on another
        rank the hub itself (rank 0 is gone: stop following)."""
        if self.hub is not None:
            self.hub.release_all()
        elif self.link is not None:
            self.link.control(Release())


def is_follower() -> bool:
    """Is this process a rank other than 0 of a job? (Its agent is reached through rank 0's, so it
    writes no runtime file: `gradtui attach` finds the job's one address.)"""
    return job.in_job_env() and os.environ.get("RANK", "0") != "0"
