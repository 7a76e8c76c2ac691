"""The help screen: every key and every command, in two columns (one when narrow)."""

from __future__ import annotations

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


PDB_NOTE = ("for pdb users: s, n, c, r, b, p, u, d, q do what your fingers expect; w is the gradient "
            "flow (where you are is the header's right end, g jumps there), l and h fold the module "
            "view (the source is in the detail pane, the whole file with v), ? is help")

NARROW = 110
"""Below this width the two columns stack."""


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
                    with Grid(classes="help-grid keys-grid"):
                        for key in KEYS:
                            yield Static(display(key), classes="help-key", markup=False)
                            yield Static(key.help, classes="help-text", markup=False)
                        for keys, text in OTHER_KEYS:
                            yield Static(keys, classes="help-key", markup=False)
                            yield Static(text, classes="help-text", markup=False)
                with Vertical(classes="help-column"):
                    yield Static("commands · the command bar, -c, -x", classes="help-heading", markup=False)
                    with Grid(classes="help-grid commands-grid"):
                        for command, text in command_rows():
                            yield Static(command, classes="help-key", markup=False)
                            yield Static(text, classes="help-text", markup=False)
                    yield Static(break_specs(), classes="help-note", markup=False)
                    yield Static(PDB_NOTE, classes="help-note", markup=False)
        yield Footer()

    def on_resize(self) -> None:
        """Stack the columns on narrow terminals."""
        self.set_class(self.size.width < NARROW, "narrow")

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
