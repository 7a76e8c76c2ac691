"""A small modal that asks for one value (a scale factor, an expression, a search)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Label


class PromptScreen(ModalScreen[str | None]):
    """Asks one question; dismisses with the typed text, or None on escape."""

    BINDINGS = [Binding("enter", "confirm", "confirm", priority=True), Binding("escape", "cancel", "cancel")]

    def __init__(
        self, question: str, value: str = "", placeholder: str = "", hint: str = "", select: bool = True
    ) -> None:
        super().__init__()
        self.select = select
        """Select the pre-filled value (typing replaces it) rather than put the cursor after it."""
        self.question = question
        self.value = value
        self.placeholder = placeholder
        self.hint = hint

    def compose(self) -> ComposeResult:
        """Question, input, hint."""
        with Vertical(id="prompt"):
            yield Label(self.question, id="prompt-question")
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input", select_on_focus=self.select)
            yield Label(self.hint or "enter to confirm · escape to cancel", id="prompt-hint")
        yield Footer()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Answer with the text."""
        event.stop()
        self.action_confirm()

    def action_confirm(self) -> None:
        """enter: answer with the text (a priority key, so the footer shows it)."""
        self.dismiss(self.query_one(Input).value.strip() or None)

    def action_cancel(self) -> None:
        """Answer nothing."""
        self.dismiss(None)
