"""The help screen: every key and every command."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from gradtui.core.commands import HELP
from gradtui.ui.keys import KEYS, OTHER_KEYS, display

BREAK_SPECS = "break specs: OP (AddmmBackward0) · NAME (z, fc.weight) · #ID · nan · norm>X · pass N"


def help_content() -> Content:
    """The help text: keys, then the command language."""
    lines = [Content.styled("keys", "bold $text-primary")]
    for key in KEYS:
        lines.append(Content.assemble((f"  {display(key):<22}", "bold $text-accent"), key.help))
    for keys, text in OTHER_KEYS:
        lines.append(Content.assemble((f"  {keys:<22}", "bold $text-accent"), text))
    lines += [Content(""), Content.styled("commands (the command bar, -c, -x)", "bold $text-primary")]
    for line in HELP.splitlines():
        command, _, text = line.partition("  ")
        lines.append(Content.assemble((f"  {command:<20}", "bold"), text.strip()))
    lines += [Content(""), Content.styled("  " + BREAK_SPECS, "$text-muted")]
    return Content("\n").join(lines)


class HelpScreen(ModalScreen[None]):
    """A modal listing every key and command; escape, q or ? closes it."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "close")]

    def compose(self) -> ComposeResult:
        """The help text in a scrollable box."""
        with VerticalScroll(id="help") as box:
            box.border_title = "gradtui help"
            box.border_subtitle = "escape to close"
            yield Static(help_content())

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
