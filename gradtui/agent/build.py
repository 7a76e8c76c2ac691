"""The one assembly of an agent from its RunOptions: outputs, session, server and (one rank of a
torchrun job) the job's tap, wired once, in one order, for every mode (headless, the UI's child
agent, --listen, gradtui.listen()).

The server is built with the hooks it will keep: a command arrives parsed (its client parsed
the line where it was typed; the wire carries the command) and `AgentCommands` hands it to the
session as it came. The run's one quit path is the session's
`run_quit` (gradtui.engine.process.quitting): a typed `quit` and a client's quit both reach it, and
it takes the way out of the mode that built the agent (a runner's stop, `gradtui.listen()`'s
stop-debugging, on a torchrun rank the job's tap: every rank).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from gradtui.agent.outputs import Outputs
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command, CommandError, parse
from gradtui.protocol.options import PathChecks, RunOptions

if TYPE_CHECKING:  # the server (sockets, the wire's codec, msgspec) is imported only by an agent that serves
    from gradtui.agent.server import AgentServer
    from gradtui.engine.session import Session


class Transport(msgspec.Struct, frozen=True):
    """Where an agent serves its client: its token, a listening socket (--listen,
    gradtui.listen()) or none (a child agent is handed its one connection once started)."""

    token: str
    listener: socket.socket | None = None
    exit_with_client: bool = False
    """Quit when the client goes (a child agent whose UI is gone)."""
    info: dict[str, Any] = msgspec.field(default_factory=dict)
    """What a client is told about the target in the welcome (script, argv, pid, kind)."""


class Agent(msgspec.Struct):
    """An assembled agent: its options (as the run uses them), outputs, session, and, when it
    serves clients, its server and (a torchrun rank) the job's tap."""

    options: RunOptions
    outputs: Outputs
    session: Session
    server: AgentServer | None = None
    commands: AgentCommands | None = None
    """The command path the server's hooks call (None headless: the client talks to the session)."""
    tap: Any = None


class AgentCommands:
    """The agent's command path: a command the client parsed, given to the session (`quit`
    takes the run's quit path)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def submit(self, command: Command, request: int) -> None:
        """Run `command` (parsed by the client), its answers carrying `request`."""
        self._session.submit(command, request)

    def quit(self) -> None:
        """The client asked to quit (or a child agent lost its UI): the run's quit path."""
        self._session.run_quit.quit()


def path_checks() -> PathChecks:
    """The file checks `RunOptions.validate` needs: a recording's (gradtui.record.store) and a
    reference's (gradtui.record.against), imported only when a path is given."""

    def recording(path: str) -> str | None:
        from gradtui.record.store import check_path

        return check_path(path)

    def reference(path: str) -> str | None:
        from gradtui.record.against import Reference
        from gradtui.record.compare import BadInput

        try:
            Reference.check(path)
        except BadInput as exc:
            return str(exc)
        return None

    return PathChecks(recording, reference)


def _new_session(options: RunOptions):
    """A session as `options` ask, nothing attached yet."""
    from gradtui.engine.session import Session

    session = Session(
        full_stats=options.full_stats,
        hook_all_passes=options.hook_all_passes,
        flow_unhooked=options.flow_unhooked,
        fingerprints=options.fingerprints or options.against is not None,
    )
    if options.against is not None:
        from gradtui.record.against import Reference

        session.against = Reference(options.against)
    return session


def _attach(
    session: Session,
    options: RunOptions,
    listeners: tuple[Any, ...],
    first_flow: bool | Callable[[], bool] = True,
    first_batches: bool = False,
    outputs: tuple[Any, ...] = (),
    first_graph: bool | Callable[[], bool] = True,
    first_leaves: bool | Callable[[], bool] = True,
    first_returned: Callable[[int], None] | None = None,
) -> None:
    """Attach `listeners` in order, then arm the breakpoints `options` ask for. (A job's tap lets
    signals act at once in its own long waits only: gradtui.distributed.tap.) `first_flow`: when
    the first listener reads a hooked pass's gradient flow (the server: while its client shows
    it); the others (a recording, a report) read every pass's. `first_batches`: the first
    listener takes a pass's nodes as NodesRan batches (the server: one event through its lock
    and queue per batch, not one per node). `outputs`: those of `listeners` that are the run's
    report and recording, which write a pass's flow but not its leaves' gradient statistics
    (their accumulators' rows hold them). `first_graph`, `first_leaves`: when the first listener
    reads a pass's description as it starts and its leaves' statistics as it ends (the server:
    for a pass its client shows); `first_returned`: what it lets go of as a planned pass returns."""
    for k, listener in enumerate(listeners):
        first = k == 0
        output = any(listener is one for one in outputs)
        leaves = False if output else first_leaves if first else True
        session.add_listener(
            listener,
            graph=first_graph if first else True,
            flow=first_flow if first else True,
            batches=first and first_batches,
            leaves=leaves,
            returned=first_returned if first else None,
        )
    for spec in options.break_on:
        line = f"break {spec}"  # a --break option enters here: parsed once, as a typed line is
        try:
            session.submit(parse(line))
        except CommandError as exc:
            session.emit(ev.CommandResult(line, str(exc), ok=False))
    if options.break_on:
        session.run_on()


