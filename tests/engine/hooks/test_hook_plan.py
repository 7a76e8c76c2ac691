"""The hook plan (gradtui.engine.hooks.plan, .planned): a CPU pass in `continue` hooks only the nodes
that can change values; the others' statistics are derived; `nan` stops right after the culprit,
editable; a user hook's NaN is named where it appeared; gradients stay torch's."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from gradtui.engine.hooks import planned
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import (
    PLAN_KINDS,
    PLAN_SIZES,
    compiled_hooked,
    fed_session,
    nan_case,
    of,
    plain_pass,
    plan_leaf,
    run_pass,
    same,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))


def test_hook_calls_per_node_in_continue_with_a_nan_watch(monkeypatch):
    from bench import transformer

    calls = [0]
    for name in ("_prehook", "_posthook"):
        original = getattr(planned.PlannedPass, name)

        def counted(self, *args, _original=original):
            calls[0] += 1
            return _original(self, *args)

        monkeypatch.setattr(planned.PlannedPass, name, counted)
    compiled = compiled_hooked(monkeypatch)  # each compiled posthook is called once, where they are built
    model = transformer(2, 64)
    data = torch.randn(8, 32, 64)

    def build():
        return list(model.parameters()), model(data).pow(2).mean()

    events, params = run_pass(build)
    nodes = of(events, ev.PassStarted)[0].graph.number_of_nodes()
    assert 0.05 <= (calls[0] + sum(compiled)) / nodes <= 0.3
    assert len({e.node for e in of(events, ev.NodeRan)}) == nodes  # every node still reported
    grads = [p.grad.clone() for p in params]
    model.zero_grad(set_to_none=True)
    plain_pass(build)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("size", PLAN_SIZES)
@pytest.mark.parametrize("kind", PLAN_KINDS)
def test_derived_statistics_equal_torchs(kind, size, full):
    op, name = PLAN_KINDS[kind]

    def build():
        x = plan_leaf(PLAN_SIZES[size])
        z = op(x * 1.5)
        w = torch.linspace(-2, 3, z.numel()).reshape(z.shape)
        return [x], (z * w).sum()

    planned_run, _ = run_pass(build, full=full)
    every_node, _ = run_pass(build, full=full, check_every=1)  # every node hooked, read by torch
    graph = of(planned_run, ev.PassStarted)[0].graph
    assert name in {graph.nodes[i]["info"].name for i in range(len(graph))}
    ours = {e.node: e for e in of(planned_run, ev.NodeRan)}
    theirs = {e.node: e for e in of(every_node, ev.NodeRan)}
    assert ours.keys() == theirs.keys()
    for node, want in theirs.items():
        got = ours[node]
        for a, b in zip(got.grad_outputs + got.grad_inputs, want.grad_outputs + want.grad_inputs, strict=True):
            assert (a is None) == (b is None)
            if a is None:
                continue
            assert (a.shape, a.dtype, a.nonfinite) == (b.shape, b.dtype, b.nonfinite), graph.nodes[node]["info"].name
            for field in ("norm", "min", "max", "mean"):
                x, y = getattr(a, field), getattr(b, field)
                assert (x is None) == (y is None) and (x is None or math.isclose(x, y, rel_tol=2e-6, abs_tol=1e-9))
            assert (a.values is None) == (b.values is None)
            if a.values is not None:
                assert all(math.isclose(u, v, rel_tol=1e-9, abs_tol=0) for u, v in zip(a.values, b.values, strict=True))


@pytest.mark.parametrize("where", ["before", "after", "at"])
@pytest.mark.parametrize("kind", PLAN_KINDS)
def test_a_nan_next_to_a_derived_node_is_named_where_it_appeared(kind, where):
    build = nan_case(kind, where)
    events, leaves = run_pass(build, ["zero", "continue"])
    graph = of(events, ev.PassStarted)[0].graph
    (hit,) = of(events, ev.BreakpointHit)
    pause = of(events, ev.Paused)[0]
    assert hit.node == pause.node
    if where == "at":  # the user hook made it, before the node its tensor feeds: editable there
        assert graph.nodes[pause.node]["info"].name == PLAN_KINDS[kind][1] and pause.phase == "before"
    else:
        assert graph.nodes[pause.node]["info"].name == "SqrtBackward0" and pause.phase == "after"
    (zeroed,) = [r for r in of(events, ev.CommandResult) if r.command == "zero"]
    assert zeroed.ok, zeroed.text
    ran = of(events, ev.NodeRan)
    culprit = next((i for i, e in enumerate(ran) if e.node == pause.node), len(ran))
    assert not any(s is not None and s.nonfinite for e in ran[:culprit] for s in e.grad_outputs + e.grad_inputs)
    assert not leaves[0].grad.isnan().any()  # the edit went on
    events, leaves = run_pass(build, ["continue"])
    assert same(leaves[0].grad, plain_pass(build)[0].grad)


@pytest.mark.parametrize("where", ["before", "at"])
def test_a_nan_at_a_leaf_accumulator(where):
    def build():
        x = plan_leaf((4, 3))
        if where == "at":
            x.register_hook(lambda g: g * math.nan)
            return [x], (x * 2.0).sum()
        return [x], (x.sqrt() * (x.detach() != 0)).sum()

    events, leaves = run_pass(build)
    graph = of(events, ev.PassStarted)[0].graph
    pause = of(events, ev.Paused)[0]
    assert graph.nodes[pause.node]["info"].name == ("AccumulateGrad" if where == "at" else "SqrtBackward0")
    assert same(leaves[0].grad, plain_pass(build)[0].grad)


def test_stepping_from_a_planned_pause_hooks_the_rest():
    build = nan_case("view", "before", size="big")
    events, leaves = run_pass(build, ["step", "step", "step"])
    pauses = of(events, ev.Paused)
    assert len(pauses) == 4 and [p.reason for p in pauses[1:]] == ["step"] * 3
    assert same(leaves[0].grad, plain_pass(build)[0].grad)


def test_a_raising_tensor_hook_marks_the_node_it_ran_at():
    def build():
        x = torch.tensor([1.0], requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: (_ for _ in ()).throw(ValueError("bad hook")))
        return [x], y.sum()

    for watch in (True, False):
        finished, graph = _failed_pass(build, watch)
        assert finished.error and graph.nodes[finished.node]["info"].name == "MulBackward0"


def _failed_pass(build, watch: bool = True):
    """One pass of `build` under a session in `continue` (with a `nan` watch or none) whose
    backward raises ValueError: its PassFinished and its graph."""
    events = []
    session = Session(events.append, provenance=False)
    session.run_on()
    if watch:
        session.submit(parse("break nan"))
    with session, pytest.raises(ValueError):
        _, loss = build()
        loss.backward()
    (finished,) = of(events, ev.PassFinished)
    return finished, of(events, ev.PassStarted)[0].graph


def test_a_detached_session_never_pauses_in_a_planned_pass():
    """Detached (headless once its commands ran out) means never pause again, `nan` armed or not:
    the pass runs to its end and reports the NaN in its statistics."""
    import threading

    events: list[ev.Event] = []
    session = Session(events.append, provenance=False)
    session.submit(parse("break nan"))
    session.run_on()
    session.detach()
    failures: list[BaseException] = []

    def one_pass():
        try:
            with session:
                x = torch.tensor([0.0, 1.0], requires_grad=True)
                x.sqrt().sum().backward()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    thread = threading.Thread(target=one_pass, name="detached-pass", daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():  # paused with no one to resume it: end it, then fail
        session.quit()
        thread.join(30)
        pytest.fail("a detached session paused")
    assert not failures
    assert not of(events, ev.Paused) and of(events, ev.PassFinished)[0].error is None
    assert any(s is not None and s.nonfinite for e in of(events, ev.NodeRan) for s in e.grad_inputs)


def test_a_pass_that_steps_then_continues_runs_the_rest_on_the_plan(monkeypatch):
    """`gradtui script.py` pauses at the first node; after `continue` the rest of that pass runs on
    the hook plan (the every-node hooks call the plan's), with the same statistics and gradients."""
    from bench import transformer

    calls = [0]
    original = planned.PlannedPass.posthook

    def counted(self, node, *args):  # the every-node hooks call it at every node: count the plan's nodes
        calls[0] += self._plan.hooks[node] != planned.NONE
        return original(self, node, *args)

    monkeypatch.setattr(planned.PlannedPass, "posthook", counted)
    model = transformer(2, 64)
    data = torch.randn(8, 32, 64)

    def one(check_every):
        events: list[ev.Event] = []
        session = Session(events.append, provenance=False, check_every=check_every)  # starts stepping
        session.add_listener(lambda e: session.submit(parse("continue")) if isinstance(e, ev.Paused) else None)
        session.submit(parse("break nan"))
        with session:
            model(data).pow(2).mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return events, grads

    handed, grads = one(None)
    hooked_calls, calls[0] = calls[0], 0
    every, every_grads = one(1)  # an explicit read rate keeps the every-node hooks
    assert calls[0] == 0
    nodes = of(handed, ev.PassStarted)[0].graph.number_of_nodes()
    assert 0 < hooked_calls <= 0.3 * nodes
    ran = of(handed, ev.NodeRan)
    assert sorted(e.order for e in ran) == list(range(1, nodes + 1))  # each node once, in order
    assert len(of(handed, ev.Paused)) == 1 and of(handed, ev.PassFinished)[0].error is None
    theirs = {e.node: e for e in of(every, ev.NodeRan)}
    for event in ran:
        want = theirs[event.node]
        for a, b in zip(event.grad_outputs + event.grad_inputs, want.grad_outputs + want.grad_inputs, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert (a.shape, a.nonfinite) == (b.shape, b.nonfinite)
                assert math.isclose(a.norm, b.norm, rel_tol=2e-6, abs_tol=1e-9)
    assert all(torch.equal(g, h) for g, h in zip(grads, every_grads))
    plain_grads = plain_pass(lambda: (list(model.parameters()), model(data).pow(2).mean()))
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, plain_grads))


