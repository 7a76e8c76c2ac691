"""`interact` (and `!`): a Python console at the pause, as pdb's `interact` and pudb's shell.

The code runs in the script's process, at the pause, as `!STATEMENT` runs it: in a namespace of
`g` (the incoming gradient), `node`, `module`, the call-site variables and `torch`, kept until the
engine moves on; `g = ...` edits the gradient as `set` does. The console is a multi-line
editor (a TextArea) over a log of what ran and what it printed: enter runs what is typed once it
is a complete statement (as the REPL decides: a block waits for an empty line), and adds a line
otherwise; up on the first line and down on the last walk the history; escape closes.
"""

from __future__ import annotations

import codeop
from collections.abc import Callable
from dataclasses import dataclass

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, RichLog, Static, TextArea

from gradtui.protocol import events as ev

INTRO = (
    "Python at the pause: g (the incoming gradient), node, module, the call-site variables, torch; "
    "what you bind stays until the engine moves on; g = ... edits the gradient (as set)."
)


def complete(source: str) -> bool:
    """Does `source` make a whole statement to run now, as the REPL decides? A block (`for`,
    `def`) waits for an empty line; text python cannot compile is run too (its error is the
    answer), and so are several simple statements (the engine runs them in turn)."""
    try:
        return codeop.compile_command(source, "<console>", "single") is not None
    except (SyntaxError, ValueError, OverflowError):
        return True


class ConsoleInput(TextArea):
    """The console's editor: enter runs a complete statement (`Run`), up and down at its first
    and last lines walk the history."""

    @dataclass
    class Run(Message):
        """A statement to run."""

        source: str

    def __init__(self, statements: list[str], **kwargs) -> None:
        """`statements`: the history, appended to (the caller keeps it from one console to the next)."""
        super().__init__(soft_wrap=True, tab_behavior="indent", show_line_numbers=False, **kwargs)
        self.statements = statements
        """What ran, oldest first (TextArea's own `history` is its undo)."""
        self._back = 0
        """How far back in the history the editor shows (0: the text being typed)."""

    async def _on_key(self, event: events.Key) -> None:
        row, _column = self.cursor_location
        last = self.document.line_count - 1
        match event.key:
            case "enter" if self.cursor_location == self.document.end and self.text.strip() and complete(self.text):
                event.stop()
                event.prevent_default()
                source = self.text.rstrip()
                if not self.statements or self.statements[-1] != source:
                    self.statements.append(source)
                self._back = 0
                self.clear()
                self.post_message(self.Run(source))
                return
            case "up" if row == 0 and self._back < len(self.statements):
                self._show_history(self._back + 1)
                event.stop()
                event.prevent_default()
                return
            case "down" if row == last and self._back > 0:
                self._show_history(self._back - 1)
                event.stop()
                event.prevent_default()
                return
        await super()._on_key(event)

    def _show_history(self, back: int) -> None:
        self._back = back
        self.text = self.statements[-back] if back else ""
        self.move_cursor(self.document.end)


class ConsoleScreen(ModalScreen[None]):
    """The console (see module doc): `send` sends a command line and gives its request id; the
    app hands every answer to `answered`, which shows those of this console's requests."""

    BINDINGS = [Binding("escape", "close", "close", priority=True)]
    """priority: before the editor, whose escape would move the focus."""

    def __init__(self, send: Callable[[str], object], where: str, history: list[str]) -> None:
        """`where`: the pause, as the console's title says it; `history`: the statements run in
        earlier consoles of this session, which this one's go after."""
        super().__init__()
        self._send = send
        self._where = where
        self._history = history
        self._mine: set[object] = set()

    def compose(self) -> ComposeResult:
        """The log over the editor."""
        with Vertical(id="console") as box:
            box.border_title = f"python · {self._where}"
            yield Static(INTRO, id="console-intro", markup=False)
            yield RichLog(id="console-log", wrap=True, markup=False, highlight=False)
            yield ConsoleInput(self._history, id="console-input")
        yield Footer()

    def on_mount(self) -> None:
        """Type at once."""
        self.query_one(ConsoleInput).focus()

    @property
    def log_lines(self) -> list[str]:
        """What the log shows, as text (for tests and the transcript)."""
        return [strip.text for strip in self.query_one(RichLog).lines]

    def on_console_input_run(self, message: ConsoleInput.Run) -> None:
        """Echo the statement, as the REPL's prompts show it, and send it as `!`."""
        log = self.query_one(RichLog)
        for i, line in enumerate(message.source.splitlines()):
            log.write((">>> " if i == 0 else "... ") + line)
        self._mine.add(self._send("!" + message.source))

    def answered(self, event: ev.CommandResult) -> None:
        """An answer the app got: shown here if it answers this console."""
        if event.request not in self._mine or not event.command.startswith("!"):
            return
        self._mine.discard(event.request)
        text = event.text.rstrip("\n")
        if text:
            self.query_one(RichLog).write(text if event.ok else f"error: {text}")

    def moved_on(self) -> None:
        """The engine resumed: the namespace is gone; a new pause starts a new one."""
        self.query_one(RichLog).write("-- the engine moved on: what you bound is gone (a new pause, a new namespace)")

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