def build_agent(
    options: RunOptions,
    transport: Transport | None,
    quit_: Callable[[], None] | None = None,
    *listeners: Any,
    announce: ev.Event | None = None,
) -> Agent:
    """The agent for `options`: its outputs opened (OutputError if they cannot be), its session,
    with a `transport` its server (hooks fixed here: commands parsed once, the run quit by `quit_`) and,
    on a torchrun rank, the job's tap in front of it; the server (or tap), the outputs and
    `listeners` are attached in that order. Without a transport (headless) the in-process client
    talks to the session itself. `announce`: an event the outputs hear before anything else
    (`gradtui.listen()`: no runner announces the process)."""
    _prepare_native()
    if transport is not None and transport.listener is not None and _in_job():
        options = msgspec.structs.replace(options, record_all=True)  # every rank hooks (and gates) every pass
    outputs = Outputs(options)
    if announce is not None:
        for output in outputs.listeners:
            output(announce)
    session = _new_session(options)
    if transport is None:
        _attach(session, options, (*outputs.listeners, *listeners), outputs=tuple(outputs.listeners))
        return Agent(options, outputs, session)
    assert quit_ is not None, "an agent that serves a client needs its quit path"
    from gradtui.agent.server import AgentServer, ServerHooks

    commands = AgentCommands(session)
    tap = _job_tap(session, commands, transport, quit_)
    session.run_quit.take(tap.quit_job if tap is not None else quit_)
    front: Any = tap or commands
    hooks = ServerHooks(
        submit=front.submit,
        quit=front.quit,
        resume=session.run_on,
        detached=tap.detached if tap is not None else _nothing,
        info=transport.info,
    )
    if tap is not None:
        hooks.order = tap.order  # the job hub's orders to this rank
    # Where the agent describes every pass anyway (a recording, a report, a reference to compare
    # with, a job's tap), its client is sent every pass described too: nothing is saved by pacing;
    # so it is where the user asked to browse every pass's node statistics (`record_all`).
    pace = tap is None and not outputs.listeners and not listeners and options.against is None
    pace = pace and not options.record_all
    server = AgentServer(
        transport.listener, transport.token, hooks, exit_with_client=transport.exit_with_client, pace=pace
    )
    if tap is not None:
        tap.serve(server)
    # A job's tap answers `flow` with every rank's: it reads every pass's flow.
    _attach(
        session,
        options,
        (tap or server, *outputs.listeners, *listeners),
        True if tap else server.wants_flow,
        first_batches=tap is None,
        outputs=tuple(outputs.listeners),
        first_graph=server.describes_next if pace else True,
        first_leaves=server.wants_leaves if pace else True,
        first_returned=server.returned if pace else None,
    )
    return Agent(options, outputs, session, server, commands, tap)


def _prepare_native() -> None:
    """The compiled posthooks loaded (or their build started) before the script runs and before
    its output is captured: a line the user must see about them (a damaged or refused library)
    goes to gradtui's stderr now, never into the script's output."""
    from gradtui.engine.hooks import native

    line = native.prepare()
    if line is not None:
        print(f"gradtui: {line}", file=sys.stderr, flush=True)


def _nothing() -> None:
    """A hook with nothing to do."""


def _in_job() -> bool:
    from gradtui.distributed.job import in_job_env

    return in_job_env()


def _job_tap(session: Session, commands: AgentCommands, transport: Transport, quit_: Callable[[], None]):
    """A listening agent under torchrun (WORLD_SIZE > 1) is one rank of a job (gradtui.distributed);
    `quit_`: the mode's way out, this rank's own."""
    if transport.listener is None or not _in_job():
        return None
    from gradtui.distributed.tap import JobTap

    return JobTap(session, commands.submit, quit_, transport.listener, transport.token)


def process_info(options: RunOptions, kind: str, argv: list[str] | None = None) -> dict[str, Any]:
    """What a client is told about this process in the welcome."""
    return {
        "script": options.script,
        "argv": argv if argv is not None else [options.script, *options.args],
        "pid": os.getpid(),
        "kind": kind,
    }
