"""A client that reads nothing, in process: what waits for it is bounded, it is told what it
missed when it reads again, and the goodbye cannot keep the agent waiting.

An `AgentServer` serving one end of a socketpair; the test's end shows the token and then reads
nothing while far more events are emitted than the socket buffers and the outgoing queue hold.
The goodbye's count is also checked with the writer held between taking a batch and sending
it (a `ClientSender` that waits, as a descheduled thread on a loaded machine would): the
goodbye must come after that frame, or count it.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from gradtui.agent import server as server_module
from gradtui.agent.outbox import MAX_QUEUED
from gradtui.agent.sender import ClientSender
from gradtui.agent.server import AgentServer, ServerHooks
from gradtui.protocol import events as ev
from gradtui.wire import protocol
from gradtui.wire.codec import from_wire
from gradtui.wire.passgraphs import GraphsRead

TOKEN = "the-token"
WAIT = 10.0
"""Seconds any read or join of the test waits (a wait timeout, not a speed assertion)."""
LINES = 5 * MAX_QUEUED
HELD = "the held line\n"
"""The line whose frame the held sender holds once the writer has taken it."""
HOLD = 0.5
"""Seconds the held frame waits, once close has begun, for a goodbye sent ahead of it (a bound
on the wait, not a speed assertion: a goodbye that waits for the frame comes after it anyway)."""


def attached() -> tuple[AgentServer, socket.socket]:
    """A server and the test's end of its connection, past the hello."""
    ours, theirs = socket.socketpair()
    server = AgentServer(None, TOKEN, ServerHooks(submit=lambda text, request: None, quit=lambda: None))
    server.start()
    server.serve_connection(theirs)
    ours.settimeout(WAIT)
    assert "hello" in protocol.read_frame(ours)
    ours.sendall(protocol.encode({"auth": TOKEN, "version": protocol.VERSION}))
    assert "welcome" in protocol.read_frame(ours)
    assert server.attached.wait(WAIT)
    return server, ours


def read_until_bye(sock: socket.socket) -> tuple[list[ev.Event], str | None]:
    """Every event the server sends until its goodbye (or the end of the stream)."""
    events: list[ev.Event] = []
    graphs = GraphsRead()  # this connection's: a pass may be sent as a reference to the last
    while (message := protocol.read_frame(sock)) is not None:
        if "bye" in message:
            return events, message["bye"]
        events.extend(graphs.from_wire(e) for e in message.get("events") or ())
    return events, None


def test_a_client_that_reads_nothing_is_told_what_it_missed_and_loses_nothing_silently():
    server, sock = attached()
    try:
        server(ev.ScriptStarted("script.py", ("script.py",)))
        for i in range(LINES):  # the client reads none of it while it is emitted
            server(ev.Output("stdout", f"line {i}\n"))
        server(ev.Output("stdout", "the last line\n"))
        closer = threading.Thread(target=server.close, daemon=True)
        events, bye = [], None

        def read() -> None:
            nonlocal events, bye
            events, bye = read_until_bye(sock)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()  # the client reads again, and the script ends
        closer.start()
        closer.join(WAIT)
        reader.join(WAIT)
        assert not reader.is_alive() and bye is not None and bye.startswith("the script ended"), bye
        # what close's deadline cut short is counted in the goodbye (a loaded machine may not
        # carry every kept line in its seconds): the lines received, dropped and untold add up
        untold = int(bye.split("; ", 1)[1].split(" ", 1)[0]) if "; " in bye else 0
        notices = [e for e in events if isinstance(e, ev.Notice)]
        lines = [e.text for e in events if isinstance(e, ev.Output)]
        assert all("dropped" in n.text for n in notices), notices  # each says what was missed since the last
        assert notices or untold, (len(events), len(lines), lines[-1:], bye)  # the cap dropped, or the deadline cut
        if not untold:
            assert lines[-1] == "the last line\n"
        dropped = sum(int(n.text.split(" lines of output")[0].rsplit(" ", 1)[1]) for n in notices)
        assert len(lines) < LINES and len(lines) + dropped + untold == LINES + 1, (len(lines), dropped, untold)
    finally:
        sock.close()


