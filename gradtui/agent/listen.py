"""`gradtui.listen()`: debug the backward passes of the calling process, for clients to attach.

For programs gradtui cannot launch: a Jupyter kernel, a Trainer, a torchrun rank. The session
is installed on the calling thread (provenance of later forwards, backward calls from then on)
and served on a TCP port (loopback by default) with a token, written to a runtime file for
`gradtui attach`. The next pause waits for a client; a pause blocks the calling thread (in a
notebook: the cell). The process is not gradtui's, so `quit` stops only the paused pass
(GradtuiQuit is raised out of its `backward()`, the kernel lives on) and gradtui then stops
debugging: later backward calls run unhooked until `close()`.

`record=PATH` records the process's passes into a SQLite database, as `--record` does (with
`record_every` / `flight`), and the lines the process writes to `sys.stdout` and `sys.stderr`
(teed: they still go where they went, a notebook's cell included); the recording is closed by
`close()` or when the process exits.
"""

from __future__ import annotations

import atexit
import os
import secrets
import sys
import threading
from collections.abc import Sequence

from gradtui.agent.build import Transport, build_agent, path_checks, process_info
from gradtui.agent.main import is_loopback, open_listener
from gradtui.protocol import events as ev
from gradtui.protocol.options import OptionsError, RunOptions
from gradtui.wire.runtime import AgentEntry, remove_entry, write_entry


class Listening:
    """A live `gradtui.listen()`: its address, and `close()` to stop debugging this process."""

    def __init__(
        self,
        address: str | None,
        break_on: Sequence[str],
        record: str | None = None,
        record_every: int | None = None,
        flight: int | None = None,
        fingerprints: bool = False,
        against: str | None = None,
    ) -> None:
        script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else "<interactive>"
        self._paused = False
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        options = RunOptions(
            script,
            list(sys.argv[1:]),
            break_on=list(break_on),
            record=record,
            record_every=record_every,
            flight=flight,
            fingerprints=fingerprints,
            against=against,
        )
        try:
            options = options.validate(path_checks(), keywords=True)
        except OptionsError as exc:
            raise ValueError(f"gradtui: {exc}") from None
        self._listener = open_listener(address or "127.0.0.1:0")
        host, port = self._listener.getsockname()[:2]
        if not is_loopback(host):
            print(f"gradtui: warning: listening on {host}, not loopback", file=sys.stderr)
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        """HOST:PORT for `gradtui attach`."""
        token = secrets.token_urlsafe(24)
        transport = Transport(token, self._listener, info=process_info(options, "listen", sys.argv))
        try:
            agent = build_agent(
                options,
                transport,
                self._quit,
                self._watch,  # no runner here to announce it
                announce=ev.ScriptStarted(script, tuple(sys.argv)),
            )
        except Exception:  # OutputError: the recording could not be opened
            self._listener.close()
            raise
        assert agent.server is not None
        self.session, self._server, self._outputs = agent.session, agent.server, agent.outputs
        from gradtui.distributed.tap import is_follower

        self._entry = None if is_follower() else write_entry(AgentEntry(self.address, token, os.getpid(), script))
        self._closed = False
        from gradtui.agent.forks import ForkGuard

        self._forks = ForkGuard(self.session, self._server)
        """A fork of this process runs on unhooked and ends with it (gradtui.agent.forks)."""
        self._forks.install()
        self._server.start()
        self.session.install()
        atexit.register(self._at_exit)
        print(
            f"gradtui: listening on {self.address} (pid {os.getpid()}); attach with: gradtui attach {self.address}",
            file=sys.stderr,
            flush=True,
        )
        self._lines = None
        if self._outputs.recorder is not None:  # the process's lines from here on, filed under their pass
            from gradtui.record.tee import TeedStreams

            self._lines = TeedStreams(self._outputs.recorder)

    def _watch(self, event: ev.Event) -> None:
        """Follow the pause state; once a quit has stopped the paused pass, stop debugging."""
        match event:
            case ev.Paused():
                self._paused = True
            case ev.Resumed():
                self._paused = False
            case ev.PassFinished():
                self._paused = False
                if self._stopping.is_set():
                    self._stopping.clear()
                    self.session.stop_debugging()

    def _quit(self) -> None:
        """Stop the paused pass (GradtuiQuit out of its backward), then stop debugging."""
        if self._paused:
            self._stopping.set()
            self.session.quit()
        else:
            self.session.stop_debugging()

    def close(self) -> None:
        """Stop serving and debugging: torch's functions restored (call it on the thread that
        called `listen`)."""
        if self._closed or self._forks.in_child:
            return
        self._closed = True
        self._forks.close()
        atexit.unregister(self._at_exit)
        self.session.stop_debugging()
        self.session.uninstall()
        if self._lines is not None:  # the last partial line recorded before the run ends
            self._lines.restore()
        for listener in self._outputs.listeners:  # the recording's run ends here; clients are told below
            listener(ev.ScriptFinished(0, None, False, self.session.passes, how="gradtui.listen() closed"))
        self._close_outputs()
        self._server.close("gradtui.listen() closed")
        if self._entry is not None:
            remove_entry(self._entry)

    def _close_outputs(self) -> None:
        if self._lines is not None:
            self._lines.restore()
        for line in self._outputs.close():
            print(line, file=sys.stderr)

    def _at_exit(self) -> None:
        """The process is ending: tell the client, as a script's end is told (not from a forked
        child: the client, the recording and the runtime file are the parent's)."""
        if self._closed or self._forks.in_child:
            return
        self._closed = True
        self.session.emit(ev.ScriptFinished(0, None, False, self.session.passes, how="ended (the process exited)"))
        self._close_outputs()
        self._server.close("the process exited")
        if self._entry is not None:
            remove_entry(self._entry)

    def __enter__(self) -> Listening:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def listen(
    address: str | None = None,
    *,
    break_on: str | Sequence[str] | None = None,
    record: str | None = None,
    record_every: int | None = None,
    flight: int | None = None,
    fingerprints: bool = False,
    against: str | None = None,
) -> Listening:
    """Debug this process's backward passes from now on, served to `gradtui attach` clients.

    `address`: `[HOST:]PORT` to listen on (default: a free port on loopback). `break_on`: a
    break spec (or several, e.g. "nan") to run on until it hits; without it the first backward
    pauses at its first node. Either way the pause waits for a client. `record`: a SQLite
    recording of the passes, as `--record PATH` (`record_every`, `flight` as `--record-every`,
    `--flight`, `fingerprints` as `--fingerprints`); a path that cannot be recorded to raises
    ValueError before anything is installed. `against`: a recording made with fingerprints to
    compare each hooked pass with, as `--against REF.db` (`break_on="differs>0.05"`; with
    `record` the run's own fingerprints are recorded too); one that is not such a recording
    raises ValueError before anything is installed.
    """
    specs = [break_on] if isinstance(break_on, str) else list(break_on or ())
    return Listening(address, specs, record, record_every, flight, fingerprints, against)
