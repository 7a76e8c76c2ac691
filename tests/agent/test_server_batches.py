"""The UI's agent takes a pass's nodes a batch at a time: the AgentServer (as gradtui.agent.build
attaches it) is called once per NodesRan batch, not once per node, and a client still reads every
NodeRan, the same events in the same order as a listener in the agent's process hears them one by
one. Counted: the server's calls by event type."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections import Counter

import pytest

from gradtui.agent.build import Transport, build_agent
from gradtui.agent.server import AgentServer
from gradtui.protocol import events as ev
from gradtui.protocol.options import RunOptions
from gradtui.wire.client import RemoteTarget
from tests.helpers import small_passes

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0
"""Seconds any wait of this test may take."""

PASSES = 3


def _read(sock: socket.socket, got: list[ev.Event], ready: threading.Event, done: threading.Event) -> None:
    """A RemoteTarget reading (and decoding) frames until PASSES passes finished."""

    async def read() -> None:
        target = RemoteTarget("token", sock=sock)
        await target.start()
        ready.set()
        async for batch in target.batches():
            got.extend(batch)
            if sum(isinstance(e, ev.PassFinished) for e in got) >= PASSES:
                break
        target.close()

    try:
        asyncio.run(asyncio.wait_for(read(), WAIT))
    finally:
        ready.set()
        done.set()


def test_the_server_takes_batches_and_the_client_reads_every_node(monkeypatch):
    calls: Counter[str] = Counter()
    real = AgentServer.__call__

    def counted(self, event):
        calls[type(event).__name__] += 1
        return real(self, event)

    monkeypatch.setattr(AgentServer, "__call__", counted)
    agent = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), Transport("token"), lambda: None)
    heard: list[ev.Event] = []
    agent.session.add_listener(heard.append, graph=False, flow=False)  # one by one, in this process
    assert agent.server is not None
    ours, theirs = socket.socketpair()
    got: list[ev.Event] = []
    ready, done = threading.Event(), threading.Event()
    reader = threading.Thread(target=_read, args=(theirs, got, ready, done), daemon=True)
    agent.server.start()
    agent.server.serve_connection(ours)
    reader.start()
    try:
        assert ready.wait(WAIT)
        small_passes(agent.session, PASSES)
        assert done.wait(WAIT), "the client never saw the last pass finish"
    finally:
        agent.server.close("test done", timeout=2.0)
        reader.join(WAIT)
        theirs.close()
        agent.outputs.close()

    here = [e for e in heard if isinstance(e, ev.NodeRan)]
    started = [e for e in heard if isinstance(e, ev.PassStarted)]
    assert len(started) == PASSES and len(here) == sum(e.graph.number_of_nodes() for e in started)  # every node ran
    assert calls["NodeRan"] == 0 and 1 <= calls["NodesRan"] < len(here)
    assert [e for e in got if isinstance(e, ev.NodeRan)] == here
    assert not any(isinstance(e, ev.NodesRan) for e in got)  # a client reads nodes, not batches