def test_the_goodbye_to_a_client_that_reads_nothing_has_a_deadline():
    server, sock = attached()
    try:
        for i in range(LINES):
            server(ev.Output("stdout", f"line {i}\n"))
        closer = threading.Thread(target=server.close, kwargs={"timeout": 0.5}, daemon=True)
        closer.start()
        closer.join(WAIT)
        assert not closer.is_alive(), "close() waits for a client that reads nothing"
    finally:
        sock.close()


@dataclass
class Hold:
    """What the held sender saw (`held_sender`)."""

    taken: threading.Event = field(default_factory=threading.Event)
    """The writer took the held line's batch and is sending its frame: the outbox is empty."""
    closing: threading.Event = field(default_factory=threading.Event)
    """`close` has begun (it set the client's deadlines)."""
    bye_tried: threading.Event = field(default_factory=threading.Event)
    held: bool = False
    bye_while_held: bool = False
    """The goodbye was sent while the held frame was not: it would arrive first, or alone."""


def held_sender(hold: Hold) -> type[ClientSender]:
    """A `ClientSender` whose frame with the `HELD` line waits until close has begun and then
    until the goodbye is tried or `HOLD` seconds pass, before it is sent."""

    class HeldSender(ClientSender):
        """See `held_sender`."""

        def limit(self, deadline: float, end: float | None = None) -> None:
            """Set the deadlines; close's (a goodbye's time after them) mark that it has begun."""
            super().limit(deadline, end)
            if end is not None:
                hold.closing.set()

        def send(self, data: bytes, *, last: bool = False) -> bool:
            """Send `data`, holding the held line's frame first (see `held_sender`)."""
            message = protocol.decode(data[protocol.HEADER.size :])
            if "bye" in message:
                hold.bye_while_held = hold.held
                hold.bye_tried.set()
            elif ev.Output("stdout", HELD) in (from_wire(e) for e in message.get("events") or ()):
                hold.held = True
                hold.taken.set()
                hold.closing.wait(WAIT)
                hold.bye_tried.wait(HOLD)
                hold.held = False
            return super().send(data, last=last)

    return HeldSender


def close_and_read(server: AgentServer, sock: socket.socket) -> tuple[list[ev.Event], str | None]:
    """Close `server` on a thread while reading its client's end; what arrived and the goodbye."""
    closer = threading.Thread(target=server.close, kwargs={"timeout": WAIT}, daemon=True)
    closer.start()
    received = read_until_bye(sock)
    closer.join(WAIT)
    assert not closer.is_alive()
    return received


def test_the_goodbye_comes_after_the_frame_the_writer_has_taken(monkeypatch):
    hold = Hold()
    monkeypatch.setattr(server_module, "ClientSender", held_sender(hold))
    server, sock = attached()
    try:
        server(ev.Output("stdout", HELD))
        assert hold.taken.wait(WAIT)  # the writer holds the line's batch: nothing waits in the outbox
        events, bye = close_and_read(server, sock)
        assert not hold.bye_while_held, "the goodbye was sent while the writer held a frame it had taken"
        assert events == [ev.Output("stdout", HELD)] and bye == "the script ended", (events, bye)
    finally:
        sock.close()


def test_frames_the_deadline_keeps_from_beginning_are_counted_in_the_goodbye(monkeypatch):
    hold = Hold()
    monkeypatch.setattr(server_module, "ClientSender", held_sender(hold))
    monkeypatch.setattr(server_module, "GOODBYE_SHARE", 1.0)  # no event frame begins once close has begun
    server, sock = attached()
    try:
        server(ev.Output("stdout", HELD))
        assert hold.taken.wait(WAIT)
        for i in range(3):  # these wait in the outbox behind the held frame
            server(ev.Output("stdout", f"line {i}\n"))
        events, bye = close_and_read(server, sock)
        assert not hold.bye_while_held
        assert events == [], events  # the held frame and the three lines after it could not begin
        assert bye == "the script ended; 4 events were not sent in time (the client read too slowly)", bye
    finally:
        sock.close()
