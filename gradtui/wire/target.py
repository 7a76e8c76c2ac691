"""`DebugTarget`: the one small interface every client (the UI, headless attach) programs against.

A target is something to debug: a live agent over the wire (a child the UI started, or one
listening elsewhere), or a recording. A client submits commands and gets a request id
back (a command it parsed where the line entered, never the line); it reads the target's events as an async stream of batches (the order they happened);
it can quit the target (stop the script) or detach from it (leave it running). It never
reads a `Session`: breakpoints, pauses and the script's end all arrive as events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command


@dataclass(frozen=True)
class TargetInfo:
    """What a client knows of its target besides its events."""

    script: str
    argv: tuple[str, ...] = ()
    pid: int | None = None
    kind: str = "agent"
    """`agent` (live) or `recording`."""
    extra: dict = field(default_factory=dict, compare=False)


class DebugTarget(Protocol):
    """What the UI and headless clients drive (see module doc)."""

    info: TargetInfo

    async def start(self) -> None:
        """Connect (or start the script); raises `TargetError` with a one-line reason if it cannot."""

    def submit(self, command: Command) -> int:
        """Send a command (parsed where its line entered); its `CommandResult` carries the
        returned request id."""

    def batches(self) -> AsyncIterator[list[ev.Event]]:
        """The target's events, a batch at a time, until it ends (after its ScriptFinished)."""

    async def quit(self) -> None:
        """Stop the script and wait (briefly) until it is gone."""

    async def detach(self) -> None:
        """Leave the target running on without this client."""


class TargetError(Exception):
    """A target could not be reached or started; the message is one line for the user."""
