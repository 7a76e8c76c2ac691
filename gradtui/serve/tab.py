"""`python -m gradtui.serve.tab ADDRESS`: the client process of one browser tab.

textual-serve starts it for each websocket, with Textual's web driver on its stdin/stdout. It
is `gradtui attach ADDRESS`'s UI (the agent's token from its runtime file, or GRADTUI_TOKEN),
with one difference: when the app ends without `q` (the tab was closed or reloaded, its SSH
tunnel dropped, `gradtui serve` stopped), it detaches from the agent, so the script runs on
with its breakpoints armed and the next tab attaches again. `q` in the tab asks first (stop
the script, or `D`: detach), as in `gradtui attach`. If it cannot reach the
agent, the tab shows why (in the UI's output pane) rather than a blank page. It is laid out at
the page's terminal size from its first frame (`page_size`, gradtui.serve.driver).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping

from textual import events
from textual.driver import Driver

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command
from gradtui.serve.driver import TabDriver
from gradtui.ui.app import GradtuiApp
from gradtui.wire.client import RemoteTarget
from gradtui.wire.runtime import parse_address, running_agents
from gradtui.wire.target import TargetError, TargetInfo

DETACH_TIMEOUT = 3.0
"""Seconds the detach may take before the app ends anyway (the agent sees the socket close)."""


class Unreachable:
    """A DebugTarget that only says why there is no agent to attach to (its start fails)."""

    def __init__(self, reason: str) -> None:
        self.info = TargetInfo("")
        self._reason = reason

    async def start(self) -> None:
        """Fail with the reason: the UI shows it."""
        raise TargetError(self._reason)

    def submit(self, command: Command) -> int:
        """Nothing to send to."""
        return 0

    async def batches(self) -> AsyncIterator[list[ev.Event]]:
        """No events."""
        batch: list[ev.Event]
        for batch in ():  # an async generator that yields nothing
            yield batch

    async def quit(self) -> None:
        """Nothing to stop."""

    async def detach(self) -> None:
        """Nothing to leave."""


class TabApp(GradtuiApp):
    """The UI of a browser tab: an app that ends without `q` detaches instead of quitting, and
    runs on Textual's web driver with the page's sizes kept in order (gradtui.serve.driver)."""

    def get_driver_class(self) -> type[Driver]:
        """The tab's web driver (textual-serve names Textual's own in TEXTUAL_DRIVER)."""
        return TabDriver

    async def on_unmount(self, event: events.Unmount) -> None:  # type: ignore[override]  # Textual hands it the event
        """Detach (GradtuiApp's own handler, which stops the target, is not run)."""
        if self.link.finished.is_set() or self.link.quitting:
            return  # ended, or `q`: GradtuiApp's handler has nothing left to do
        event.prevent_default()
        self.link.quitting = True
        try:
            await asyncio.wait_for(self.target.detach(), DETACH_TIMEOUT)
        except (TimeoutError, OSError):
            pass


def target_for(address: str) -> RemoteTarget | Unreachable:
    """The agent at `address`, with its token (GRADTUI_TOKEN, else its runtime file), as
    `gradtui attach` finds it."""
    try:
        host, port = parse_address(address)
        found = next((a for a in running_agents() if parse_address(a.address) == (host, port)), None)
    except ValueError as exc:
        return Unreachable(f"gradtui serve: {exc}")
    token = os.environ.get("GRADTUI_TOKEN") or (found.token if found else "")
    if not token:
        return Unreachable(
            f"gradtui serve: no runtime file names an agent at {address} (has it ended?); "
            "for an agent of another user or machine, start gradtui serve with GRADTUI_TOKEN set"
        )
    return RemoteTarget(token, address=(host, port), script=found.script if found else "")


def _die_with_parent() -> None:
    """Linux: get SIGKILL when `gradtui serve` dies, however it dies (the agent then sees its
    client go, and runs on)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def page_size(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """The size of the page's terminal, in cells, as textual-serve hands it to the tab process
    (COLUMNS and ROWS, measured by the page when it opened the websocket); None if absent.

    Given to the app explicitly: `GradtuiApp.run` removes COLUMNS from the environment (a
    terminal UI is sized by its terminal), and Textual's web driver, made after that, then
    started at its default 80 columns, so the first frame filled the left part of the page."""
    try:
        width, height = int(environ["COLUMNS"]), int(environ["ROWS"])
    except (KeyError, ValueError):
        return None
    return (width, height) if width > 0 and height > 0 else None


def main(argv: list[str]) -> int:
    """Run one tab's UI against the agent at argv[0]; returns the app's exit status."""
    _die_with_parent()
    if len(argv) != 1:
        print("usage: python -m gradtui.serve.tab ADDRESS", file=sys.stderr)
        return 2
    app = TabApp(target=target_for(argv[0]))
    app.run(size=page_size(os.environ))
    return app.return_code or app.exit_status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
