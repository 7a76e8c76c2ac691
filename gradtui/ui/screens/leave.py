"""What `q` does in an attached UI: it says it will stop the script, which runs in a process
of its own that this UI did not start, and offers to detach instead (leave it running)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static


class LeaveScreen(ModalScreen[str | None]):
    """Asks how to leave: dismisses with `quit` (stop the script), `detach`, or None (stay)."""

    BINDINGS = [
        Binding("q", "choose('quit')", "stop the script"),
        Binding("enter", "choose('quit')", "stop the script", show=False),
        Binding("D", "choose('detach')", "detach"),
        Binding("d", "choose('detach')", "detach", show=False),
        Binding("escape", "choose(None)", "stay"),
    ]

    def __init__(self, script: str) -> None:
        super().__init__()
        self.script = script

    def compose(self) -> ComposeResult:
        """The question and the three answers."""
        with Vertical(id="leave") as box:
            box.border_title = "leave"
            yield Static(f"{self.script or 'the script'} runs in its own process, attached to: q stops it.",
                         id="leave-question", markup=False)
            yield Static("q, enter  stop the script and leave\n"
                         "D         detach: leave it running, its breakpoints armed\n"
                         "escape    stay", id="leave-answers", markup=False)
        yield Footer()

    def action_choose(self, choice: str | None) -> None:
        """Answer with the choice."""
        self.dismiss(choice)
