"""The breakpoints pane (pudb's): every breakpoint with its hit count and its last hit; enter
jumps to that hit (and closes the pane), space turns it off or on again, delete removes it:
those two leave the pane open, redrawn once the target says what it did, the cursor on the
same row (or the next one, after a delete); escape closes.

Turning one off is the UI's: the target knows breakpoints that are armed, not disarmed ones,
so an off breakpoint is deleted there and its spec kept here; on again, it is added anew (a
new number, its hit count from zero)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from gradtui.ui.changes import Changes


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


def _keys(rows: list[BreakpointRow]) -> list[tuple[str, int]]:
    """Each row's key: its spec and which of the rows of that spec it is (a row keeps its key
    when it is turned off or on, which changes its number)."""
    seen: Counter[str] = Counter()
    keys = []
    for row in rows:
        keys.append((row.spec, seen[row.spec]))
        seen[row.spec] += 1
    return keys


def keep_order(before: list[BreakpointRow], now: list[BreakpointRow]) -> list[BreakpointRow]:
    """`now`'s rows in `before`'s order (a row turned off stays where it was), new ones last."""
    place = {key: at for at, key in enumerate(_keys(before))}
    keyed = list(zip(_keys(now), now))
    return [row for _, row in sorted(keyed, key=lambda pair: place.get(pair[0], len(place)))]


class BreakpointsScreen(ModalScreen[BreakpointChoice | None]):
    """A table of the breakpoints (see module doc). `rows` gives the rows as the UI state has
    them now; `act` carries out a toggle or a delete and says whether it asked the target (the
    pane is redrawn when the target's breakpoints change) or did it here (redrawn at once)."""

    BINDINGS = [
        Binding("enter", "choose('jump')", "jump to its last hit", priority=True),  # priority: shown, not the table's
        Binding("space", "choose('toggle')", "off / on"),
        Binding("delete,x", "choose('delete')", "delete"),
        Binding("escape,B", "close", "close"),
    ]

    def __init__(self, rows: Callable[[], list[BreakpointRow]], act: Callable[[BreakpointChoice], bool]) -> None:
        super().__init__()
        self.rows_now = rows
        self.act = act
        self.rows = rows()

    def compose(self) -> ComposeResult:
        """A note, then the table."""
        with Vertical(id="breakpoints"):
            yield Static("", id="breakpoints-note", markup=False)
            yield DataTable(id="breakpoints-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        """Fill the table; redraw it whenever the target's breakpoints change."""
        self.query_one(DataTable).add_columns("#", "spec", "hits", "last hit", "")
        self._fill(0)
        self.query_one(DataTable).focus()
        self.watch(self.app, "changes", self._changed, init=False)

    def _changed(self, changes: Changes | None) -> None:
        if changes is not None and changes.breakpoints:
            self.refill()

    def refill(self) -> None:
        """The rows as the state has them now, in the order shown, the cursor on the same row."""
        table = self.query_one(DataTable)
        at = table.cursor_row
        self.rows = keep_order(self.rows, self.rows_now())
        self._fill(at)

    def _fill(self, cursor: int) -> None:
        box, table = self.query_one("#breakpoints", Vertical), self.query_one(DataTable)
        box.border_title = f"breakpoints · {sum(r.number is not None for r in self.rows)} armed"
        box.border_subtitle = "escape to close"
        note = (
            "enter: jump to its last hit · space: off / on · delete or x: delete"
            if self.rows
            else "no breakpoints: b on a node, or :break SPEC (nan, norm>X, FILE.py:LINE, module PATH…)"
        )
        self.query_one("#breakpoints-note", Static).update(note)
        table.clear()
        for row in self.rows:
            off = row.number is None
            last = f"pass {row.last_hit[0]} · #{row.last_hit[1]}" if row.last_hit else "-"
            style = "dim" if off else ""
            table.add_row(
                Text("-" if off else str(row.number), style=style),
                Text(row.spec, style=style or "bold"),
                Text(str(row.hits), style=style),
                Text(last, style=style),
                Text("off" if off else "armed", style="dim" if off else "green"),
            )
        if self.rows:
            table.move_cursor(row=min(cursor, len(self.rows) - 1), animate=False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """enter (or a click) on a row: jump to its last hit."""
        event.stop()
        self.action_choose("jump")

    def action_choose(self, action: str) -> None:
        """Jump: answer with the row under the cursor (the pane closes); toggle or delete: do it,
        the pane stays."""
        if not self.rows:
            return
        choice = BreakpointChoice(action, self.rows[self.query_one(DataTable).cursor_row])
        if action == "jump":
            self.dismiss(choice)
        elif not self.act(choice):
            self.refill()

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
