"""The gradient flow is computed for a client only when it shows it: the UI's agent (as
gradtui.agent.build assembles it, a client attached over a socket) measures a hooked pass's flow
while the client has said it shows it, or for a pass that paused; every other hooked pass sends
its leaves' gradient statistics and no flow. Counted: calls of the flow's function."""

from __future__ import annotations

import os
import socket
import threading

import pytest
import torch
from torch import nn

import gradtui.engine.stats.passrecord as passrecord
from gradtui.agent.build import Transport, build_agent
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.options import RunOptions
from tests.helpers import FrameClient, small_passes, until

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0
"""Seconds any wait of this test may take."""


@pytest.fixture
def served(monkeypatch):
    """(agent, client, flow calls, events heard): the agent the UI talks to, `break nan` armed, a
    client attached; the flow's function counted."""
    calls: list[int] = []
    real = passrecord.gradient_flow

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(passrecord, "gradient_flow", counted)
    agent = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), Transport("token"), lambda: None)
    heard: list[ev.Event] = []
    agent.session.add_listener(heard.append, graph=False, flow=False)  # reads none: wants no flow itself
    assert agent.server is not None
    ours, theirs = socket.socketpair()
    agent.server.start()
    agent.server.serve_connection(ours)
    client = FrameClient(theirs, "token")
    until(agent.server.attached.is_set, "the client attached")
    yield agent, client, calls, heard
    agent.server.close("test done", timeout=2.0)
    client.close()
    agent.outputs.close()


def _passes(agent, count: int) -> list[nn.Linear]:
    """`count` training-like passes of a small model under the agent's session (in `continue`)."""
    agent.session.run_on()  # no first pause: a user who pressed `c`
    model = small_passes(agent.session, count)
    return [model[0], model[2]]


def _finished(heard: list[ev.Event]) -> list[ev.PassFinished]:
    return [e for e in heard if isinstance(e, ev.PassFinished)]


def test_a_hooked_pass_nothing_shows_computes_no_flow_and_one_the_view_shows_does(served):
    agent, client, calls, heard = served
    _passes(agent, 3)
    ended = _finished(heard)
    assert len(ended) == 3 and calls == []  # no client showed the flow: not computed
    assert all(e.flow == () for e in ended)
    assert all(len(e.leaf_grads) == 4 for e in ended)  # the leaves' gradients still come (the UI shows them)

    client.show_flow(True)  # the UI opened its flow table (or passes view)
    until(agent.server.wants_flow, "the agent to hear the client shows the flow")
    layers = _passes(agent, 2)
    ended = _finished(heard)[3:]
    assert len(calls) == 2 and all(len(e.flow) == 4 for e in ended)
    rows = {row.name: row for row in ended[-1].flow}
    for prefix, layer in (("0", layers[0]), ("2", layers[1])):
        for part in ("weight", "bias"):
            tensor = getattr(layer, part)
            row = rows[f"{prefix}.{part}"]
            assert row.grad_norm == float(torch.linalg.vector_norm(tensor.grad))  # torch, the oracle
            assert row.weight_norm == float(torch.linalg.vector_norm(tensor.detach()))

    client.show_flow(False)
    until(lambda: not agent.server.wants_flow(), "the agent to hear the client no longer shows it")
    _passes(agent, 1)
    assert len(calls) == 2 and _finished(heard)[-1].flow == ()


def test_a_pass_that_paused_has_its_flow_for_the_client_that_saw_it(served):
    agent, client, calls, heard = served
    agent.session.submit(parse("break pass 1"))
    errors: list[BaseException] = []

    def script() -> None:
        try:
            _passes(agent, 3)
        except BaseException as exc:  # noqa: BLE001 - said by the test's thread
            errors.append(exc)

    worker = threading.Thread(target=script, daemon=True)
    worker.start()
    until(lambda: any(isinstance(e, ev.Paused) for e in heard), "the pause in pass 1")
    agent.session.submit(parse("continue"))
    worker.join(WAIT)
    assert not worker.is_alive() and errors == []
    ended = _finished(heard)
    assert [bool(e.flow) for e in ended] == [False, True, False]  # the paused pass only
    assert len(calls) == 1


def test_a_client_that_goes_takes_its_wish_with_it(served):
    agent, client, calls, heard = served
    client.show_flow(True)
    until(agent.server.wants_flow, "the agent to hear the client shows the flow")
    client.close()
    until(lambda: not agent.server.attached.is_set(), "the client gone")
    assert not agent.server.wants_flow()  # the next client says what it shows
