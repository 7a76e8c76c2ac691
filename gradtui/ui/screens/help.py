"""The help screen: every key and every command, in two columns (one when narrow)."""

from __future__ import annotations

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from gradtui.protocol.breakpoints import KINDS
from gradtui.protocol.commands import help_rows
from gradtui.ui.keys import KEYS, OTHER_KEYS, display


def break_specs() -> str:
    """The note under the commands: every breakpoint kind's form (the registry's)."""
    return "break specs: " + " · ".join(kind.help_form() for kind in KINDS)


PDB_NOTE = (
    "for pdb users: s, n, c, r, b, p, u, d, q do what your fingers expect; w is the gradient "
    "flow (where you are is the header's right end, g jumps there), l and h fold the module "
    "view (the source is in the detail pane, the whole file with v), ? is help"
)

NARROW = 110
"""Below this width the two columns stack."""


def key_rows() -> list[tuple[str, str]]:
    """(key, what it does): every key of KEYS, then the keys that are not actions (OTHER_KEYS)."""
    return [(display(key), key.help) for key in KEYS] + list(OTHER_KEYS)


def label_width(rows: list[tuple[str, str]]) -> int:
    """Cells of the widest label of `rows`: its column's width, so no label wraps (`enter space`
    wrapped to two lines, its text beside the first and the second row left empty)."""
    return max(cell_len(label) for label, _ in rows)


def command_rows() -> list[tuple[str, str]]:
    """(command, what it does) from the command table (the specs are the note below)."""
    return [(usage, text) for usage, text in help_rows() if usage]


class HelpScreen(ModalScreen[None]):
    """A modal listing every key and command; escape, q or ? closes it."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "close")]

    def compose(self) -> ComposeResult:
        """Keys on the left, commands on the right."""
        with VerticalScroll(id="help") as box:
            box.border_title = "gradtui help"
            box.border_subtitle = "escape to close"
            with Horizontal(id="help-columns"):
                with Vertical(classes="help-column"):
                    yield Static("keys", classes="help-heading", markup=False)
                    yield from self._grid(key_rows(), "keys-grid")
                with Vertical(classes="help-column"):
                    yield Static("commands · the command bar, -c, -x", classes="help-heading", markup=False)
                    yield from self._grid(command_rows(), "commands-grid")
                    yield Static(break_specs(), classes="help-note", markup=False)
                    yield Static(PDB_NOTE, classes="help-note", markup=False)
        yield Footer()

    @staticmethod
    def _grid(rows: list[tuple[str, str]], name: str) -> ComposeResult:
        """A grid of label and text rows, the labels' column as wide as the widest."""
        grid = Grid(
            *(
                Static(text, classes=kind, markup=False)
                for label, what in rows
                for text, kind in ((label, "help-key"), (what, "help-text"))
            ),
            classes=f"help-grid {name}",
        )
        grid.styles.grid_columns = f"{label_width(rows)} 1fr"
        yield grid

    def on_resize(self) -> None:
        """Stack the columns on narrow terminals."""
        self.set_class(self.size.width < NARROW, "narrow")

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
