"""What gradtui itself says, an object the app owns (`GradtuiApp.transcript`): its lines in the
output pane (command lines echoed, their answers under them, how the script ended, a bug of the
UI) and the first line of an answer in the command bar.
"""

from __future__ import annotations

import traceback

from textual.app import App

from gradtui.protocol import events as ev
from gradtui.ui import fmt
from gradtui.ui.tracebacks import render_error
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.output_log import ANSWER_STYLE, ECHO_STYLE, ERROR_STYLE, NOTE_STYLE, OutputLog


class Transcript:
    """gradtui's lines in `app`'s output pane and command bar (see module doc)."""

    def __init__(self, app: App[int]) -> None:
        self.app = app
        self._echoed: str | None = None
        """The command line last echoed to the output pane whose answer has not come yet."""
        self._echo_mark: int | None = None
        """The output pane's line of the command echoed last (its answer is shown from there)."""

    def _log(self) -> OutputLog:
        return self.app.query_one(OutputLog)

    def _bar(self) -> CommandBar:
        return self.app.query_one(CommandBar)

    def write(self, text: str, style: str = "") -> None:
        """Add whole lines of gradtui's own to the output pane (the script's go through
        `OutputLog.write_stream`, which keeps its progress bars on one line)."""
        self._log().write_lines(text, style)

    def echo(self, text: str) -> None:
        """Write a command line to the output pane, once: its answer follows it there."""
        self._echo_mark = self._log().mark()
        self.write(f"(gradtui) {text}", ECHO_STYLE)
        self._echoed = text

    def result(self, event: ev.CommandResult) -> None:
        """The whole answer goes to the output pane, under its command (echoed once: a typed line
        is echoed when sent, a key's command here); the bar shows its first line."""
        self._bar().answer(event.text, event.ok)
        if event.text.strip():
            log = self._log()
            if self._echoed != event.command:
                self.echo(event.command)
            start = self._echo_mark if self._echo_mark is not None else log.mark()
            self.write(event.text, ANSWER_STYLE if event.ok else ERROR_STYLE)
            log.reveal(start)  # a long answer is read from its command line down, not from its tail
        self._echoed = None
        self._echo_mark = None

    def failed(self, reason: str) -> None:
        """The target could not be started."""
        self.write(f"gradtui: {reason}", ERROR_STYLE)
        self._bar().answer(reason, ok=False)

    def ui_error(self, exc: Exception) -> None:
        """Show a bug of the UI itself in the output pane instead of crashing."""
        text = "".join(traceback.format_exception(exc)).rstrip()
        self.write(f"gradtui UI error (please report it):\n{text}", ERROR_STYLE)
        self._bar().answer(f"gradtui UI error: {exc!r} (details in the output pane)", ok=False)

    def script_finished(self, event: ev.ScriptFinished, home: str) -> None:
        """How the script ended: its traceback (paths relative to `home`), a closing line, and in
        the bar what can be done now."""
        if event.error is not None and event.error.frames:
            log = self._log()
            log.write_lines("")  # the traceback starts a line of its own
            drawn, note = render_error(event.error, home, log.scrollable_content_region.width - 1)
            log.write_stream(drawn)
            if note:
                log.write_lines(note, NOTE_STYLE)
        elif event.traceback:  # a SyntaxError has no frames: its file and line are in the text
            self.write(fmt.user_traceback(event.traceback, home), ERROR_STYLE)
        word = "stopped" if event.quit else f"exited with status {event.exit_status}"
        if event.how and event.exit_status is None:  # a recording that does not say how its run ended
            word = event.how
        elif event.how:
            word = f"ended: its process {event.how}"  # os._exit, a signal: the agent could not say
        self.write(f"── the script {word} · q to leave", NOTE_STYLE)
        # Whatever the bar said (`gradient now …`) was about a pass that is over.
        self._bar().answer(
            f"the script {word} · [ ] or P browse its passes · q to leave",
            ok=event.quit or event.exit_status == 0,
            keep=True,
        )
