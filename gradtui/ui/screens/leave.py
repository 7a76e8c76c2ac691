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

    def __init__(self, script: str, question: str | None = None, *, detach: bool = True) -> None:
        """`question`: what to ask (default: the attached UI's `q`); `detach`: offer it."""
        super().__init__()
        self.script = script
        self.question = question or f"{script or 'the script'} runs in its own process, attached to: q stops it."
        self.detachable = detach

    def compose(self) -> ComposeResult:
        """The question and the answers."""
        with Vertical(id="leave") as box:
            box.border_title = "leave"
            yield Static(self.question, id="leave-question", markup=False)
            detach = "D         detach: leave it running, its breakpoints armed\n" if self.detachable else ""
            yield Static(
                f"q, enter  stop the script and leave\n{detach}escape    stay", id="leave-answers", markup=False
            )
        yield Footer()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No detach where it is not offered (a UI that started its script)."""
        return not (action == "choose" and parameters == ("detach",) and not self.detachable)

    def action_choose(self, choice: str | None) -> None:
        """Answer with the choice."""
        self.dismiss(choice)
