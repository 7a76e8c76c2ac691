"""The rank strip: one line with every rank of a torchrun job (state, where, loss, non-finite).

Hidden until the target says it is a job (a `RanksChanged` event from the job's hub); the
shown rank (`rank N` switches) is marked. A dead rank stands out in the error colour.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from gradtui.protocol.dist_events import RanksChanged, RankState

_STYLE = {
    "paused": "$warning bold",
    "parked": "$warning",
    "waiting": "$text-muted",
    "running": "$accent",
    "done": "$success",
    "dead": "$error bold",
    "starting": "$text-muted",
}


def rank_text(state: RankState) -> str:
    """`1 paused #5 TBackward0 · loss 0.027 · 3 nan`: one rank's cell (plain text)."""
    at = state.at.split(" · ", 1)[1] if state.state in ("paused", "parked") and " · " in state.at else ""
    parts = [f"{state.rank} {state.state}" + (f" {at}" if at else "")]
    if state.loss is not None:
        parts.append(f"loss {state.loss:.4g}")
    if state.nonfinite:
        parts.append(f"{state.nonfinite} non-finite")
    return " · ".join(parts)


class RankStrip(Widget):
    """One line: ` ranks  [0 paused #5 AddmmBackward0 · loss 0.03]  1 parked #5 ... `."""

    DEFAULT_CSS = """
    RankStrip { height: 1; background: $panel; display: none; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.ranks: RanksChanged | None = None

    def update_ranks(self, event: RanksChanged) -> None:
        """Show the job's ranks as the hub last said (and show the strip at all)."""
        self.ranks = event
        self.display = True
        self.refresh()

    def render(self) -> Content:
        if self.ranks is None:
            return Content("")
        pieces: list[tuple[str, str] | str] = [(" ranks ", "bold $text-accent")]
        for state in self.ranks.ranks:
            text = rank_text(state)
            style = _STYLE.get(state.state, "")
            if state.rank == self.ranks.shown:
                pieces += [" ", (f"[{text}]", f"{style} reverse" if style else "reverse")]
            else:
                pieces += [" ", (text, style)]
        return Content.assemble(*pieces)
