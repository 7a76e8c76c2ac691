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
from tests.engine.hooks.test_hook_plan import KINDS, SIZES, _leaf, of, plain, run, same

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
    events, leaves = run(build, **options)
    monkeypatch.setattr(planned.PlannedPass, "_posthook", original)
    monkeypatch.setattr(CompiledHooks, "drain", drain)
    graph = of(events, ev.PassStarted)[0].graph
    return sorted(graph.nodes[i]["info"].name for i in seen), events, leaves


def _equal(a: float | None, b: float | None) -> bool:
    """Bit for bit (NaN where NaN, the sign of a zero too)."""
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def _same_stats(a, b) -> bool:
    if a is None or b is None:
        return a is b
    fields = ("norm", "min", "max", "mean")
    return (
        (a.shape, a.dtype, a.device, a.nonfinite, a.unreadable)
        == (b.shape, b.dtype, b.device, b.nonfinite, b.unreadable)
        and all(_equal(getattr(a, f), getattr(b, f)) for f in fields)
        and (a.values is None) == (b.values is None)
        and all(_equal(u, v) for u, v in zip(a.values or (), b.values or (), strict=True))
        and all(_equal(u, v) for u, v in zip(a.preview, b.preview, strict=True))
    )


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
    want = plain(build)
    assert all(same(a.grad, b.grad) for a, b in zip(leaves, want, strict=True))


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", PASS_THROUGH)
def test_pass_through_statistics_equal_a_hooked_nodes_bit_for_bit(monkeypatch, kind, size, full):
    op, name = KINDS[kind]

    def build():
        x = _leaf(SIZES[size])
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
        assert all(_same_stats(a, b) for a, b in pairs), graph.nodes[node]["info"].name


def test_negative_is_exact_on_every_field():
    from gradtui.engine.stats.window import small_stats

    values = (0.0, -0.0, 1.5, -2.25, 1e-30, math.inf)
    stats, negated = (
        small_stats((6,), "float32", "cpu", values),
        small_stats((6,), "float32", "cpu", tuple(-v for v in values)),
    )
    assert _same_stats(plan.negative(stats), negated)


@pytest.mark.parametrize("case", ["broadcast", "alpha", "cast", "scalar-broadcast"])
def test_an_add_that_changes_what_it_sends_stays_hooked(monkeypatch, case):
    def build():
        x = _leaf((4, 3))
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
    assert all(same(a.grad, b.grad) for a, b in zip(leaves, plain(build), strict=True))


def _encoder_case(case):
    """Five cases on a 2-layer encoder (residual adds, attention, layer norms)."""
    from bench_models import transformer

    model = transformer(2, 16)
    data = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))

    def build():
        x = data
        if case == "overflow":
            x = data * 1e18  # finite forward, a float32 overflow on the way back
        hidden = []
        handle = model.layers[1].linear1.register_forward_hook(lambda m, i, o: hidden.append(o))
        out = model(x)
        handle.remove()
        match case:
            case "masked-inf":
                out = out.masked_fill(torch.arange(16) == 3, -math.inf).softmax(-1)
            case "masked-nan":
                out = torch.where(out > 0, out.sqrt(), out)  # sqrt of negatives: NaN where masked
            case "deep":  # a NaN made on the way back inside the second layer, by a user's tensor hook
                hidden[0].register_hook(lambda g: g.index_fill(-1, torch.tensor([2]), math.nan))
        loss = out.pow(2).mean() * (1e30 if case == "overflow" else 1.0)
        return list(model.parameters()), loss

    return build


@pytest.mark.parametrize("case", ["clean", "overflow", "masked-inf", "masked-nan", "deep"])
def test_nan_names_the_culprit_an_every_node_pass_names(case):
    build = _encoder_case(case)
    planned_run, leaves = run(build, ["continue"])
    every_node, _ = run(build, ["continue"], check_every=1)
    hits = [(h.node, h.phase) for h in of(planned_run, ev.Paused)]
    assert hits == [(h.node, h.phase) for h in of(every_node, ev.Paused)]
    assert (case in ("clean", "masked-inf")) == (not hits)  # a softmax of a masked -inf is finite
    assert all(same(a.grad, b.grad) for a, b in zip(leaves, plain(build), strict=True))


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
