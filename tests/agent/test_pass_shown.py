"""Nothing a client does not show is made for it: a paced client (one that says `Drawn` once it has
drawn a pass, as the UI does) is sent a pass described (its graph, its node events, its leaves'
statistics) only if the pass starts after it has drawn the last one described; the agent (as
gradtui.agent.build assembles it for the UI, `break nan` armed) then runs every other pass on a lazy
capture, the walk only. A pause in such a pass sends it again, described, with its node events so
far. Counted: the capture's descriptions (its one function that reads a pass's metadata)."""

from __future__ import annotations

import os
import socket
import threading

import pytest
import torch
from torch import nn

import gradtui.engine.capture.graph as graph_module
from gradtui.agent.build import Agent, Transport, build_agent
from gradtui.engine.hooks.derived import DerivedSteps
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.lazygraph import node_infos
from gradtui.protocol.options import RunOptions
from gradtui.ui.state import UIState
from tests.helpers import FrameClient, until

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0
"""Seconds any wait of this test may take."""


@pytest.fixture
def served(monkeypatch):
    """(agent, client, descriptions made, live reads of derived nodes): the agent the UI talks to,
    `break nan` armed, running on (a user who pressed `c`), a client attached; the capture's
    descriptions counted, and per pass the reads that make its node events (a hooked node's
    derived nodes' shapes and saved values, read from the live nodes)."""
    described: list[int] = []
    real = graph_module._describe

    def counted(infos, *args, **kwargs):
        described.append(len(infos))
        return real(infos, *args, **kwargs)

    monkeypatch.setattr(graph_module, "_describe", counted)
    expanded: dict[int, int] = {}
    real_steps = DerivedSteps.__call__

    def read(self, node):
        steps = real_steps(self, node)
        index = agent.session.passes - 1
        expanded[index] = expanded.get(index, 0) + 1
        return steps

    monkeypatch.setattr(DerivedSteps, "__call__", read)
    agent = build_agent(RunOptions(os.path.abspath("train.py"), break_on=["nan"]), Transport("token"), lambda: None)
    assert agent.server is not None
    ours, theirs = socket.socketpair()
    agent.server.start()
    agent.server.serve_connection(ours)
    client = FrameClient(theirs, "token")
    until(agent.server.attached.is_set, "the client attached")
    yield agent, client, described, expanded
    agent.server.close("test done", timeout=2.0)
    client.close()
    agent.outputs.close()


class Gated(nn.Module):
    """Linear, tanh `h`, plus sqrt(h² · gate), linear: a 0 in the gate keeps the forward finite and
    makes the first non-finite gradient at SqrtBackward0 (1 / 2√0), in the middle of the pass."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 5)
        self.second = nn.Linear(5, 1)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.first(x))
        return self.second(h + torch.sqrt(h.pow(2) * gate))


def _run(agent: Agent, model: Gated, passes: range, bad: int | None = None) -> None:
    """Training-like passes under the agent's session; pass `bad` with a 0 in its gate."""
    torch.manual_seed(0)
    batch = torch.randn(4, 6)
    for i in passes:
        gate = torch.ones(4, 5)
        if i == bad:
            gate[1, 2] = 0.0
        model.zero_grad(set_to_none=True)
        loss = model(batch, gate).pow(2).mean()
        agent.session.install()
        try:
            loss.backward()
        finally:
            agent.session.uninstall()


def _of(events: list[ev.Event], kind: type, index: int) -> list:
    return [e for e in events if isinstance(e, kind) and e.pass_index == index]


def _fold(events: list[ev.Event]) -> UIState:
    """The UI's state made from `events` (what the UI draws, no Textual)."""
    state = UIState("train.py")
    for event in events:
        state.apply(event)
    return state


def _pass_ended(client: FrameClient, index: int) -> None:
    until(lambda: _of(client.seen(), ev.PassFinished, index), f"pass {index}'s end at the client")


