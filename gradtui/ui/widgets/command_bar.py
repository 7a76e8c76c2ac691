"""The command bar: an answer line above an Input that takes the full command language."""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Input, Static


class HistoryInput(Input):
    """An Input with shell-like history on up/down; escape leaves it."""

    BINDINGS = [
        Binding("up", "history(-1)", "previous", show=False),
        Binding("down", "history(1)", "next", show=False),
        Binding("escape", "leave", "leave", show=False),
    ]

    @dataclass
    class Leave(Message):
        """The user pressed escape: give the focus back."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.history: list[str] = []
        self._index = 0
        self._draft = ""

    def remember(self, text: str) -> None:
        """Add a submitted line to the history (no immediate repeats)."""
        if text and (not self.history or self.history[-1] != text):
            self.history.append(text)
        self._index = len(self.history)
        self._draft = ""

    def action_history(self, delta: int) -> None:
        """Show the previous (-1) or next (+1) line of the history."""
        if not self.history:
            return
        if self._index == len(self.history):
            self._draft = self.value
        self._index = max(0, min(len(self.history), self._index + delta))
        self.value = self.history[self._index] if self._index < len(self.history) else self._draft
        self.cursor_position = len(self.value)

    def action_leave(self) -> None:
        """Drop the half-typed line (or the history line shown) and give the focus back, so
        the next `:` starts empty, as Escape does in a shell's or vim's command line."""
        self.value = ""
        self._index = len(self.history)
        self._draft = ""
        self.post_message(self.Leave())


class CommandBar(Vertical):
    """Answer line + command input; posts `Submitted` with the typed line."""

    @dataclass
    class Submitted(Message):
        """The user entered a command line."""

        text: str

    answer_text = ""
    """The whole of the last answer shown (the line shows its first line)."""
    error = False
    """The line shows a refusal (cleared by the next thing that works: `clear_error`)."""

    HINT = "type : then a command · / find · P passes · w flow · m modules · ? help"

    def compose(self) -> ComposeResult:
        """The answer line, then the input."""
        yield Static(Content.styled(self.HINT, "$text-muted"), id="answer")
        yield HistoryInput(
            placeholder="command — step, continue, break nan, scale 0.5, print, help…",
            id="command-input",
            select_on_focus=False,
        )

    def clear_error(self) -> None:
        """A later action worked: a refusal shown is stale, the hint comes back."""
        if self.error:
            self.error = False
            self.answer_text = ""
            self.query_one("#answer", Static).update(Content.styled(self.HINT, "$text-muted"), layout=False)

    @property
    def input(self) -> HistoryInput:
        """The input widget."""
        return self.query_one(HistoryInput)

    def answer(self, text: str, ok: bool = True, keep: bool = False) -> None:
        """Show the first line of an answer (errors in red); when it has more lines or is cut
        to the width, say that the whole answer is in the output pane (it always is). A refusal
        goes when a later action works (`clear_error`) unless `keep` (how the script ended)."""
        self.answer_text = text
        self.error = not ok and not keep
        first = text.strip().splitlines()[0] if text.strip() else ""
        room = max(10, (self.size.width or 80) - 4)
        more = ""
        if "\n" in text.strip() or cell_len(first) > room:
            more = "  ↳ whole answer in the output pane (o)"
            cut = max(8, room - len(more))
            if cell_len(first) > cut:
                first = first[: cut - 1] + "…"
        style = "$text-success" if ok else "bold $text-error"
        # One row whatever the text (height 1, no wrap, in the css): no layout of the screen.
        self.query_one("#answer", Static).update(
            Content.assemble(
                ("✓ " if ok else "✗ ", style), (first, "" if ok else "$text-error"), (more, "$text-muted")
            ),
            layout=False,
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Send the line on, remember it, clear the input."""
        event.stop()
        text = event.value.strip()
        self.input.remember(text)
        self.input.value = ""
        if text:
            self.post_message(self.Submitted(text))
