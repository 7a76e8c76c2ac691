"""The planned posthook's hot path, by counts: it reads the quit flag rather than calling the
session, measures what arrived only where no single producer's statistics give it, and a short
pass sends its rows as one NodesRan batch (a long one, reporting progress, as they run)."""

from __future__ import annotations

import pytest
import torch

from gradtui.engine.hooks import planned
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import count_calls

pytestmark = pytest.mark.timeout(60)

LINKS = 150
"""More hooked nodes than READ_EVERY (64): main's posthook flushed a batch every 64."""


def _chain() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(100, requires_grad=True)
    y = x
    for i in range(LINKS):
        y = y * (1.0 + i / 1000)
    return x, y.pow(2).sum()


def _run(build) -> tuple[list[ev.Event], torch.Tensor]:
    """One pass in `continue` with `break nan`, the events as a batch-taking listener gets them."""
    events: list[ev.Event] = []
    session = Session(None, provenance=False)
    session.add_listener(events.append, batches=True)
    session.run_on()
    session.submit(parse("break nan"))
    with session:
        leaf, loss = build()
        loss.backward()
    return events, leaf


def test_a_short_pass_is_one_batch_with_every_node():
    events, _ = _run(_chain)
    batches = [e for e in events if isinstance(e, ev.NodesRan)]
    (finished,) = [e for e in events if isinstance(e, ev.PassFinished)]
    assert len(batches) == 1 and finished.done == finished.total


def test_a_long_pass_sends_its_rows_with_its_progress(monkeypatch):
    """A pass that reports progress at every node (as a long one does every PROGRESS_INTERVAL)
    flushes every READ_EVERY hooked nodes, so a watcher sees the rows that ran."""
    monkeypatch.setattr(planned, "PROGRESS_INTERVAL", 0.0)
    events, _ = _run(_chain)
    batches = [e for e in events if isinstance(e, ev.NodesRan)]
    assert len(batches) >= LINKS // planned.READ_EVERY
    assert sum(b.count for b in batches) >= LINKS


def test_the_posthook_reads_the_quit_flag_not_the_session(monkeypatch):
    calls = count_calls(monkeypatch, Session, "quitting_now")
    events, leaf = _run(_chain)
    assert not [e for e in events if isinstance(e, ev.Paused)]
    assert calls[0] == 0


def test_one_gradient_from_several_producers_is_measured_inline(monkeypatch):
    """`y` feeds two nodes: its MulBackward0 gets their sum, measured in its own hook without
    `measured` (several gradients in only), and equal to what torch gives."""
    calls = count_calls(monkeypatch, planned, "measured")
    seen: dict[str, torch.Tensor] = {}

    def build():
        x = torch.randn(300, requires_grad=True)
        y = x * 3.0
        y.register_hook(lambda g: seen.setdefault("y", g.detach().clone()))
        return x, (y.sin() + y.cos()).sum()

    events, _ = _run(build)
    assert calls[0] == 0
    ran = [r for e in events if isinstance(e, ev.NodesRan) for r in e.ran]
    (mul,) = [r for r in ran if r.node == _node_named(events, "MulBackward0")]
    assert mul.grad_outputs[0].norm == torch.linalg.vector_norm(seen["y"]).item()


def _node_named(events: list[ev.Event], name: str) -> int:
    (started,) = [e for e in events if isinstance(e, ev.PassStarted)]
    (node,) = [i for i, data in started.graph.nodes(data=True) if data["info"].name == name]
    return node
