"""The breakpoints pane (pudb's): every breakpoint with its hit count and its last hit; enter
jumps to that hit, space turns it off or on again, delete removes it; escape closes.

Turning one off is the UI's: the target knows breakpoints that are armed, not disarmed ones,
so an off breakpoint is deleted there and its spec kept here; on again, it is added anew (a
new number, its hit count from zero)."""

from __future__ import annotations

from typing import NamedTuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static


class BreakpointRow(NamedTuple):
    """One row: an armed breakpoint (its number) or one turned off (number None)."""

    number: int | None
    spec: str
    hits: int
    last_hit: tuple[int, int] | None
    """(pass index, node id) of its last hit."""


class BreakpointChoice(NamedTuple):
    """What the user asked for: `jump`, `toggle` or `delete`, on that row."""

    action: str
    row: BreakpointRow


class BreakpointsScreen(ModalScreen[BreakpointChoice | None]):
    """A table of the breakpoints (see module doc)."""

    BINDINGS = [
        Binding("space", "choose('toggle')", "off / on"),
        Binding("delete,x", "choose('delete')", "delete"),
        Binding("escape,B", "close", "close"),
    ]

    def __init__(self, rows: list[BreakpointRow]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        """A note, then the table."""
        with Vertical(id="breakpoints") as box:
            box.border_title = f"breakpoints · {sum(r.number is not None for r in self.rows)} armed"
            box.border_subtitle = "escape to close"
            note = ("enter: jump to its last hit · space: off / on · delete or x: delete" if self.rows
                    else "no breakpoints: b on a node, or :break SPEC (nan, norm>X, FILE.py:LINE, module PATH…)")
            yield Static(note, id="breakpoints-note", markup=False)
            yield DataTable(id="breakpoints-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        """Fill the table."""
        table = self.query_one(DataTable)
        table.add_columns("#", "spec", "hits", "last hit", "")
        for row in self.rows:
            off = row.number is None
            last = f"pass {row.last_hit[0]} · #{row.last_hit[1]}" if row.last_hit else "-"
            style = "dim" if off else ""
            table.add_row(Text("-" if off else str(row.number), style=style), Text(row.spec, style=style or "bold"),
                          Text(str(row.hits), style=style), Text(last, style=style),
                          Text("off" if off else "armed", style="dim" if off else "green"))
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """enter (or a click) on a row: jump to its last hit."""
        event.stop()
        self.action_choose("jump")

    def action_choose(self, action: str) -> None:
        """Answer with the action on the row under the cursor."""
        if self.rows:
            self.dismiss(BreakpointChoice(action, self.rows[self.query_one(DataTable).cursor_row]))

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
