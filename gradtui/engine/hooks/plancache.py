"""The hook plan of a training loop's next pass, reused: most steps build the very same graph.

`make_plan` visits every node of a pass (~0.3 µs each: a tenth of what gradtui adds to a tiny
model's backward). A loop that builds the same model's graph each step walks to the same node
names, kinds, edges and roots each time, and those are all the plan reads of the graph but for
two things a node's live data says: whether a pass-through node still passes through (alpha 1,
no broadcast, cast or move on the way out: `passes_through`, checked again on each node the plan
derives that way) and whether the script hooked a tensor (then every pass is planned afresh).
So a pass whose walk equals the last one's gets a copy of the last plan, checked that way.

Such a pass also takes the last walk's receivers and producers (equal tuples, made by an earlier
pass) in place of its own, which are freed there and then. A pass runs with the collector off
(gradtui.engine.session) and its walk makes some 1,300 small tuples on a 12-layer encoder: kept
alive to the pass's end (a client holds the pass's graph, which reads its walk), they were young
objects enough to set off a collection of the youngest generation inside the `backward()`, as
the collector came back on, which walks them all and frees none.
"""

from __future__ import annotations

from typing import Any

from gradtui.engine.capture.graph import Walk
from gradtui.engine.hooks.plan import NONE, SIGNS, HookPlan, make_plan, passes_through


class PlanCache:
    """The last pass's plan and the walk it was made from (see module doc). Owned by whoever
    starts planned passes; a plan handed out is the caller's to change (a pause upgrades it)."""

    def __init__(self) -> None:
        self._walk: Walk | None = None
        """The walk `_plan` was made from."""
        self._roots: tuple[int, ...] = ()
        self._plan: HookPlan | None = None
        self._through: list[int] = []
        """The nodes `_plan` derives because they passed through (checked again on reuse)."""
        self.reused = 0
        """Passes given a copy of the last plan (a count the tests read)."""

    def plan(self, walk: Walk, nodes: list[Any], roots: tuple[int, ...], hooks_seen: bool) -> HookPlan:
        """The plan of a pass (gradtui.engine.hooks.plan.make_plan's), reused when its walk is the last one's."""
        if hooks_seen:  # a user hook can come and go between steps: each pass looks
            self._plan = self._walk = None
            return make_plan(walk, nodes, roots, hooks_seen)
        names, kinds, nexts = walk.names, walk.kinds, walk.nexts
        last, plan = self._walk, self._plan
        if (
            last is not None
            and plan is not None
            and self._roots == roots
            and last.names == names
            and last.kinds == kinds
            and last.nexts == nexts
            and all(passes_through(nodes[i], names[i]) for i in self._through)
        ):
            self.reused += 1
            walk.nexts[:] = last.nexts  # equal: the same edges, the same ids
            walk.producer[:] = last.producer  # a function of the edges and the roots: equal too
            return _copied(plan)
        plan = make_plan(walk, nodes, roots, hooks_seen)
        self._walk, self._roots = walk, roots
        self._plan = _copied(plan)
        hooks = plan.hooks
        self._through = [i for i, name in enumerate(names) if name in SIGNS and hooks[i] == NONE]
        return plan


def _copied(plan: HookPlan) -> HookPlan:
    """A copy of `plan` whose every part can be changed without touching `plan`."""
    return HookPlan(
        bytearray(plan.hooks), list(plan.producer), {k: list(v) for k, v in plan.derived.items()}, dict(plan.fed)
    )
