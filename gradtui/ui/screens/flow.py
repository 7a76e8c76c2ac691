"""The gradient flow screen: per parameter, grad norm next to weight norm after a pass."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from gradtui.protocol.events import ParamFlow
from gradtui.protocol.flowtext import zero_weight
from gradtui.protocol.stats import format_number
from gradtui.ui.flowtable import SPREAD, flow_rows
from gradtui.ui.state import FlowSnapshot

FLAG_STYLE = {
    "non-finite": "bold red",
    "exploding": "bold red",
    "vanishing": "bold yellow",
    "no grad": "dim",
    "zero weight": "dim",
}
"""How a flagged row's ratio and flag are drawn."""


NUMBER_TITLES = ("grad norm", "weight norm", "ratio")


def _number(value: float | None, missing: str) -> str:
    return missing if value is None else format_number(value)


def _ratio(flow: ParamFlow) -> str:
    """The ratio as text; a non-finite gradient's ratio is its norm's nan or inf, whatever the weight."""
    if flow.grad_norm is not None and not math.isfinite(flow.grad_norm):
        return format_number(flow.grad_norm)
    if zero_weight(flow):
        return "w=0"  # grad / 0: not a measure of the gradient
    return _number(flow.ratio, "-")


class FlowScreen(ModalScreen[None]):
    """A table of one ended pass's flow, vanishing at the top, exploding at the bottom;
    escape closes. `about` says which pass it is when it is not the one on screen."""

    BINDINGS = [Binding("escape,q,w", "close", "close")]

    def __init__(self, shown: FlowSnapshot | None, about: str = "") -> None:
        super().__init__()
        self.shown = shown
        self.about = about

    def compose(self) -> ComposeResult:
        """A note line, then the table."""
        with Vertical(id="flow") as box:
            box.border_title = "gradient flow · " + (f"pass {self.shown.index}" if self.shown else "no pass has ended")
            box.border_subtitle = "escape to close"
            yield Static(self._note(), id="flow-note", markup=False)
            yield DataTable(id="flow-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def _note(self) -> str:
        if self.shown is None:
            return self.about
        about = f"{self.about} · " if self.about else ""
        if not self.shown.measured:
            return (
                f"{about}the flow of pass {self.shown.index} was not measured: a live run measures it for a pass "
                "that pauses and, from this table's or the passes view's first opening, for every pass"
            )
        if not self.shown.flow:
            return f"{about}no leaf received a gradient in pass {self.shown.index}"
        return (
            f"{about}{len(self.shown.flow)} leaves · grad norm / weight norm, smallest first · "
            f"flagged: zero, nan/inf, or {SPREAD:g}× off the median ratio · w=0: a zero weight "
            "(a zero-initialised bias), its own case"
        )

    def on_mount(self) -> None:
        """Fill the table; numbers right-aligned in their columns."""
        table = self.query_one(DataTable)
        rows = flow_rows(self.shown.flow if self.shown else ())
        numbers = [(_number(r.flow.grad_norm, "None"), format_number(r.flow.weight_norm), _ratio(r.flow)) for r in rows]
        widths = [max([len(title), *(len(n[i]) for n in numbers)]) for i, title in enumerate(NUMBER_TITLES)]
        # the flag before the bar: at 80 columns the last column is the one cut off
        table.add_columns("param", "shape", *(t.rjust(w) for t, w in zip(NUMBER_TITLES, widths)), "flag", "log ratio")
        for row, (grad, weight, ratio) in zip(rows, numbers):
            flow = row.flow
            style = FLAG_STYLE.get(row.flag, "")
            table.add_row(
                Text(flow.name, style="bold" if row.flag else ""),
                Text("×".join(str(d) for d in flow.shape) or "scalar", style="dim"),
                Text(grad.rjust(widths[0])),
                Text(weight.rjust(widths[1])),
                Text(ratio.rjust(widths[2]), style=style),
                Text(row.flag, style=style),
                Text(row.bar, style=style or "cyan"),
            )
        table.focus()

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
