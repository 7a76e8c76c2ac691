"""The agent's side of the wire: serve one client at a time the session's events and commands.

`AgentServer` is a session listener (events in, on whichever thread emits them) and owns the
listening socket. Nothing it does blocks the script: an event is appended to a list under a
lock, and a writer thread sends what is pending as one frame, at most every `BATCH_INTERVAL`
seconds while only node and output events are pending (a `continue` through a 10,000-node pass
is a few frames, not 10,000), at once when anything else is (a pause, an answer). With no client
attached, events go only to the backlog a late client replays.

A connection must pass the hello and show the token before anything it sends is read as a
command, and before that it costs little (`gradtui.agent.admission`): at most MAX_PENDING
connections are in the hello at once (more are refused at once), the whole hello has one
deadline, the token's frame may be only `protocol.AUTH_MAX_FRAME` bytes and is decoded flat, and
a failed `accept` (out of file descriptors) is retried, never the end of serving. What goes wrong
is said on gradtui's own `Diagnostics`, never on fd 2, which under --listen is the script's
stderr as clients and recordings see it. A second client while one is attached is refused with
a message saying so. When the client goes (it detaches or dies), the agent either quits
(`exit_with_client`: a child agent whose UI is gone) or runs on with its breakpoints armed: a
pause that only a client's `step` asked for resumes by itself, a breakpoint hit waits for the
next client. So does the run's first pause (its reason is "step" too, as pdb stops at the first
line): until a client has moved the engine, a tab reloaded or closed there leaves the script
paused where it was for the next one, as `--listen` waits there for the first.

Whatever a client does, what waits for it is bounded (`gradtui.agent.outbox`: a client that
reads nothing is sent, when it reads again, a notice of what it missed and the present), and
every frame to it has a deadline (`gradtui.agent.sender`): a client that takes nothing for
`sender.STALL` seconds is detached, and the last frames and the goodbye get `close`'s timeout,
so a stalled client can neither grow the agent nor keep it alive after the script. The goodbye
comes after the frame the writer is sending (never ahead of it) and counts what the deadline
kept from being sent: whatever a client missed, it is told.

The gradient flow (a norm of every parameter and of its gradient, a row each) is computed for a
hooked pass only when a client shows it (`wants_flow`, the server's `flow` as the session's
listener): while the client has said `{"flow": true}` (the UI, once its flow table or its passes
view is open), or for a pass the client saw paused (the pass on its screen, whose flow `w`
shows). Every other hooked pass sends its leaves' gradient statistics only.

Nothing a client does not show is made for it. A UI draws a few passes a second, whatever the
script's pace (it draws what arrived as one batch: a pass that came and went between two draws is
never on screen), so a client may say it is *paced*: it sends `Drawn` once it has drawn the end
of a pass it was sent described, and from the first `Drawn` on, a pass is described to it (its
graph as it starts, its node events, its leaves' statistics as it ends) only if it starts after
the client has drawn the last one described: the `describes_next` the session asks as a pass
starts (its `graph`), so a pass the client will not show runs on a lazy capture, the walk only,
as a headless run's does. Such a pass is sent as what the client shows of it: its index, losses
and size (`PassStarted(described=False)`, no graph) and its end without its leaves' statistics
(unless the client shows every pass's flow). Its node batches are held
unmade; a pause in it (a breakpoint hit, a break-in: the capture is described at the pause)
sends the pass again, described, with the node events so far, before the pause: a paused pass
is always shown in full. Its progress is not sent (the client shows the progress of the pass
on its screen; a pause says how far the pass had run), and its start and end wait for the next
frame rather than wake the writer. A client that never says `Drawn` (a headless one, a test's
reader) is sent every pass described, as is every client while no client is attached (the backlog a late
one replays), and every client of an agent that describes every pass anyway (a recording, a
report, a reference to compare with) or whose user asked to browse every pass's node statistics
(`record_all`): `pace=False`.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hmac
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradtui.agent.admission import FdReserve, Gate, leaves_enough_fds, refuse
from gradtui.agent.admission import close_quietly as _close
from gradtui.agent.backlog import Backlog
from gradtui.agent.diagnostics import Diagnostics
from gradtui.agent.outbox import Outbox
from gradtui.agent.sender import STALL, ClientSender
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command
from gradtui.protocol.lazygraph import LazyGraph
from gradtui.wire import frames, protocol
from gradtui.wire.passgraphs import GraphsSent

BATCH_INTERVAL = 0.05
"""Seconds between two frames of node and output events (20 a second at most)."""

GOODBYE_SHARE = 0.25
"""The part of `close`'s timeout kept for the goodbye (and the frame in flight to finish): no
event frame begins in it, so the goodbye is never queued behind what it has to count."""

ACCEPT_BACKOFF = (0.05, 1.0)
"""Seconds to wait after a failed `accept` before retrying: the first, and the most (doubling)."""

_UNSHOWN_LOW = (ev.PassStarted,)
"""Events of a pass sent undescribed that may wait for the next ones (its end too, see `_held_back`)."""

_LISTENER_GONE = (errno.EBADF, errno.EINVAL, errno.ENOTSOCK)
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)


@dataclass
class ServerHooks:
    """What the server asks of the agent around it."""

    submit: Callable[[Command, int], None]
    """Run a command the client parsed, answering with this request id."""
    quit: Callable[[], None]
    """Stop the script (the client asked to quit, or a child agent lost its UI)."""
    resume: Callable[[], None] = lambda: None
    """Let a paused engine run on (the client detached)."""
    detached: Callable[[], None] = lambda: None
    """The client went without quitting (a job's hub releases its ranks)."""
    info: dict[str, Any] = field(default_factory=dict)
    """What a client is told about the target in the welcome (script, argv, pid...)."""
    order: Callable[[bytes], None] = lambda order: None
    """A job hub's order to this rank (its wire form; gradtui.distributed.orders reads it)."""


class AgentServer:
    """Serves the session to one client at a time over `listener` (see module doc)."""

    def __init__(
        self,
        listener: socket.socket | None,
        token: str,
        hooks: ServerHooks,
        *,
        exit_with_client: bool = False,
        pace: bool = True,
    ) -> None:
        """`pace=False`: describe every pass to every client (the agent describes each anyway: a
        recording, a report, a reference to compare with, a job's tap; or `record_all`)."""
        self._listener = listener
        self._token = token
        self._hooks = hooks
        self._exit_with_client = exit_with_client
        self._lock = threading.Condition()
        self._pending = Outbox()
        """What waits for the attached client: bounded, whatever the client does."""
        self._backlog = Backlog()
        self._client: socket.socket | None = None
        self._sender: ClientSender | None = None
        """Writes the attached client's frames, each with a deadline."""
        self._graphs = GraphsSent()
        """The attached client's events as wire data, a pass described as the one before sent as
        a reference to it (gradtui.wire.passgraphs): one per connection, as the client's reader."""
        self._sending = 0
        """Events (as `Outbox.untold` counts them) in the frame the writer is sending."""
        self._unsent = 0
        """Events (so counted) of frames that `close`'s deadline kept from beginning."""
        self._closed = False
        self._paused_by_step = False
        self._moved = False
        """A client has resumed the engine: a `step` pause from then on is one a client asked for
        (the first pause, a `step` pause no client asked for, waits for a client)."""
        self._detached = False
        """A client has come and gone: pauses a `step` made resume by themselves until the next one."""
        self._gate = Gate()
        """Connections accepted that have not finished the hello (a bounded number)."""
        self._handshake_timeout = protocol.handshake_timeout()
        self._diagnostics = Diagnostics()
        self._reserve = FdReserve() if listener is not None else None
        self.attached = threading.Event()
        """Set while a client is attached."""
        self._flow_asked = False
        """The attached client shows the gradient flow of every pass (it said `{"flow": true}`)."""
        self._pass_paused = False
        """The pass in flight has paused: a client shows it, its flow included."""
        self._pace = pace
        self._paced = False
        """The attached client paces the passes described to it (it has said `Drawn`)."""
        self._credit = False
        """A paced client has drawn the last pass described to it: describe the next one."""
        self._asked: bool | None = None
        """What `describes_next` last answered, for the PassStarted that follows it (None: not asked
        since the last pass started: a pass hooked at every node, described anyway)."""
        self._unshown: ev.PassStarted | None = None
        """The pass in flight, sent without its description (None: none, or it was sent described)."""
        self._held: list[ev.Event] = []
        """That pass's events held back: its node batches (unmade) and call-site variables, sent
        if it pauses."""
        self.undescribed = 0
        """How many passes were sent without their description (a count the tests read)."""

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread and, with a listening socket, the accept loop."""
        self._spawn(self._write_loop, "gradtui-wire-writer")
        if self._listener is not None:
            self._spawn(self._accept_loop, "gradtui-wire-accept")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        """Run `target` on a daemon thread (not kept: a stream of strangers grows no list)."""
        threading.Thread(target=self._guarded, args=(target, name), name=name, daemon=True).start()

    def _guarded(self, target: Callable[[], None], name: str) -> None:
        """`target`, with anything it raises said in one diagnostic line: a thread's traceback
        would go to fd 2, which under --listen is the script's stderr as clients see it."""
        try:
            target()
        except Exception as exc:  # noqa: BLE001 - the last guard of a server thread
            self._diagnostics.once(
                f"thread:{name}:{type(exc).__name__}", f"internal error in {name}: {type(exc).__name__}: {exc}"
            )

    def close(self, reason: str = "the script ended", timeout: float = 2.0) -> None:
        """Send what is pending and say goodbye, all within `timeout` seconds (a client that
        reads nothing cannot keep the process alive), stop serving. Event frames must begin in
        the first part of it, and the goodbye comes after the writer's last frame (it may begin
        in the last `GOODBYE_SHARE` of `timeout`) and says how many events were not sent."""
        end = time.monotonic() + timeout
        last_frames = end - timeout * GOODBYE_SHARE
        with self._lock:
            if self._sender is not None:
                self._sender.limit(last_frames, end)
            # a batch the writer has taken is still to be told until its frame is sent or refused
            while (self._pending or self._sending) and self._client is not None and time.monotonic() < end:
                self._lock.notify_all()
                self._lock.wait(0.02)
            untold = self._pending.untold + self._sending + self._unsent
            if self._client is not None and untold:
                # the deadline cut the stream short: nothing is lost without a word
                reason += f"; {untold} events were not sent in time (the client read too slowly)"
            self._closed = True
            client, self._client = self._client, None
            sender, self._sender = self._sender, None
            self._lock.notify_all()
        if client is not None and sender is not None:
            sender.send(protocol.encode({"bye": reason}), last=True)
            _close(client)
        if self._listener is not None:
            _close(self._listener)
        if self._reserve is not None:
            self._reserve.close()
        self._diagnostics.close()

    def forked(self) -> None:
        """Called in a forked child of the agent's process: close its copies of the listening and
        client sockets (closed, not shut down: the connections are the parent's) and send nothing."""
        self._closed = True
        for sock in (self._listener, self._client):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass
        self._listener = self._client = None

    # ---- events in -----------------------------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        """Session listener: queue `event` for the client (and the backlog). Never blocks long."""
        if isinstance(event, ev.PassPrints):
            return  # fingerprints are for a recording (its listener is in this process), not clients
        if self._unshown is not None and self._held_back(event):
            return
        if type(event) is ev.NodesRan:
            # what it needs of the live nodes read here, on the pass's thread; its events are made
            # by the writer as it encodes the batch, off the script's thread
            event.expand()
        with self._lock:
            match event:
                case ev.PassStarted(recorded=True):
                    self._pass_paused = False
                    event = self._started(event)
                case ev.PassStarted():
                    self._pass_paused = False
                case ev.Paused():
                    self._pass_paused = True
                    self._paused_by_step = event.reason == "step" and self._moved
                    if self._client is None and self._detached and self._paused_by_step:
                        self._hooks.resume()
                case ev.Resumed():
                    self._moved = True
                    self._paused_by_step = False
                case ev.PassFinished():
                    self._paused_by_step = False
            self._queue(event, low=self._unshown is not None and type(event) in _UNSHOWN_LOW)

    def _queue(self, event: ev.Event, low: bool = False) -> None:
        """`event` to the backlog and, with a client attached, to its queue (the lock held); `low`:
        it may wait for the next ones (an undescribed pass's start and end: the writer is not
        woken once for each)."""
        self._backlog.add(event)
        if self._client is not None and self._pending.add(event, low):
            self._lock.notify_all()

    def _started(self, event: ev.PassStarted) -> ev.PassStarted:
        """A hooked pass starts: what the client is sent of it, described or not (see module doc;
        the lock held)."""
        asked, self._asked = self._asked, None
        shown = self._shows_next() if asked is None else asked
        self._held = []
        if shown:
            self._unshown = None
            self._credit = False
            return event
        self._unshown = event
        self.undescribed += 1
        return dataclasses.replace(event, graph=LazyGraph(list, None, 0), nodes=len(event.graph), described=False)

    def _held_back(self, event: ev.Event) -> bool:
        """An event of the pass in flight sent undescribed: held (its node batches, unmade; a pass
        hooked at every node, its node events; its call-site variables), dropped (its progress),
        sent low (its end), or, at its pause, the pass sent again described with what was held,
        then the pause. False: send `event` as it is. Called on the pass's thread."""
        unshown = self._unshown
        assert unshown is not None
        match event:
            case ev.NodesRan() | ev.NodeRan() | ev.CallSiteVariables() if event.pass_index == unshown.pass_index:
                with self._lock:
                    self._held.append(event)
                return True
            case ev.Paused() if event.pass_index == unshown.pass_index:
                held, self._held, self._unshown = self._held, [], None
                for one in held:  # read now, while the pass's nodes live (the pause keeps them)
                    if type(one) is ev.NodesRan:
                        one.expand()
                with self._lock:
                    self._queue(unshown)  # described: the pause described the capture first
                    for one in held:
                        self._queue(one)
                return False
            case ev.Progress() if event.pass_index == unshown.pass_index:
                return True  # the UI shows no progress of a pass it was not sent (a pause says how far)
            case ev.PassFinished() if event.pass_index == unshown.pass_index:
                with self._lock:
                    self._held, self._unshown = [], None
                    self._paused_by_step = False
                    self._queue(event, low=True)  # it only counts a pass: no need to wake the writer
                return True
        return False

    def returned(self, index: int) -> None:
        """Planned pass `index` has returned, its last batch heard, and can pause no more: the batches
        of a pass sent undescribed are let go, never made (the session calls it, on the pass's
        thread, before the pass's batches are settled)."""
        unshown = self._unshown
        if unshown is not None and unshown.pass_index == index:
            with self._lock:
                self._held = []

    def _shows_next(self) -> bool:
        """Is the pass starting now described to the client (see module doc; the lock held)?"""
        return not self._pace or self._client is None or not self._paced or self._credit

    @property
    def paced(self) -> bool:
        """Does the attached client pace the passes described to it (it has said `Drawn`)?"""
        return self._paced

    def describes_next(self) -> bool:
        """Does the client show the hooked pass starting now, so that its graph must be described
        as it starts? Asked by the session at a planned pass's start, on the script's thread; the
        PassStarted that follows is sent as this answer says."""
        with self._lock:
            self._asked = self._shows_next()
            return self._asked

    def wants_flow(self) -> bool:
        """Does a client show the gradient flow of the hooked pass ending now (see module doc)?
        Asked by the session as the pass ends, on the script's thread."""
        return self._flow_asked or self._pass_paused

    def wants_leaves(self) -> bool:
        """Does a client show the leaves' gradient statistics of the hooked pass ending now: one it
        was sent described, one that paused, or any while it shows every pass's flow?"""
        return self._unshown is None or self._flow_asked or self._pass_paused

    # ---- connections ---------------------------------------------------------------------

    def _accept_loop(self) -> None:
        """Accept until closed; a failed `accept` (EMFILE...) is logged once and retried after a
        back-off, never the end of the loop (the script may be waiting at a pause for a client)."""
        assert self._listener is not None
        backoff = ACCEPT_BACKOFF[0]
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError as exc:
                if self._closed or exc.errno in _LISTENER_GONE:
                    return
                self._diagnostics.once(
                    "accept", f"accepting a client failed ({exc.strerror or exc}); the agent keeps retrying"
                )
                if exc.errno in _OUT_OF_FDS and self._reserve is not None:
                    self._reserve.refuse_one(self._listener)
                time.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF[1])
                continue
            backoff = ACCEPT_BACKOFF[0]
            if not leaves_enough_fds():
                refuse(
                    conn,
                    "the agent's process is short of file descriptors (ulimit -n): the script's "
                    "come first; try again later",
                )
            elif self._gate.enter():
                self._spawn(functools.partial(self._handshake, conn), "gradtui-wire-client")
            else:
                refuse(
                    conn,
                    f"{self._gate.limit} connections are already waiting to show the token: try again in a few seconds",
                )

    def serve_connection(self, conn: socket.socket) -> None:
        """Serve an already connected socket (a child agent's end of its socketpair)."""
        self._gate.enter()  # the only one: a socketpair's peer is the UI that made it
        self._spawn(lambda: self._handshake(conn), "gradtui-wire-client")

    def _handshake(self, conn: socket.socket) -> None:
        """Hello, token (one deadline for both, a frame of at most AUTH_MAX_FRAME bytes), then
        serve the client's commands until it goes. `conn` was counted by the gate."""
        try:
            admitted = self._authenticate(conn)
        finally:
            self._gate.leave()
        if admitted:
            self._read_loop(conn)

    def _authenticate(self, conn: socket.socket) -> bool:
        """The hello and the token; True if `conn` is now the attached client (else it is closed)."""
        try:
            deadline = time.monotonic() + self._handshake_timeout
            conn.settimeout(self._handshake_timeout)
            conn.sendall(protocol.encode(protocol.hello()))
            answer = protocol.read_frame(
                conn, limit=protocol.AUTH_MAX_FRAME, deadline=deadline, decoder=protocol.decode_client
            )
            refusal = self._refusal(answer)
            if refusal is not None:
                refuse(conn, refusal[1], refusal[0])
                return False
            conn.settimeout(None)
            with self._lock:
                if self._client is not None or self._closed:
                    refuse(
                        conn,
                        "another client is attached to this agent: detach it first"
                        if self._client is not None
                        else "the script has ended",
                    )
                    return False
                sender = ClientSender(conn)
                sender.limit(deadline)  # the welcome is part of the hello and shares its deadline
                if not sender.send(protocol.encode({"welcome": self._hooks.info})):
                    _close(conn)
                    return False
                sender = ClientSender(conn)
                self._pending.replace(self._backlog.replay())
                self._unsent = 0
                self._client, self._sender = conn, sender
                self._graphs = GraphsSent()  # the new client holds no pass yet
                self._paced = self._credit = False  # until it says it paces
                self.attached.set()
                self._lock.notify_all()
            return True
        except protocol.ProtocolError as exc:
            refuse(conn, str(exc), exc.code)
            return False
        except OSError:
            pass
        _close(conn)
        return False

    def _refusal(self, answer: dict[str, Any] | None) -> tuple[str, str] | None:
        """(code, reason) to refuse a client's hello answer, or None to let it in."""
        if answer is None:
            return "protocol", "no hello"
        if answer.get("version") != protocol.VERSION:
            return "version", (
                f"this agent speaks protocol version {protocol.VERSION}, the client "
                f"{answer.get('version')}: run the same gradtui version on both sides"
            )
        token = answer.get("auth")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self._token.encode()):
            return "token", "wrong token: take it from the agent's runtime file (gradtui attach reads it)"
        return None

    def _read_loop(self, conn: socket.socket) -> None:
        """The attached client's frames (typed: gradtui.wire.frames), until it detaches or goes
        away; a frame that is not one of ours ends the connection."""
        quit_ = False
        try:
            while (payload := protocol.read_payload(conn)) is not None:
                match frames.decode(payload):
                    case frames.Submit() as submit:
                        self._hooks.submit(submit.command_of(), submit.id)
                    case frames.ShowFlow(shown=shown):
                        self._flow_asked = shown
                    case frames.Drawn():
                        with self._lock:
                            self._paced = self._credit = True
                    case frames.Order(order=order):
                        self._hooks.order(bytes(order))
                    case frames.Quit():
                        quit_ = True
                        break
                    case frames.Detach():
                        break
        except (OSError, protocol.ProtocolError):
            pass
        self._drop(conn, quit_)

    def _drop(self, conn: socket.socket, quit_: bool) -> None:
        """The client went: quit, or run on with breakpoints armed."""
        with self._lock:
            if self._client is conn:
                self._client = self._sender = None
                self._pending.clear()
                self.attached.clear()
                self._flow_asked = False  # the next client says what it shows
                self._paced = False
            closed = self._closed
            step_pause = self._paused_by_step
            self._detached = True
        _close(conn)
        if closed:
            return
        if quit_ or self._exit_with_client:
            self._hooks.quit()
            return
        self._hooks.detached()
        if step_pause:
            self._hooks.resume()

    # ---- events out ----------------------------------------------------------------------

    def _write_loop(self) -> None:
        last = 0.0
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._lock.wait()
                if self._closed and not self._pending:
                    return
                if self._pending.only_low:
                    wait = last + BATCH_INTERVAL - time.monotonic()
                    if wait > 0:
                        self._lock.wait(wait)  # gather more, unless something urgent arrives
                told = self._pending.untold
                batch = self._pending.take(self._backlog.present)
                client, sender, graphs = self._client, self._sender, self._graphs
                if client is not None and sender is not None and batch:
                    self._sending = told
                self._lock.notify_all()
            if client is None or sender is None or not batch:
                continue
            last = time.monotonic()
            sent = sender.send(protocol.encode({"events": [graphs.to_wire(e) for e in batch]}))
            with self._lock:
                self._sending = 0
                if not sent and not sender.broken and client is self._client:
                    self._unsent += told  # close's deadline kept the frame from beginning: the goodbye counts it
                self._lock.notify_all()
            if not sent and sender.broken:
                if sender.stalled:
                    self._diagnostics.once(
                        "stalled",
                        f"the attached client read nothing for {STALL:.0f} s: it is detached, the script runs on",
                    )
                self._drop(client, False)
