"""A pass described as the pass before, but for its sequence numbers, travels as a reference to
it: counted (the whole graph converted once for passes of one graph, again when the description
changes), and what the client makes is exactly what the agent's process heard, a last, smaller
batch's saved shapes included."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest
import torch

from gradtui.agent.build import Transport, build_agent
from gradtui.protocol import events as ev
from gradtui.protocol.lazygraph import node_infos
from gradtui.protocol.options import RunOptions
from gradtui.wire import codec
from gradtui.wire.client import RemoteTarget
from gradtui.wire.passgraphs import GraphsRead, GraphsSent
from gradtui.wire.protocol import ProtocolError
from tests.helpers import count_calls

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0
"""Seconds any wait of this test may take."""

BATCHES = (4, 4, 4, 3, 3)
"""Rows of each pass's batch: three alike, then a last, smaller batch twice (a new description,
then one alike again)."""


def _read(sock: socket.socket, got: list[ev.Event], ready: threading.Event, done: threading.Event) -> None:
    """A RemoteTarget reading (and decoding) frames until every pass finished."""

    async def read() -> None:
        target = RemoteTarget("token", sock=sock)
        await target.start()
        ready.set()
        async for batch in target.batches():
            got.extend(batch)
            if sum(isinstance(e, ev.PassFinished) for e in got) >= len(BATCHES):
                break
        target.close()

    try:
        asyncio.run(asyncio.wait_for(read(), WAIT))
    finally:
        ready.set()
        done.set()


def _passes(session) -> None:
    """One pass per batch of BATCHES through a seeded small MLP, installed around each backward."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    for rows in BATCHES:
        model.zero_grad(set_to_none=True)
        data = torch.randn(rows, 6)
        loss = model(data).pow(2).mean()
        session.install()
        try:
            loss.backward()
        finally:
            session.uninstall()


def _shown(graph) -> tuple[list, list, dict]:
    """What a client can read of a pass's graph: every node's NodeInfo, the edges, the attributes."""
    return node_infos(graph), sorted(graph.edges(data=True)), dict(graph.graph)


def test_a_repeated_description_travels_once_and_the_client_makes_it_exactly(monkeypatch):
    converted = count_calls(monkeypatch, codec, "_graph_data")
    agent = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), Transport("token"), lambda: None)
    heard: list[ev.Event] = []
    agent.session.add_listener(heard.append, flow=False)
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
        _passes(agent.session)
        assert done.wait(WAIT), "the client never saw the last pass finish"
    finally:
        agent.server.close("test done", timeout=2.0)
        reader.join(WAIT)
        theirs.close()
        agent.outputs.close()

    # the whole graph converted for the first pass and for the first of the smaller batch only
    assert converted[0] == 2
    here = [e for e in heard if isinstance(e, ev.PassStarted)]
    there = [e for e in got if isinstance(e, ev.PassStarted)]
    assert len(here) == len(there) == len(BATCHES)
    for mine, theirs_ in zip(here, there):
        assert (theirs_.pass_index, theirs_.roots, theirs_.losses) == (mine.pass_index, mine.roots, mine.losses)
        assert _shown(theirs_.graph) == _shown(mine.graph)
    # every pass numbers its nodes anew, and the smaller batch's saved shapes are its own
    first, small = node_infos(there[2].graph), node_infos(there[3].graph)
    assert [i.seq for i in node_infos(there[1].graph)] != [i.seq for i in first]
    assert [i.saved for i in small] != [i.saved for i in first]
    assert any("3" in text for info in small for text in info.saved)


def test_the_reader_refuses_a_reference_to_a_pass_it_does_not_hold():
    agent = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), None)
    heard: list[ev.Event] = []
    agent.session.add_listener(heard.append, flow=False)
    _passes(agent.session)
    agent.outputs.close()
    started = [e for e in heard if isinstance(e, ev.PassStarted)]
    sent = GraphsSent()
    wired = [sent.to_wire(e) for e in started]
    assert sent.referenced == 3 and "$graphof" in wired[1]["graph"]  # the passes alike but the first of each size
    late = GraphsRead()  # a reader that missed the pass referred to
    with pytest.raises(ProtocolError, match="refers to pass 0"):
        late.from_wire(wired[1])
    read = GraphsRead()
    assert [_shown(read.from_wire(w).graph) for w in wired] == [_shown(e.graph) for e in started]
