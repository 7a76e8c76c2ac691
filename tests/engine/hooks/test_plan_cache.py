"""The plan cache (gradtui.engine.hooks.plancache): a pass whose graph has the last pass's shape gets a
copy of the last plan, and only then: the plan is always what `make_plan` makes of that pass."""

from __future__ import annotations

import math

import torch

from gradtui.engine.capture.graph import capture
from gradtui.engine.hooks.plan import HookPlan, make_plan
from gradtui.engine.hooks.plancache import PlanCache
from gradtui.engine.session import Session
from gradtui.protocol import events as ev


def _layers():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _residual(b: torch.Tensor) -> torch.Tensor:
    """A loss whose add is a pass-through node while `b` has x's shape, a broadcast one if not."""
    x = torch.randn(4, 4, requires_grad=True)
    return ((x * 2 + b) * 3).sum()


def _parts(plan: HookPlan) -> tuple:
    return bytes(plan.hooks), plan.producer, plan.derived, plan.fed


def _planned(cache: PlanCache, loss: torch.Tensor, hooks_seen: bool = False) -> tuple[HookPlan, HookPlan]:
    """(the cache's plan, make_plan's) of `loss`'s graph."""
    cap = capture([loss.grad_fn], lazy=True)
    return cache.plan(cap.walk, cap.nodes, cap.roots, hooks_seen), make_plan(cap.walk, cap.nodes, cap.roots, hooks_seen)


def test_a_loop_reuses_the_plan_which_is_the_fresh_one():
    model, data, cache = _layers(), torch.randn(3, 4), PlanCache()
    for step in range(3):
        got, fresh = _planned(cache, model(data).pow(2).mean())
        assert _parts(got) == _parts(fresh)
        assert cache.reused == step


def test_a_handed_out_plan_can_change_without_changing_the_cache():
    model, data, cache = _layers(), torch.randn(3, 4), PlanCache()
    first, fresh = _planned(cache, model(data).pow(2).mean())
    first.hooks[:] = bytes(len(first.hooks))  # what a pause's upgrade or resume does to a plan
    first.derived.clear()
    first.producer[1] = None
    again, fresh = _planned(cache, model(data).pow(2).mean())
    assert cache.reused == 1 and _parts(again) == _parts(fresh)


def test_a_pass_through_node_that_now_broadcasts_is_planned_afresh():
    cache = PlanCache()
    same_shape, _ = _planned(cache, _residual(torch.randn(4, 4, requires_grad=True)))
    broadcast, fresh = _planned(cache, _residual(torch.randn(4, requires_grad=True)))  # the same names and edges
    assert cache.reused == 0
    assert _parts(broadcast) == _parts(fresh) and bytes(broadcast.hooks) != bytes(same_shape.hooks)


def test_another_graph_or_a_user_hook_is_planned_afresh():
    model, data, cache = _layers(), torch.randn(3, 4), PlanCache()
    _planned(cache, model(data).pow(2).mean())
    got, fresh = _planned(cache, model(data).sum())
    assert cache.reused == 0 and _parts(got) == _parts(fresh)
    for _ in range(2):
        got, fresh = _planned(cache, model(data).sum(), hooks_seen=True)
        assert _parts(got) == _parts(fresh)
    assert cache.reused == 0


def test_a_broadcast_appearing_mid_loop_keeps_the_derived_norms_exact():
    """Through a session: the add that starts to broadcast at the third step is hooked there, so
    what it sends on (the broadcast operand's gradient, summed down) is measured, as torch makes it."""
    events: list[ev.Event] = []
    session = Session(events.append, provenance=False)
    session.run_on()
    sent: list[torch.Tensor] = []
    with session:
        for step in range(4):
            b = torch.randn(4, 4, requires_grad=True) if step < 2 else torch.randn(4, requires_grad=True)
            _residual(b).backward()
            sent.append(b.grad)
    ran = [e for e in events if isinstance(e, ev.NodeRan)]
    started = [e for e in events if isinstance(e, ev.PassStarted)]
    assert len(started) == 4
    for index, grad in enumerate(sent):
        infos = [info for _, info in started[index].graph.nodes(data="info")]
        add = next(i for i, info in enumerate(infos) if info.name == "AddBackward0")
        into_b = infos[add].next[1]
        (node_ran,) = [e for e in ran if e.pass_index == index and e.node == into_b]
        assert math.isclose(node_ran.grad_outputs[0].norm, torch.linalg.vector_norm(grad).item(), rel_tol=1e-6)


def test_a_reused_plan_s_pass_keeps_the_last_walk_s_tuples_which_equal_its_own():
    """A pass given the last plan takes the last walk's receivers and producers (so its own, young
    tuples are freed at once, gradtui.engine.hooks.plancache): the same values its own walk read."""
    model, data, cache = _layers(), torch.randn(3, 4), PlanCache()
    first = capture([model(data).pow(2).mean().grad_fn], lazy=True)
    cache.plan(first.walk, first.nodes, first.roots, False)
    second = capture([model(data).pow(2).mean().grad_fn], lazy=True)
    own = (list(second.walk.nexts), list(second.walk.producer))
    cache.plan(second.walk, second.nodes, second.roots, False)
    assert cache.reused == 1
    assert (second.walk.nexts, second.walk.producer) == own
    assert all(a is b for a, b in zip(second.walk.nexts, first.walk.nexts))
    assert all(a is b for a, b in zip(second.walk.producer, first.walk.producer))
    assert any(a is not b for a, b in zip(own[0], first.walk.nexts))  # its own were other tuples
