"""How the app ends, an object the app owns (`GradtuiApp.leaving`): `q` stops the script and
leaves (attached to a script this UI did not start, it asks first and offers to detach), `D`
detaches, a signal quits (a second one at once). What it stops or leaves is the app's TargetLink.
"""

from __future__ import annotations

import os

from textual.app import App

from gradtui.protocol.events import QUIT_STATUS
from gradtui.ui.client import TargetLink
from gradtui.ui.screens.leave import LeaveScreen
from gradtui.ui.widgets.command_bar import CommandBar


class Leaving:
    """Ends `app` and stops or leaves the target of `link` (see module doc)."""

    def __init__(self, app: App[int], link: TargetLink) -> None:
        self.app = app
        self.link = link

    async def quit(self) -> None:
        """Stop the script and leave; attached, first say so and offer to detach instead."""
        if self.link.attached and not self.link.finished.is_set() and not self.link.quitting:
            if not isinstance(self.app.screen, LeaveScreen):
                self.app.push_screen(LeaveScreen(os.path.basename(self.link.target.info.script)), self._left)
            return
        await self._quit_now()

    def offer(self, question: str) -> None:
        """Ask `question`, offering to stop the script and leave (attached, to detach too);
        escape stays (a second Ctrl-C while a break-in waits)."""
        if not isinstance(self.app.screen, LeaveScreen):
            self.app.push_screen(
                LeaveScreen(os.path.basename(self.link.target.info.script), question, detach=self.link.attached),
                self._left,
            )

    async def _left(self, choice: str | None) -> None:
        if choice == "quit":
            await self._quit_now()
        elif choice == "detach":
            await self.detach()

    async def _quit_now(self) -> None:
        if not self.link.finished.is_set():
            # q just after the script's end (its process not gone yet, its end maybe not yet shown)
            # leaves with the script's status
            if not self.link.ended():
                self.link.exit_status = QUIT_STATUS
            await self.link.stop()
        self.app.exit(self.link.exit_status)

    async def detach(self) -> None:
        """Leave the script running without this UI (attached only), its breakpoints armed."""
        why = self.link.refuse_detach()
        if why is not None:
            self.app.query_one(CommandBar).answer(f"detach: {why}", ok=False)
        elif self.link.finished.is_set():
            self.app.exit(self.link.exit_status)
        else:
            await self.link.detach()
            self.app.exit(
                0, message="gradtui: detached: the script runs on; its breakpoints stay armed for the next client"
            )

    def signalled(self) -> None:
        """SIGINT, SIGTERM or SIGHUP to the UI: stop the target and leave (a second one: at once).

        `run_action` is a coroutine: called from this (synchronous) handler it never ran, so
        every signal was ignored. The quit is scheduled instead, and `quitting` is set here so a
        second signal before it has run kills the agent and exits at once."""
        if self.link.quitting:
            self.link.kill_now()
            self.app.exit(QUIT_STATUS)
            return
        self.link.quitting = True
        self.app.call_later(self._quit_now)
