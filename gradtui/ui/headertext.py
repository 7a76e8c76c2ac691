"""What the header says: the pass on screen in parts (a narrow header drops the least needed
first) and the engine's state in a long and a short form. Plain functions of the UI state's
values (no Textual), so the header widget and the tests read the same words."""

from __future__ import annotations

from typing import NamedTuple

from gradtui.protocol import events as ev
from gradtui.protocol.nodes import node_info
from gradtui.ui.passview import PassView


class HeaderPart(NamedTuple):
    """A part of the header's text; parts of higher `drop` go first when the line is short."""

    text: str
    drop: int


def pass_parts(
    view: PassView | None, live: PassView | None, browsing: bool, undrawn: int | None = None
) -> tuple[HeaderPart, ...]:
    """The pass on screen (`view`) in parts: index, loss, call, `unhooked`, `browsing · live is N`,
    `latest N not drawn` (`undrawn`: the latest pass, sent without its graph, see
    gradtui.agent.server; the screen keeps the last pass drawn)."""
    if view is None:
        return (HeaderPart(f"pass {undrawn} not drawn", 0),) if undrawn is not None else ()
    parts = [HeaderPart(f"pass {view.index}", 0)]
    loss = view.loss_text()
    if loss:
        parts.append(HeaderPart(loss, 3))
    parts.append(HeaderPart(view.call_text or view.call + "()", 4))
    if not view.recorded:
        parts.append(HeaderPart("unhooked", 1))
    if browsing and live is not None:
        parts.append(HeaderPart(f"browsing · live is {live.index}", 0))
    if undrawn is not None:
        parts.append(HeaderPart(f"latest {undrawn} not drawn", 0))
    return tuple(parts)


def status_text(status: str, paused: ev.Paused | None, live: PassView | None, exit_status: int | None) -> str:
    """`paused at #1 MulBackward0 (y)`, `running`, `finished · exit 0`..."""
    if status == "paused" and paused is not None:
        where = live.title(paused.node) if live is not None else f"#{paused.node}"
        return f"paused {'at' if paused.phase == 'before' else 'after'} {where}"
    if status == "running":
        return "running"
    if status in ("finished", "failed"):
        if live is not None and live.error and live.failed_node is not None:
            return f"backward raised at #{live.failed_node} · exit {_exit(exit_status)}"
        return f"{status} · exit {_exit(exit_status)}"
    return status


def _exit(status: int | None) -> str:
    """An exit status as the header says it (`?`: a recording that does not say how its run ended)."""
    return "?" if status is None else str(status)


def status_short(status: str, paused: ev.Paused | None, live: PassView | None, exit_status: int | None) -> str:
    """The state for a narrow header: `paused #1 (y)`, else as `status_text`."""
    if status == "paused" and paused is not None:
        tags = node_info(live.graph, paused.node).tags if live is not None and paused.node in live.graph else []
        return f"paused #{paused.node}" + (f" ({tags[0]})" if tags else "")
    return status_text(status, paused, live, exit_status)
