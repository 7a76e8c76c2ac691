"""The `nan` / `norm>X` watch over statistics read back in bulk.

Statistics are read from the device every few nodes (gradtui.engine.stats.window), not at every
node, so a value breakpoint is tested on the nodes that ran since the last read, in the order
they ran, exactly as the hooks would have tested them one by one: before a node (its incoming
gradients: `norm>X`, or a non-finite gradient arriving from outside the graph) and after it
(the node whose outgoing gradient turned non-finite while its incoming was finite). The first
match names its node exactly; `scan` says how many nodes ran after it (the bounded delay).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Breakpoints, Nan
from gradtui.protocol.stats import Stats, any_nonfinite


class Hit(NamedTuple):
    """A value breakpoint that matched a node that has already run."""

    breakpoint: Breakpoint
    node: int
    phase: str
    """"before": it matched the node's incoming gradients; "after": the node made a non-finite one."""
    index: int  # type: ignore[assignment]  # a NamedTuple field named as tuple's method index
    """The node's position in the scanned list; the nodes after it ran before the read."""


def scan(seen: Sequence[ev.NodeRan], breakpoints: Breakpoints, nan_seen: bool) -> tuple[Hit | None, bool]:
    """The first value-breakpoint hit among the nodes `seen` ran (in that order; or None), and
    whether a non-finite gradient has been seen in the pass by the end of them (`nan_seen`: the
    `nan` spec fires once a pass)."""
    hit = None
    nan_bp = next((bp for bp in breakpoints if Nan.of(bp.spec)), None)
    for index, item in enumerate(seen):
        node, grad_outputs, grad_inputs = item.node, item.grad_outputs, item.grad_inputs
        bad_in = any_nonfinite(grad_outputs)
        if hit is None and (bp := breakpoints.find_value(grad_outputs, nan_seen)) is not None:
            hit = Hit(bp, node, "before", index)
        if bad_in:
            nan_seen = True
        elif any_nonfinite(grad_inputs):
            if hit is None and nan_bp is not None:  # as the posthook always did: each node that makes one
                hit = Hit(nan_bp, node, "after", index)
            nan_seen = True
    return hit, nan_seen


def current(
    grad_outputs: tuple[Stats | None, ...], breakpoints: Breakpoints, nan_seen: bool
) -> tuple[Breakpoint | None, bool]:
    """The value breakpoint the node about to run matches by its incoming gradients (or None),
    and `nan_seen` after it."""
    bp = breakpoints.find_value(grad_outputs, nan_seen)
    return bp, nan_seen or any_nonfinite(grad_outputs)


def hit_text(hit: Hit, count: int, title: str) -> str:
    """How a pause names a hit among `count` scanned nodes: the node that made a non-finite
    gradient, or the spec and the node it matched, and how many nodes ran after it."""
    later = count - hit.index - 1
    more = f"{later} more node{'s' * (later != 1)}"
    if hit.phase == "after":
        return f"{title} made a non-finite gradient" + (f" (read back once {more} had run)" if later else "")
    return f"{hit.breakpoint.spec.text} at {title} (read back once it" + (f" and {more}" if later else "") + " had run)"


def handles_tensors(handles: Sequence[Any], tensors: Sequence[Any]) -> tuple[Any, ...]:
    """The tensors a window held for these handles (None where it held none)."""
    return tuple(tensors[h] if type(h) is int else None for h in handles)