def test_a_pass_the_paced_client_will_not_show_is_not_described(served):
    agent, client, described, expanded = served
    torch.manual_seed(1)
    model = Gated()
    agent.session.run_on()
    _run(agent, model, range(1))  # a client not yet paced: described, as every pass was
    _pass_ended(client, 0)
    assert len(described) == 1
    nodes = len(described) and described[0]

    client.drawn(0)  # the UI drew pass 0: the next pass is described, and then none until it says so again
    until(lambda: agent.server.paced, "the agent to hear the client drew pass 0")
    _run(agent, model, range(1, 5))
    _pass_ended(client, 4)
    assert len(described) == 2  # pass 1 only: passes 2-4 ran on the walk alone
    assert agent.server.undescribed == 3
    # their node batches were let go unmade: no derived node of theirs was read
    assert expanded.get(0) and expanded.get(0) == expanded.get(1)
    assert [expanded.get(index, 0) for index in (2, 3, 4)] == [0, 0, 0]

    # What the UI makes of it: the last pass drawn stays on screen, the header says which ran since
    ui = _fold(client.seen())
    assert ui.view is not None and ui.view.index == 1 and ui.view.total == nodes and ui.view.finished
    assert ui.passes == 5 and ui.pass_text().endswith("latest 4 not drawn")
    assert [(s.index, s.drawn, s.finished, s.nodes) for s in ui.summaries] == [
        (0, True, True, nodes),
        (1, True, True, nodes),
        (2, False, True, nodes),
        (3, False, True, nodes),
        (4, False, True, nodes),
    ]
    flow, _ = ui.flow_to_show()
    assert flow is not None and flow.index == 1  # `w`: the last flow measured, not an undrawn pass's nothing

    client.drawn(1)
    until(lambda: agent.server.describes_next(), "the agent to hear the client drew pass 1")
    _run(agent, model, range(5, 6))
    _pass_ended(client, 5)
    assert len(described) == 3
    ui = _fold(client.seen())
    assert ui.view is not None and ui.view.index == 5 and ui.kept.undrawn is None
    assert "not drawn" not in ui.pass_text()

    # A client that shows every pass's flow (its passes view) gets it from an undescribed pass too,
    # the leaves named from the frame's scopes at the pass's end (its lazy capture named none)
    client.show_flow(True)
    until(agent.server.wants_flow, "the agent to hear the client shows the flow")
    _run(agent, model, range(6, 7))
    _pass_ended(client, 6)
    assert len(described) == 3 and agent.server.undescribed == 4
    [started] = _of(client.seen(), ev.PassStarted, 6)
    [finished] = _of(client.seen(), ev.PassFinished, 6)
    assert not started.described and len(finished.leaf_grads) == 4
    rows = {row.name: row for row in finished.flow}
    assert sorted(rows) == ["first.bias", "first.weight", "second.bias", "second.weight"]
    for name, row in rows.items():
        tensor = model.get_parameter(name)
        assert row.grad_norm == float(torch.linalg.vector_norm(tensor.grad))  # torch, the oracle

    seen = client.seen()
    for index in range(6):
        [started] = _of(seen, ev.PassStarted, index)
        [finished] = _of(seen, ev.PassFinished, index)
        ran = _of(seen, ev.NodeRan, index)
        if index in (0, 1, 5):
            assert started.described and started.graph.number_of_nodes() == nodes
            assert sorted(e.node for e in ran) == list(range(nodes))  # every node's event came
            assert len(finished.leaf_grads) == 4  # the leaves' gradients, which the UI shows
        else:  # what the client shows of it: its index, loss and size, its end
            assert not started.described and started.nodes == nodes and started.graph.number_of_nodes() == 0
            assert started.losses == _of(seen, ev.PassStarted, 0)[0].losses  # the same batch, the same loss
            assert ran == [] and finished.leaf_grads == () and finished.flow == ()
            assert finished.done == finished.total == nodes


