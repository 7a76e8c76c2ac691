"""The pass-through path's shortcuts give what the long way would: reused statistics of views
equal torch's own, the collector and the provenance mode come back as they were."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn
from torch.overrides import _get_current_function_mode_stack

from gradtui.engine.provenance.forward import Provenance
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import graph_nodes

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("full", [True, False])
def test_outgoing_stats_of_every_node_match_torch(full):
    """Views, transposes and pass-throughs reuse their incoming statistics: check all of them."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x = torch.randn(3, 5, 16, requires_grad=True)
    events: list[ev.Event] = []
    session = Session(events.append, full_stats=full)
    session.add_listener(lambda e: isinstance(e, ev.Paused) and session.submit(parse("continue")))
    with session:
        loss = layer(x).pow(2).mean()
        seen: dict[str, list] = {}
        for node in graph_nodes(loss.grad_fn):  # the user's own hooks see what gradtui's see
            node.register_hook(lambda gi, go, name=id(node): seen.setdefault(name, []).append(gi))  # noqa: B008 - the default binds this node's id when the hook is made
        live = graph_nodes(loss.grad_fn)
        loss.backward()
    (started,) = [e for e in events if isinstance(e, ev.PassStarted)]
    ran = {e.node: e for e in events if isinstance(e, ev.NodeRan)}
    assert len(ran) == started.graph.number_of_nodes() == len(live)
    # Node by node, slot by slot: what gradtui recorded as sent is what torch sent there.
    compared = 0
    for i, node in enumerate(live):  # the capture numbers nodes in this order
        assert started.graph.nodes[i]["info"].name == node.name().removeprefix("torch::autograd::")
        (sent,) = seen[id(node)]
        recorded = ran[i].grad_inputs
        assert len(recorded) == len(sent), node.name()
        for stats, grad in zip(recorded, sent):
            assert (stats is None) == (grad is None), node.name()
            if grad is None:
                continue
            where = f"#{i} {node.name()}"
            assert stats.shape == tuple(grad.shape), where
            assert stats.norm == pytest.approx(float(torch.linalg.vector_norm(grad.double())), rel=1e-5), where
            if full:
                assert (stats.min, stats.max) == (float(grad.min()), float(grad.max())), where
                scale = max(abs(stats.min), abs(stats.max))  # a float32 sum's rounding is relative to this
                assert stats.mean == pytest.approx(float(grad.double().mean()), rel=1e-5, abs=1e-5 * scale), where
            else:
                assert stats.min is None or stats.numel <= 64, where
            compared += 1
    assert compared > 50


def test_view_stats_are_exactly_the_incoming_ones_reshaped():
    x = torch.randn(20, 30, requires_grad=True)
    events: list[ev.Event] = []
    session = Session(events.append)
    session.detach()
    with session:
        y = (x * 2).t()  # TBackward0 sends back the very elements it receives
        (y.exp()).sum().backward()
    ran = {e.node: e for e in events if isinstance(e, ev.NodeRan)}
    graph = next(e for e in events if isinstance(e, ev.PassStarted)).graph
    (t_node,) = [n for n, info in graph.nodes(data="info") if info.name in ("TransposeBackward0", "TBackward0")]
    incoming, outgoing = ran[t_node].grad_outputs[0], ran[t_node].grad_inputs[0]
    assert outgoing.shape == (20, 30) and incoming.shape == (30, 20)
    assert (outgoing.norm, outgoing.min, outgoing.max, outgoing.mean) == (
        incoming.norm,
        incoming.min,
        incoming.max,
        incoming.mean,
    )
    want = (x * 2).detach().exp().t().t()
    assert outgoing.max == pytest.approx(float(want.max())) and outgoing.norm == pytest.approx(float(want.norm()))


def test_the_collector_is_off_during_a_pass_on_during_a_pause_and_back_after():
    states = []
    x = torch.ones(3, requires_grad=True)
    session = Session(
        lambda e: isinstance(e, (ev.NodeRan, ev.Paused)) and states.append((type(e).__name__, gc.isenabled()))
    )
    session.add_listener(lambda e: isinstance(e, ev.Paused) and session.submit(parse("continue")))
    assert gc.isenabled()
    with session:
        (x * 2).sum().backward()
    assert states[0] == ("Paused", True)
    assert {s for name, s in states if name == "NodeRan"} == {False}
    assert gc.isenabled()


def test_provenance_is_off_the_mode_stack_for_gradtuis_own_work_and_back_after():
    seen = []
    x = torch.ones(3, requires_grad=True)
    session = Session(
        lambda e: (
            isinstance(e, ev.PassFinished)
            and seen.append(any(isinstance(m, Provenance) for m in _get_current_function_mode_stack()))
        )
    )
    session.detach()
    with session:
        before = list(_get_current_function_mode_stack())
        assert any(isinstance(m, Provenance) for m in before)
        (x * 2).sum().backward()
        assert list(_get_current_function_mode_stack()) == before
        y = x * 5
    assert seen == [False]
    assert "gradtui.source" in y.grad_fn.metadata  # recording went on after the pass


def test_what_arrives_at_a_node_and_what_it_sends_on_have_one_name_from_hook_to_recording():
    from gradtui.engine.stats.passrecord import PassRecord, Ran
    from gradtui.record import schema

    names = ("grad_outputs", "grad_inputs")  # torch's: a node's grad_outputs arrive, its grad_inputs are sent on
    assert Ran._fields[2:] == names
    assert ev.NodeRan.__struct_fields__[-2:] == names
    assert "grad_outputs" in PassRecord.__struct_fields__
    assert (schema.GRAD_OUTPUTS_DIR, schema.GRAD_INPUTS_DIR) == (0, 1)  # the recording's `dir`, as ever
