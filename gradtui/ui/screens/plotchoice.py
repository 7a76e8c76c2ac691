"""What the passes view's norm plot shows (`t`): all the parameters together, the module or
parameter of the node selected in the debugger, or any module or parameter of the run, from a
list (modules largest gradient norm first, then parameters). Typing narrows the list (the
filter line has the focus), up and down move in it, enter chooses."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, OptionList
from textual.widgets.option_list import Option

ALL = ""
"""The choice of all the parameters together (the plot's default)."""


class PlotChoiceScreen(ModalScreen[str | None]):
    """A list of what the norm plot can show; enter chooses, escape leaves it as it is."""

    BINDINGS = [
        Binding("enter", "choose", "plot it", priority=True),
        Binding("escape", "close", "close"),
        Binding("up", "move(-1)", "up", show=False),
        Binding("down", "move(1)", "down", show=False),
    ]

    def __init__(self, choices: list[str], selected: str | None, chosen: str | None) -> None:
        """`selected`: the module or parameter of the debugger's selected node (listed first)."""
        super().__init__()
        self.choices = choices
        self.selected = selected
        self.chosen = chosen

    def compose(self) -> ComposeResult:
        """A filter line, then the list."""
        with Vertical(id="plot-choice") as box:
            box.border_title = "plot the gradient norm of"
            box.border_subtitle = "enter: choose · escape: back"
            yield Input(placeholder="type to narrow: a module or parameter name", id="plot-choice-filter")
            yield OptionList(id="plot-choice-list")
        yield Footer()

    def on_mount(self) -> None:
        """Fill the list, the current choice highlighted."""
        self._fill("")
        self.query_one(Input).focus()

    def _fill(self, needle: str) -> None:
        options = [Option("all parameters together", id="\0" + ALL)]
        if self.selected is not None:
            options.append(Option(f"the selected node's: {self.selected}", id="\0sel\0" + self.selected))
        options += [Option(name, id=name) for name in self.choices if needle.lower() in name.lower()]
        listing = self.query_one(OptionList)
        listing.clear_options()
        listing.add_options(options)
        wanted = (self.chosen or ALL) if not needle else None
        first = 2 if self.selected is not None else 1  # typed: the first name that matches
        listing.highlighted = next(
            (i for i, o in enumerate(options) if self._value(o.id) == wanted),
            first if needle and len(options) > first else 0,
        )

    @staticmethod
    def _value(option_id: str | None) -> str:
        return (option_id or "").rpartition("\0")[2]

    def action_move(self, step: int) -> None:
        """up / down in the filter line: the list's highlight."""
        listing = self.query_one(OptionList)
        if listing.option_count:
            listing.highlighted = max(0, min(listing.option_count - 1, (listing.highlighted or 0) + step))

    def on_input_changed(self, event: Input.Changed) -> None:
        """Narrow the list to the names containing what was typed."""
        self._fill(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """enter in the filter: the first match."""
        event.stop()
        self.action_choose()

    def action_choose(self) -> None:
        """enter: the highlighted row (a priority key, so the footer shows it)."""
        listing = self.query_one(OptionList)
        if listing.option_count:
            self.dismiss(self._value(listing.get_option_at_index(listing.highlighted or 0).id))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """enter (or a click) on a row: plot it."""
        event.stop()
        self.dismiss(self._value(event.option.id))

    def action_close(self) -> None:
        """Back, the plot as it was."""
        self.dismiss(None)
