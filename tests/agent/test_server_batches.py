"""The UI's agent takes a pass's nodes a batch at a time: the AgentServer (as gradtui.agent.build
attaches it) is called once per NodesRan batch, not once per node, and a client still reads every
NodeRan, the same events in the same order as a listener in the agent's process hears them one by
one. Counted: the server's calls by event type, and which thread makes a batch's events."""

from __future__ import annotations

import os
import threading
from collections import Counter

import pytest

from gradtui.agent.build import Transport, build_agent
from gradtui.agent.server import AgentServer
from gradtui.engine.hooks.batches import Feeds, PassBatches
from gradtui.protocol import events as ev
from gradtui.protocol.options import RunOptions
from tests.helpers import served_events, small_passes

pytestmark = pytest.mark.timeout(120)

PASSES = 3


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
    got = served_events(agent, lambda: small_passes(agent.session, PASSES), PASSES)

    here = [e for e in heard if isinstance(e, ev.NodeRan)]
    started = [e for e in heard if isinstance(e, ev.PassStarted)]
    assert len(started) == PASSES and len(here) == sum(e.graph.number_of_nodes() for e in started)  # every node ran
    assert calls["NodeRan"] == 0 and 1 <= calls["NodesRan"] < len(here)
    assert [e for e in got if isinstance(e, ev.NodeRan)] == here
    assert not any(isinstance(e, ev.NodesRan) for e in got)  # a client reads nodes, not batches


def test_the_writer_makes_the_node_events_and_the_script_reads_the_live_nodes(monkeypatch):
    """The agent's only listener the server: a batch's markers are expanded (the live nodes read)
    on the script's thread and nowhere else, its NodeRan events made off it (by the writer, as it
    encodes the batch), and the client reads the same events a listener in the agent's process
    hears for the same passes."""
    made: Counter[str] = Counter()
    expanded: Counter[str] = Counter()
    real_make, real_expanded = PassBatches._make, PassBatches._expanded

    def make(self, steps, first):
        made[threading.current_thread().name] += 1
        return real_make(self, steps, first)

    def expanding(self, steps):
        if self._expand is not None and any(type(step) is Feeds for step in steps):
            expanded[threading.current_thread().name] += 1
        return real_expanded(self, steps)

    monkeypatch.setattr(PassBatches, "_make", make)
    monkeypatch.setattr(PassBatches, "_expanded", expanding)
    agent = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), Transport("token"), lambda: None)
    script = threading.current_thread().name
    got = served_events(agent, lambda: small_passes(agent.session, PASSES), PASSES)
    assert expanded[script] >= PASSES and set(expanded) == {script}  # live nodes: the script's thread only
    assert made[script] == 0 and made["gradtui-wire-writer"] >= PASSES  # the events: the writer's

    # the oracle: the same passes heard one by one by a listener in the process, made there
    monkeypatch.setattr(PassBatches, "_make", real_make)
    monkeypatch.setattr(PassBatches, "_expanded", real_expanded)
    again = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), None)
    heard: list[ev.Event] = []
    again.session.add_listener(heard.append, graph=False, flow=False)
    small_passes(again.session, PASSES)
    again.outputs.close()
    here = [e for e in heard if isinstance(e, ev.NodeRan)]
    assert here and [e for e in got if isinstance(e, ev.NodeRan)] == here
