"""What a replay understands beyond the command language (`pass N`), its help, and opening a
recording for replay with a one-line reason when it cannot be (shared by `gradtui replay` and
`gradtui export`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gradtui.model.commands import HELP, Command, CommandError, parse, parse_int
from gradtui.record import schema
from gradtui.record.reader import Recording
from gradtui.wire.target import TargetError


@dataclass(frozen=True, slots=True)
class ShowPass(Command):
    """`pass N`: show recorded pass N, paused where the run stopped in it (else its first node)."""

    index: int


@dataclass(frozen=True, slots=True)
class FlowOf(Command):
    """`flow N`: recorded pass N's gradient flow (every pass has one, per-node data or not)."""

    index: int


def parse_replay(text: str) -> Command:
    """A replay command line: `pass N`, `flow N`, else the command language of `gradtui.model.commands`."""
    word, _, rest = text.strip().partition(" ")
    if word.lower() == "pass":
        if not rest.strip():
            raise CommandError("pass needs a pass number, e.g. pass 30")
        return ShowPass(text.strip(), parse_int(rest.strip(), "pass", minimum=0))
    if word.lower() == "flow" and rest.strip():
        return FlowOf(text.strip(), parse_int(rest.strip(), "flow", minimum=0))
    return parse(text)


REPLAY_HELP = HELP + """
pass N: show recorded pass N · flow N: pass N's gradient flow (any pass)
(replay is read-only: scale, zero, clip, set, print EXPR and why need a live run)"""


def open_recording(path: str) -> Recording:
    """Open `path` for replay, or raise TargetError with a one-line reason."""
    if not os.path.exists(path):
        raise TargetError("no such file")
    if os.path.isdir(path):
        raise TargetError("it is a directory")
    try:
        return Recording(path)
    except schema.NotARecording as exc:
        raise TargetError(str(exc)) from None


def ranges(indexes: list[int]) -> str:
    """`26-30, 35`: sorted indexes as runs."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