def test_a_pause_in_an_undescribed_pass_sends_it_described_with_its_node_events(served):
    agent, client, described, _ = served
    torch.manual_seed(1)
    model = Gated()
    agent.session.run_on()
    _run(agent, model, range(1))
    _pass_ended(client, 0)
    client.drawn(0)
    until(lambda: agent.server.paced, "the agent to hear the client drew pass 0")
    errors: list[BaseException] = []

    def script() -> None:
        try:
            _run(agent, model, range(1, 4), bad=2)
        except BaseException as exc:  # noqa: BLE001 - said by the test's thread
            errors.append(exc)

    worker = threading.Thread(target=script, daemon=True)
    worker.start()
    until(lambda: _of(client.seen(), ev.Paused, 2), "the nan pause in pass 2")
    seen = client.seen()
    stub, again = _of(seen, ev.PassStarted, 2)
    assert not stub.described and again.described  # sent without its graph, then with it at the pause
    [paused] = _of(seen, ev.Paused, 2)
    after = seen[seen.index(again) :]
    ran = _of(after, ev.NodeRan, 2)
    assert after.index(paused) > max(after.index(e) for e in ran)  # the node events so far, before the pause

    graph = again.graph
    infos = node_infos(graph)
    reference = node_infos(_of(seen, ev.PassStarted, 1)[0].graph)  # pass 1, described as it started
    assert [(i.name, i.kind, i.next, i.labels, i.param) for i in infos] == [
        (i.name, i.kind, i.next, i.labels, i.param) for i in reference
    ]
    # Saved values, read at the pause: a node not run yet shows its own as a pass described as it
    # starts does; one that ran has let go of its saved tensors (the engine frees them as it runs
    # it): "(freed)", its saved scalars as they were.
    done = {e.node for e in ran}
    for node, (info, ref) in enumerate(zip(infos, reference)):
        if node not in done:
            assert info.saved == ref.saved, node
        else:
            assert len(info.saved) == len(ref.saved), node
            for now, then in zip(info.saved, ref.saved):
                assert now == then or now == then.split(" ")[0] + " (freed)", (node, now, then)
    assert any(entry.endswith("(freed)") for node in done for entry in infos[node].saved)
    assert infos[paused.node].name == paused.name == "SqrtBackward0"
    assert infos[paused.node].saved  # described: its saved values read at the pause (a walk reads none)
    assert {i.param for i in infos if i.kind == "accumulate"} == {
        "first.weight",
        "first.bias",
        "second.weight",
        "second.bias",
    }
    assert {e.node for e in ran} <= set(range(len(infos))) and len(ran) == paused.done
    # the events held and sent at the pause are the engine's: the gate's gradient, non-finite
    gate_node = paused.node
    assert any(e.node == gate_node for e in ran) or paused.phase == "after"
    assert not all(s is None or s.nonfinite == 0 for s in paused.grads)

    ui = _fold(seen)  # the UI at the pause: the paused pass, its graph, its nodes so far
    assert ui.status == "paused" and ui.view is not None and ui.view.index == 2 and ui.view.total == len(infos)
    assert ui.current == paused.node and "SqrtBackward0" in ui.status_text()
    assert sorted(ui.view.ran) == sorted(done) and ui.kept.undrawn is None
    assert [(s.index, s.drawn) for s in ui.summaries] == [(0, True), (1, True), (2, True)]

    agent.session.submit(parse("continue"))
    worker.join(WAIT)
    assert not worker.is_alive() and errors == []
    _pass_ended(client, 3)
    [finished] = _of(client.seen(), ev.PassFinished, 2)
    assert len(finished.leaf_grads) == 4 and len(finished.flow) == 4  # a paused pass is shown in full
    # the gradient the pause's pass left, as torch holds it after the script: pass 3's, described or not
    assert len(described) == 3  # passes 0, 1 and the paused 2 (at its pause); pass 3 was not