def test_stepping_again_after_a_hand_over_steps_node_by_node():
    """Step at the first node, continue (the plan takes over), the `nan` pause right after the culprit
    (an edit there replaces what it sent on), then step: each node after it pauses again, in the
    engine's order, and the edit reaches the leaf (no NaN left in its gradient)."""
    build = nan_case("view", "before", size="big")
    session, events = fed_session(
        [["continue"], ["zero", "step"], ["step"], ["step"]]
    )  # starts stepping, a `nan` watch armed
    with session:
        leaves, loss = build()
        loss.backward()
    assert [r.ok for r in of(events, ev.CommandResult) if r.command == "zero"] == [True]
    assert leaves[0].grad is not None and not leaves[0].grad.isnan().any()  # the culprit's NaN was zeroed
    pauses = of(events, ev.Paused)
    assert pauses[0].reason == "step" and "non-finite" in pauses[1].reason and pauses[1].phase == "after"
    assert [p.reason for p in pauses[2:]] == ["step"] * 3
    assert len({p.node for p in pauses}) == len(pauses)  # no node paused at twice
    orders = [e.order for e in of(events, ev.NodeRan)]
    assert (
        orders == list(range(1, len(orders) + 1))
        and len(orders) == of(events, ev.PassStarted)[0].graph.number_of_nodes()
    )


