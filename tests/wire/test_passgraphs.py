"""A pass described as the pass before, but for its sequence numbers, travels as a reference to
it: counted (the whole graph converted once for passes of one graph, again when the description
changes), and what the client makes is exactly what the agent's process heard, a last, smaller
batch's saved shapes included."""

from __future__ import annotations

import os

import pytest

from gradtui.agent.build import Transport, build_agent
from gradtui.protocol import events as ev
from gradtui.protocol.lazygraph import node_infos
from gradtui.protocol.options import RunOptions
from gradtui.wire import codec
from gradtui.wire.passgraphs import GraphsRead, GraphsSent
from gradtui.wire.protocol import ProtocolError
from tests.helpers import count_calls, served_events, small_passes

pytestmark = pytest.mark.timeout(120)

BATCHES = (4, 4, 4, 3, 3)
"""Rows of each pass's batch: three alike, then a last, smaller batch twice (a new description,
then one alike again)."""


def _passes(session) -> None:
    """One pass per batch of BATCHES through the helpers' seeded small MLP."""
    small_passes(session, len(BATCHES), BATCHES)


def _shown(graph) -> tuple[list, list, dict]:
    """What a client can read of a pass's graph: every node's NodeInfo, the edges, the attributes."""
    return node_infos(graph), sorted(graph.edges(data=True)), dict(graph.graph)


def test_a_repeated_description_travels_once_and_the_client_makes_it_exactly(monkeypatch):
    converted = count_calls(monkeypatch, codec, "_graph_data")
    agent = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), Transport("token"), lambda: None)
    heard: list[ev.Event] = []
    agent.session.add_listener(heard.append, flow=False)
    got = served_events(agent, lambda: _passes(agent.session), len(BATCHES))

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
