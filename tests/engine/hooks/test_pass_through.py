"""Pass-through nodes on the hook plan (gradtui.engine.hooks.plan, SIGNS): an add, sub or rsub with alpha 1
and no broadcast, cast or move, a neg, an alias send on what arrived (or its negation) and are
derived, not hooked; their statistics equal a hooked node's bit for bit; `nan` still names the
node that made a non-finite value; a broadcast, scaled or cast operand keeps its node hooked."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from gradtui.engine.hooks import plan, planned
from gradtui.engine.hooks.compiled import CompiledHooks
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import PLAN_KINDS, PLAN_SIZES, encoder_case, of, plain_pass, plan_leaf, run_pass, same, same_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

PASS_THROUGH = ["add", "add-detached", "sub", "rsub", "neg"]


def hooked_names(monkeypatch, build, **options):
    """Run `build` on the plan; the names of the nodes a planned posthook ran at, and the events."""
    seen: list[int] = []
    original = planned.PlannedPass._posthook

    def counted(self, node, *args):
        seen.append(node)
        return original(self, node, *args)

    drain = CompiledHooks.drain

    def drained(self, ran, *args):  # the compiled posthooks' nodes, where they are built
        before = len(ran)
        drain(self, ran, *args)
        seen.extend(ran[before:])

    monkeypatch.setattr(planned.PlannedPass, "_posthook", counted)
    monkeypatch.setattr(CompiledHooks, "drain", drained)
    events, leaves = run_pass(build, **options)
    monkeypatch.setattr(planned.PlannedPass, "_posthook", original)
    monkeypatch.setattr(CompiledHooks, "drain", drain)
    graph = of(events, ev.PassStarted)[0].graph
    return sorted(graph.nodes[i]["info"].name for i in seen), events, leaves


def residual_block():
    torch.manual_seed(0)
    first, second, norm = nn.Linear(8, 16), nn.Linear(16, 8), nn.LayerNorm(8)
    x = torch.randn(4, 8, requires_grad=True)

    def build():
        y = x + second(torch.relu(first(x)))  # the residual add: passes through
        return [x, *first.parameters(), *second.parameters()], norm(y).pow(2).sum()

    return build


def test_a_residual_blocks_add_is_derived_not_hooked(monkeypatch):
    build = residual_block()
    names, events, leaves = hooked_names(monkeypatch, build)
    assert names == [
        "AccumulateGrad",
        "AddmmBackward0",
        "AddmmBackward0",
        "NativeLayerNormBackward0",
        "PowBackward0",
        "ReluBackward0",
        "SumBackward0",
    ]  # x's accumulator: two senders
    every = {e.node for e in of(events, ev.NodeRan)}
    assert len(every) == of(events, ev.PassStarted)[0].graph.number_of_nodes()  # each still reported
    monkeypatch.setattr(plan, "SIGNS", {})  # the plan before pass-through nodes were derived
    before, _, _ = hooked_names(monkeypatch, build)
    assert sorted(names + ["AddBackward0"]) == before
    want = plain_pass(build)
    assert all(same(a.grad, b.grad) for a, b in zip(leaves, want, strict=True))


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("size", PLAN_SIZES)
@pytest.mark.parametrize("kind", PASS_THROUGH)
def test_pass_through_statistics_equal_a_hooked_nodes_bit_for_bit(monkeypatch, kind, size, full):
    op, name = PLAN_KINDS[kind]

    def build():
        x = plan_leaf(PLAN_SIZES[size])
        z = op((x - 0.75) * 1.5)  # values of both signs
        w = torch.linspace(-2, 3, z.numel()).reshape(z.shape)
        return [x], (z * w).sum()

    names, derived, _ = hooked_names(monkeypatch, build, full=full)
    assert name not in names
    monkeypatch.setattr(plan, "SIGNS", {})
    names, hooked, _ = hooked_names(monkeypatch, build, full=full)
    assert name in names
    graph = of(derived, ev.PassStarted)[0].graph
    ours = {e.node: e for e in of(derived, ev.NodeRan)}
    theirs = {e.node: e for e in of(hooked, ev.NodeRan)}
    assert ours.keys() == theirs.keys() == set(graph.nodes)
    for node, want in theirs.items():
        got = ours[node]
        pairs = zip(got.grad_outputs + got.grad_inputs, want.grad_outputs + want.grad_inputs, strict=True)
        assert all(same_stats(a, b) for a, b in pairs), graph.nodes[node]["info"].name


def test_negative_is_exact_on_every_field():
    from gradtui.engine.stats.window import small_stats

    values = (0.0, -0.0, 1.5, -2.25, 1e-30, math.inf)
    stats, negated = (
        small_stats((6,), "float32", "cpu", values),
        small_stats((6,), "float32", "cpu", tuple(-v for v in values)),
    )
    assert same_stats(plan.negative(stats), negated)


@pytest.mark.parametrize("case", ["broadcast", "alpha", "cast", "scalar-broadcast"])
def test_an_add_that_changes_what_it_sends_stays_hooked(monkeypatch, case):
    def build():
        x = plan_leaf((4, 3))
        b = torch.linspace(-1, 1, 3).requires_grad_()
        match case:
            case "broadcast":  # b's gradient is summed over the rows by the engine
                z = x * 1.5 + b
            case "alpha":
                z = torch.add(x * 1.5, x * 0.5, alpha=2.0)
            case "cast":  # the float32 operand's gradient is cast down from float64
                z = x.double() * 1.5 - x
            case _:
                z = x * 1.5 + b.sum()
        return [x, b], (z * torch.linspace(-2, 3, z.numel()).reshape(z.shape)).sum()

    names, events, leaves = hooked_names(monkeypatch, build)
    assert {"AddBackward0", "SubBackward0"} & set(names)
    assert all(same(a.grad, b.grad) for a, b in zip(leaves, plain_pass(build), strict=True))


@pytest.mark.parametrize("case", ["clean", "overflow", "masked-inf", "masked-nan", "deep"])
def test_nan_names_the_culprit_an_every_node_pass_names(case):
    build = encoder_case(case)
    planned_run, leaves = run_pass(build, ["continue"])
    every_node, _ = run_pass(build, ["continue"], check_every=1)
    hits = [(h.node, h.phase) for h in of(planned_run, ev.Paused)]
    assert hits == [(h.node, h.phase) for h in of(every_node, ev.Paused)]
    assert (case in ("clean", "masked-inf")) == (not hits)  # a softmax of a masked -inf is finite
    assert all(same(a.grad, b.grad) for a, b in zip(leaves, plain_pass(build), strict=True))


def test_a_hooked_node_makes_no_stats_for_a_big_finite_gradient_nobody_reads(monkeypatch):
    """The posthook keeps a big gradient's light statistics as a `Normed` tuple; the Stats are
    made only when a batch is read (a count, not a time: every engine module that makes Stats
    makes them through a counting stand-in)."""
    from gradtui.engine.session import Session
    from gradtui.protocol.stats import Stats

    made = [0]

    def counted(*args, **kwargs):
        made[0] += 1
        return Stats(*args, **kwargs)

    makers = ["gradtui.protocol.stats"]  # every Stats is made by its factories (full_stats, light_stats...)

    batches: list[ev.NodesRan] = []
    session = Session(None, provenance=False, full_stats=False)  # the UI's statistics: norms
    session.add_listener(
        lambda e: batches.append(e) if isinstance(e, ev.NodesRan) else None, graph=False, batches=True, flow=False
    )
    session.submit(parse("break nan"))
    session.run_on()
    x = torch.rand(32, 32, requires_grad=True)
    loss = (x.exp() * 2.0).sum()  # three hooked nodes, each sending a 1,024-element gradient
    for name in makers:
        monkeypatch.setattr(sys.modules[name], "Stats", counted)
    with session:
        loss.backward()
    assert made[0] == 0
    ran = [r for batch in batches for r in batch.ran]  # read now: the Stats are made
    assert made[0] > 0 and len(ran) == 4
    assert math.isclose(ran[-1].grad_outputs[0].norm, torch.linalg.vector_norm(x.grad).item(), rel_tol=1e-6)
