"""What a hand-over to the plan costs, by counts (the bench's 100k chain row): a pass that pauses at
its first node and is continued computes no graph-wide sole-receiver table for that one node, and
puts no prehook on the nodes after the hand-over (each hook is removed once, at the end); the
gradients are plain backward's."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.hooks import RemovableHandle

from gradtui.engine.capture import graph
from gradtui.engine.hooks import planned
from gradtui.engine.hooks.compiled import CompiledHooks
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import count_calls, fed_session

pytestmark = pytest.mark.timeout(60)

LINKS = 200


def _chain() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(100, requires_grad=True)  # big enough to be measured, not listed
    y = x
    for i in range(LINKS):
        y = y * (1.0 + i / 1000)
    return x, y.pow(2).sum()


def _paused_then_continued(check_every: int | None = None) -> tuple[list[ev.Event], torch.Tensor]:
    """`gradtui script.py`'s first pass: paused at its first node, then `continue` with `break nan`."""
    events: list[ev.Event] = []
    session = Session(events.append, provenance=False, check_every=check_every)  # starts stepping
    session.add_listener(lambda e: session.submit(parse("continue")) if isinstance(e, ev.Paused) else None)
    session.submit(parse("break nan"))
    with session:
        leaf, loss = _chain()
        loss.backward()
    assert len([e for e in events if isinstance(e, ev.Paused)]) == 1
    assert [e.error for e in events if isinstance(e, ev.PassFinished)] == [None]
    return events, leaf.grad


def _plain_grad() -> torch.Tensor:
    leaf, loss = _chain()
    loss.backward()
    return leaf.grad


def test_a_hand_over_reads_no_sole_receivers(monkeypatch):
    """The node paused at hands over after it runs: what its hooks would note for a sole receiver
    is cleared at the hand-over, so the whole graph's `sole_inputs` is not made for it (main: once,
    ~1 us a node on a 100,000-node chain). An every-node pass does make it (the count counts)."""
    made = [0]
    original = graph.Capture.sole_inputs.func

    def counted(self):
        made[0] += 1
        return original(self)

    monkeypatch.setattr(graph.Capture, "sole_inputs", property(counted))
    _, handed = _paused_then_continued()
    assert made[0] == 0
    _, every = _paused_then_continued(check_every=1)  # an explicit read rate keeps the every-node hooks
    assert made[0] > 0
    assert torch.equal(handed, _plain_grad()) and torch.equal(every, handed)


def test_a_hand_over_puts_no_prehook_on_the_nodes_after_it(monkeypatch):
    """A stepping pass puts a prehook on its roots and, as each node runs, on the nodes it sends
    to, with their posthooks; handed over after its first node, the rest of the chain gets none
    (main put a posthook on every node before the pass). Every hook is removed once, at the pass's end."""
    removed = count_calls(monkeypatch, RemovableHandle, "remove")
    asked = count_calls(monkeypatch, planned.PlannedPass, "prehook")
    events, grad = _paused_then_continued()
    nodes = next(e for e in events if isinstance(e, ev.PassStarted)).graph.number_of_nodes()
    assert asked[0] == 1  # the first node's receiver, whose prehook its posthook put on before the hand-over
    if CompiledHooks.available() is not None:
        assert removed[0] == 4  # a prehook and a posthook on the root and on its receiver (main: nodes + 2)
    else:  # the plan's Python posthooks besides: one on each node it hooks, at most
        assert 4 <= removed[0] <= nodes + 2
    assert torch.equal(grad, _plain_grad())


def test_a_node_the_plan_checks_before_it_runs_gets_its_prehook_after_a_hand_over():
    """A user hook on a tensor the chain makes turns its gradient NaN: the node that tensor feeds
    is checked before it runs on the plan, so after the hand-over the every-node hooks put its
    prehook on (`delegate_prehooks`); the `nan` pause is there, before it, and a `zero` there reaches
    the leaf."""
    session, events = fed_session([["continue"], ["zero", "continue"]])  # starts stepping, a `nan` watch armed
    with session:
        x = torch.rand(100, requires_grad=True)
        z = x
        for i in range(LINKS):
            z = z * 1.001  # exp's input stays small: a zeroed gradient stays 0 through it
            if i == LINKS // 2:
                z = z.exp()
                z.register_hook(lambda g: g * math.nan)
        z.sum().backward()
    pauses = [e for e in events if isinstance(e, ev.Paused)]
    assert [p.phase for p in pauses] == ["before", "before"] and pauses[1].reason.endswith(": nan")
    graph = next(e for e in events if isinstance(e, ev.PassStarted)).graph
    assert graph.nodes[pauses[1].node]["info"].name == "ExpBackward0"  # the node the hooked tensor feeds
    assert [r.ok for r in events if isinstance(r, ev.CommandResult) and r.command == "zero"] == [True]
    assert x.grad is not None and not x.grad.isnan().any() and not x.grad.any()
