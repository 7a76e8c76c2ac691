"""A client that reads nothing, in process: what waits for it is bounded, it is told what it
missed when it reads again, and the goodbye cannot keep the agent waiting.

An `AgentServer` serving one end of a socketpair; the test's end shows the token and then reads
nothing while far more events are emitted than the socket buffers and the outgoing queue hold.
"""

from __future__ import annotations

import socket
import threading

from gradtui.agent.outbox import MAX_QUEUED
from gradtui.agent.server import AgentServer, ServerHooks
from gradtui.protocol import events as ev
from gradtui.wire import protocol
from gradtui.wire.codec import from_wire

TOKEN = "the-token"
WAIT = 10.0
"""Seconds any read or join of the test waits (a wait timeout, not a speed assertion)."""
LINES = 5 * MAX_QUEUED


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
    while (message := protocol.read_frame(sock)) is not None:
        if "bye" in message:
            return events, message["bye"]
        events.extend(from_wire(e) for e in message.get("events") or ())
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
