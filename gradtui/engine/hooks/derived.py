"""The nodes a pass's hook plan derives instead of hooking, read from the live graph when asked.

A planned pass (gradtui.engine.hooks.planned) hooks only the nodes that compute; the ones that only
move what they received (views, transposes, a weight's accumulator, pass-through adds) follow
from their producer. What they are is read only when someone asks: `DerivedSteps` when a
batch's `Feeds` marker is expanded (gradtui.engine.hooks.batches), `mark_fed` when the pass's
completion must be settled (a pause, a hand-over, a failure), `ready_node` when a failure no
node's own hook saw must be placed.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gradtui.engine.hooks.batches import Derived
from gradtui.engine.hooks.plan import ACCUMULATOR, SIGNS, HookPlan, shape_and_saved
from gradtui.protocol.nodes import NodeInfo


class DerivedSteps:
    """The Derived steps of the nodes a pass's plan derives from a hooked node, read from its live
    nodes: what a batch's `Feeds` marker expands into (gradtui.engine.hooks.batches calls it when the
    batch is made, or at the pass's end)."""

    def __init__(self, plan: HookPlan, capture: Any) -> None:
        self._plan = plan
        self._capture = capture

    def __call__(self, node: int) -> list[Derived]:
        """The steps of the nodes derived from `node` (and from them), breadth-first."""
        plan, walk, nodes = self._plan, self._capture.walk, self._capture.nodes
        derived, producer_of, names, nexts = plan.derived, plan.producer, walk.names, walk.nexts
        make = tuple.__new__  # a NamedTuple's own __new__ is a Python function: this runs per derived node
        todo = deque(derived.get(node, ()))
        steps: list[Derived] = []
        saved: tuple[int, ...]
        while todo:
            child = todo.popleft()
            name = names[child]
            shape, saved, error = None, (), None
            if name in SIGNS:
                saved = tuple([0 if there is None else 1 for there in nexts[child]])
            elif name != ACCUMULATOR:
                try:
                    shape, saved = shape_and_saved(nodes[child], name)
                except Exception as exc:  # noqa: BLE001 - statistics must never fail the script's pass
                    error = f"{type(exc).__name__}: {exc}"
            receivers = nexts[child]  # sends: its first input has a receiver (or it has no input)
            steps.append(
                make(
                    Derived,
                    (child, producer_of[child], name, shape, saved, not receivers or receivers[0] is not None, error),
                )
            )
            more = derived.get(child)
            if more:
                todo.extend(more)
        return steps


def mark_fed(derived: dict[int, list[int]], completed: bytearray, producers: list[int]) -> None:
    """Mark run in `completed` every node derived (directly or not) from one of `producers`."""
    todo = deque(producers)
    while todo:
        for child in derived.get(todo.popleft(), ()):
            completed[child] = 1
            todo.append(child)


def ready_node(infos: list[NodeInfo], completed: bytearray) -> int | None:
    """The node the engine would have run next (all its producers done, itself not): the one a
    failure that no node's own hook saw (a user's tensor hook raising) happened at. Of several,
    the engine runs the highest sequence number first."""
    waiting = [0] * len(infos)
    for here, info in enumerate(infos):
        if not completed[here]:
            for there in info.next:
                if there is not None:
                    waiting[there] += 1
    best = None
    for i, info in enumerate(infos):
        if not completed[i] and not waiting[i] and (best is None or (info.seq or 0) > (infos[best].seq or 0)):
            best = i
    return best
