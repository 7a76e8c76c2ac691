"""The variables pane (pudb's locals): the tensors and modules in scope where backward was
called, each with its shape, dtype, `requires_grad`, whether it is on the shown pass's graph (its
node) and its gradient's norm once the pass has made it; enter on one selects its node, or asks
`why NAME` when it is not on the graph; escape closes.

The agent reads the calling frame's locals once, at a pass's first pause (a `CallSiteVariables`
event, kept on the pass's view); this pane only shows that view.

`V` opens it as a modal table; `L` docks it instead (`VariablesPane`): a pane beside the detail
pane that stays open, following the pass on screen, until `L` again, as pudb keeps its
variables on screen. The app remembers it for the session (every pass, every pause)."""

from __future__ import annotations

from typing import NamedTuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from gradtui.protocol import events as ev
from gradtui.protocol.stats import format_number
from gradtui.ui.passview import PassView

DOCKED_WIDTH = 46
"""The docked pane's width in the wide layout (gradtui.tcss; the sizer leaves it out of the graph's room)."""


class VariableRow(NamedTuple):
    """One variable as the pane shows it: the variable, its first node in engine order (None:
    not on the graph) and its gradient's norm (None: not known yet, or none)."""

    var: ev.Variable
    node: int | None
    norm: float | None


def variable_rows(view: PassView | None) -> list[VariableRow]:
    """The rows of the shown pass's call-site variables ([] before its first pause)."""
    if view is None or view.variables is None:
        return []
    rows = []
    for var in view.variables.variables:
        nodes = sorted((n for n in var.nodes if n in view.row), key=view.row.__getitem__)
        rows.append(VariableRow(var, nodes[0] if nodes else None, view.variable_norm(var)))
    return rows


def _what(var: ev.Variable) -> str:
    """`[32, 4] float32`, `97 parameters`."""
    if var.kind == "module":
        return f"{var.parameters:,} parameters"
    return f"[{', '.join(map(str, var.shape))}] {var.dtype}"


def empty_note(where: str, recording: bool) -> str:
    """What the pane says when it has no variable to list (`where`: the call site, "" unknown)."""
    return (
        "no tensor or module in scope where backward was called"
        if where
        else "the run read no variables in this pass (they are read at a pass's first pause, and it never paused in it)"
        if recording
        else "the variables are read at a pass's first pause: none yet for this pass"
    )


def fill(table: DataTable, rows: list[VariableRow]) -> None:
    """Put `rows` in `table` (its columns added the first time), the cursor kept where it was."""
    at = table.cursor_row
    table.clear(columns=False)
    if not table.columns:
        table.add_columns("name", "kind", "shape / size", "grad", "on graph", "grad norm")
    for row in rows:
        var = row.var
        graph = Text(f"#{row.node}", style="bold") if row.node is not None else Text("no: why?", style="dim")
        norm = Text("-" if row.norm is None else format_number(row.norm), style="" if row.norm is not None else "dim")
        table.add_row(
            Text(var.name, style="bold"),
            var.kind,
            _what(var),
            Text("✓" if var.requires_grad else "·", style="green" if var.requires_grad else "dim"),
            graph,
            norm,
        )
    if rows:
        table.move_cursor(row=min(at, len(rows) - 1), animate=False)


class VariablesPane(Vertical):
    """The variables docked beside the detail pane (module doc): the same table as `V`'s, kept
    on screen and redrawn for the pass on screen; enter on a row posts `Chosen`."""

    class Chosen(Message):
        """A variable chosen in the docked pane (enter or a click on its row)."""

        def __init__(self, row: VariableRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: list[VariableRow] = []
        self._shown: tuple | None = None
        """What the pane last drew (its rows and note): redrawn only when it changed."""

    def compose(self) -> ComposeResult:
        """A note, then the table."""
        yield Static("", id="variables-pane-note", markup=False)
        yield DataTable(
            id="variables-pane-table", cursor_type="row", zebra_stripes=True, classes="pane"
        )  # tab reaches it

    def show(self, view: PassView | None, recording: bool) -> None:
        """Show the call-site variables of pass `view` (None: no pass yet)."""
        told = view.variables if view is not None else None
        where = told.call_site if told else ""
        rows = variable_rows(view)
        note = (
            empty_note(where, recording)
            if not rows
            else (
                f"enter: its node · {told.more} more not listed"
                if told and told.more
                else "enter: its node, or why not"
            )
        )
        shown = (tuple(rows), note, where)
        if shown == self._shown:
            return
        self._shown, self.rows = shown, rows
        self.border_title = f"variables · {where}" if where else "variables"
        self.query_one("#variables-pane-note", Static).update(note)
        fill(self.query_one(DataTable), rows)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """enter (or a click) on a row: its node, or why it has none."""
        event.stop()
        if 0 <= event.cursor_row < len(self.rows):
            self.post_message(self.Chosen(self.rows[event.cursor_row]))


class VariablesScreen(ModalScreen[VariableRow | None]):
    """A table of the call-site variables (see module doc)."""

    BINDINGS = [
        Binding("enter", "choose", "its node or why", priority=True),  # priority: shown, not the table's
        Binding("escape,V", "close", "close"),
    ]

    def __init__(self, rows: list[VariableRow], where: str, more: int = 0, recording: bool = False) -> None:
        """`recording`: a replay's pass (the recording has the variables the run read, if any)."""
        super().__init__()
        self.recording = recording
        self.rows = rows
        self.where = where
        self.more = more

    def compose(self) -> ComposeResult:
        """A note, then the table."""
        with Vertical(id="variables") as box:
            box.border_title = f"variables · {self.where}" if self.where else "variables"
            box.border_subtitle = "escape to close"
            if not self.rows:
                note = empty_note(self.where, self.recording)
            else:
                note = "enter: select its node (not on the graph: why NAME) · grad norm once the pass made it"
                if self.more:
                    note += f" · {self.more} more not listed"
            yield Static(note, id="variables-note", markup=False)
            yield DataTable(id="variables-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        """Fill the table."""
        table = self.query_one(DataTable)
        fill(table, self.rows)
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """enter (or a click) on a row: its node, or why it has none."""
        event.stop()
        if self.rows:
            self.dismiss(self.rows[event.cursor_row])

    def action_choose(self) -> None:
        """enter: the row under the cursor."""
        if self.rows:
            self.dismiss(self.rows[self.query_one(DataTable).cursor_row])

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
