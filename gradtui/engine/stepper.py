"""How the engine moves between pauses: the mode, the command queue and the pause in progress.

The session owns one `Stepper`. Other threads put commands on its queue (`put`); the paused hook
takes them (`take`); commands that resume set the mode. Nothing here knows about hooks or passes:
it is the small state every part of the session agrees on, kept in one place instead of a bare
string written from several files.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import torch

from gradtui.model.commands import Command, Continue


class Mode(Enum):
    """What the engine does after a pause: pause at the next node, run on until a breakpoint,
    or run to the end of the pass and pause at the first node of the next one."""

    STEP = "step"
    CONTINUE = "continue"
    FINISH = "finish"


@dataclass
class Pause:
    """The state of a pause: the node, and the gradients the commands edit."""

    node: int
    phase: str
    grads: tuple[torch.Tensor | None, ...]
    edited: bool = False
    late: bool = False
    """The node has already run (a value breakpoint read back after it): nothing to edit."""
    editable_after: bool = False
    """Paused in the node's posthook, which sends on what an edit makes (a planned pass's `nan`)."""

    @property
    def editable(self) -> bool:
        """Can an edit still change what flows on from here?"""
        return not self.late and (self.phase == "before" or self.editable_after)


class Queued(NamedTuple):
    """A command waiting for the paused hook."""

    command: Command
    meant_for: Pause | None
    """The pause it was typed at (None: any)."""
    request: int | None = None
    """The client's id for it, carried by every CommandResult that answers it."""


class Stepper:
    """The mode, the command queue and the pause in progress (see module doc)."""

    def __init__(self) -> None:
        self.mode = Mode.STEP
        """Pause at the first node of the first pass, as pdb does."""
        self.pause: Pause | None = None
        """The pause the engine is blocked in, or None while it runs."""
        self._queue: queue.Queue[Queued] = queue.Queue()

    @property
    def stepping(self) -> bool:
        """Does the engine pause at every node?"""
        return self.mode is Mode.STEP

    def put(self, command: Command, meant_for: Pause | None, request: int | None = None) -> None:
        """Queue a command for the paused hook (thread-safe)."""
        self._queue.put(Queued(command, meant_for, request))

    def take(self, timeout: float) -> Queued:
        """The next queued command; raises queue.Empty after `timeout` seconds without one."""
        return self._queue.get(timeout=timeout)

    def run_on(self) -> None:
        """Run on until a breakpoint hits; resume the pause in progress, if any."""
        self.mode = Mode.CONTINUE
        self.resume()

    def resume(self) -> None:
        """Let the pause in progress (if any) go on, in the present mode's way."""
        if self.pause is not None:
            self.put(Continue("continue"), None)

    def next_pass(self) -> None:
        """A pass starts: after `finish`, its first node pauses."""
        if self.mode is Mode.FINISH:
            self.mode = Mode.STEP