def test_a_raising_hook_after_derived_nodes_marks_the_node_it_ran_at():
    """The derived nodes are marked run only when someone looks (a failure): a tensor hook raising
    after a transpose, a clone and a view ran (derived, never hooked) is placed at the node it ran before,
    not at a derived node the engine had already run."""

    def build():
        x = torch.rand(2, 2, requires_grad=True)
        a = x.exp()
        a.register_hook(lambda g: (_ for _ in ()).throw(ValueError("bad hook")))
        return [x], (a.t().reshape(4) * 2.0).sum()

    finished, graph = _failed_pass(build)
    names = {graph.nodes[n]["info"].name for n in graph.nodes}
    assert {"TBackward0", "CloneBackward0", "UnsafeViewBackward0"} <= names
    assert finished.error and graph.nodes[finished.node]["info"].name == "ExpBackward0"


def test_a_root_another_node_also_sends_to_has_what_arrived_measured():
    """A root that a node of the pass also sends to receives the root's own gradient plus that
    node's: what arrived there is measured in its hook, not taken from the node that sends to it."""
    events = []
    session = Session(events.append, provenance=False)
    session.run_on()
    session.submit(parse("break nan"))
    with session:
        x = torch.rand(3, requires_grad=True)
        viewed = x.exp().view(3)
        total = viewed.sum()
        torch.autograd.backward([total, viewed], [torch.tensor(1.0), torch.full((3,), 2.0)])
    graph = of(events, ev.PassStarted)[0].graph
    (view,) = [n for n in graph.nodes if graph.nodes[n]["info"].name == "ViewBackward0"]
    arrived = [e for e in events if isinstance(e, ev.NodeRan) and e.node == view][0].grad_outputs[0]
    assert arrived.values == (3.0, 3.0, 3.0)  # torch: 2 (the root's) + 1 (from the sum), each
