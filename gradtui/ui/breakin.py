"""Ctrl-C while the script runs, an object the app owns (`GradtuiApp.break_in`): as in pdb and
pudb it breaks in. The first asks the engine to pause at the next backward node (`pause`) and
the command bar says what it waits for (the engine's answer: in the pass in flight, or
"running forward; pausing at the next backward") until the pause comes; a second one while it
waits offers to quit (and, attached, to detach)."""

from __future__ import annotations

from collections.abc import Callable

from gradtui.protocol import events as ev
from gradtui.ui.leaving import Leaving
from gradtui.ui.state import UIState
from gradtui.ui.widgets.command_bar import CommandBar

WAITING = "breaking in: pausing at the next backward node…"
"""What the bar says between the key and the engine's answer."""


class BreakIn:
    """Ctrl-C's break-in (see module doc): `press` on the key, `arrived` when a pause or the
    script's end ends the wait, `answered` with each command's answer (a refused `pause` ends it)."""

    def __init__(
        self, state: UIState, leaving: Leaving, bar: Callable[[], CommandBar], send: Callable[[str], int | None]
    ) -> None:
        self._state = state
        self._leaving = leaving
        self._bar = bar
        self._send = send
        self.waiting = False
        """A `pause` was sent and no pause has come since."""
        self._request: int | None = None
        """The request id the `pause` was sent under (its answer carries it)."""

    def press(self) -> None:
        """Ctrl-C: break in, or (waiting already) offer to quit."""
        if self._state.script_over:
            self._bar().answer("the script has ended: q to leave", ok=False)
        elif self._state.paused is not None:
            self._bar().answer("already paused: c continues, s steps, q quits")
        elif self.waiting:
            self._leaving.offer(
                "still running, waiting to break in at the next backward node: "
                "q stops the script, escape goes on waiting"
            )
        else:
            self.waiting = True
            self._bar().answer(WAITING)
            self._request = self._send("pause")

    def answered(self, result: ev.CommandResult) -> None:
        """A command's answer: the refusal of the `pause` sent (the script has ended) ends the
        wait, as a pause would."""
        if not result.ok and result.request is not None and result.request == self._request:
            self.arrived()

    def arrived(self) -> None:
        """A pause came (or the script ended): nothing is waited for now."""
        self.waiting = False
