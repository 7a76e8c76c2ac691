"""Ctrl-C while the script runs, an object the app owns (`GradtuiApp.break_in`): as in pdb and
pudb it breaks in. The first asks the engine to pause at the next backward node (`pause`) and
the command bar says what it waits for (the engine's answer: in the pass in flight, or
"running forward; pausing at the next backward") until the pause comes; a second one while it
waits offers to quit (and, attached, to detach)."""

from __future__ import annotations

from collections.abc import Callable

from gradtui.ui.leaving import Leaving
from gradtui.ui.state import UIState
from gradtui.ui.widgets.command_bar import CommandBar

WAITING = "breaking in: pausing at the next backward node…"
"""What the bar says between the key and the engine's answer."""


class BreakIn:
    """Ctrl-C's break-in (see module doc): `press` on the key, `arrived` when a pause or the
    script's end ends the wait."""

    def __init__(
        self, state: UIState, leaving: Leaving, bar: Callable[[], CommandBar], send: Callable[[str], object]
    ) -> None:
        self._state = state
        self._leaving = leaving
        self._bar = bar
        self._send = send
        self.waiting = False
        """A `pause` was sent and no pause has come since."""

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
            self._send("pause")

    def arrived(self) -> None:
        """A pause came (or the script ended): nothing is waited for now."""
        self.waiting = False
