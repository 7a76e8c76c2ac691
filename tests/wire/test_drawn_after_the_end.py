"""A client's `drawn` written after its agent has gone loses nothing it has not read yet.

The UI says `drawn` once it has drawn a pass's end; the agent's script may have run its last passes
and ended meanwhile, its goodbye sent and its socket closed. Written through the stream's
transport, the failed write (a broken pipe) aborted the connection and dropped the frames still
unread: the last passes, the script's end, the goodbye (the UI showed 1 of mlp.py's 3 passes)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from gradtui.protocol import events as ev
from gradtui.wire import protocol
from gradtui.wire.client import RemoteTarget
from gradtui.wire.codec import to_wire

pytestmark = pytest.mark.timeout(60)


def _agent_that_ends(sock: socket.socket, token: str) -> None:
    """The hello, then a frame of events and the goodbye, then the socket closed (the agent gone)."""
    sock.settimeout(10)
    sock.sendall(protocol.encode(protocol.hello()))
    answer = protocol.read_frame(sock)
    assert answer is not None and answer.get("auth") == token
    sock.sendall(protocol.encode({"welcome": {}}))
    lines = [ev.Output("stdout", f"line {i}\n") for i in range(3)]
    sock.sendall(protocol.encode({"events": [to_wire(e) for e in lines]}))
    sock.sendall(protocol.encode({"events": [to_wire(ev.ScriptFinished(0, passes=3))]}))
    sock.sendall(protocol.encode({"bye": "the script ended"}))
    sock.close()


@pytest.mark.asyncio
async def test_drawn_after_the_agent_closed_keeps_the_frames_not_read_yet():
    ours, theirs = socket.socketpair()
    agent = threading.Thread(target=_agent_that_ends, args=(theirs, "token"), daemon=True)
    agent.start()
    target = RemoteTarget("token", sock=ours)
    try:
        await target.start()
        await asyncio.to_thread(agent.join, 10)
        assert not agent.is_alive()  # the agent's end is closed, its frames unread here
        target.drawn(0)
        target.drawn(1)  # (the second write to a closed peer fails for certain)
        await asyncio.sleep(0.05)  # a transport's failed write is acted on in the loop
        got: list[ev.Event] = []
        async for batch in target.batches():
            got.extend(batch)
    finally:
        target.close()
    assert [e.text for e in got if isinstance(e, ev.Output)] == ["line 0\n", "line 1\n", "line 2\n"]
    assert [e.exit_status for e in got if isinstance(e, ev.ScriptFinished)] == [0]
    assert target.bye == "the script ended"
