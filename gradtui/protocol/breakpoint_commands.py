"""`break`, `delete` and `breakpoints` on a set of breakpoints: the one handler that a live
session (gradtui.engine.dispatch) and a replay (gradtui.record.replay) answer them with, and
that a job's hub (gradtui.distributed.hub) asks which commands change the breakpoints."""

from __future__ import annotations

from collections.abc import Callable

from gradtui.protocol.breakpoints import Breakpoint, Breakpoints
from gradtui.protocol.commands import Break, Command, Delete, ListBreakpoints

CHANGES = (Break, Delete)
"""The commands after whose answer a target says BreakpointsChanged."""


def answer(
    breakpoints: Breakpoints,
    command: Command,
    *,
    notes: Callable[[Breakpoint], list[str]] = lambda bp: [],
    listing: Callable[[], list[str]] = lambda: [],
) -> str | None:
    """Run a breakpoint command on `breakpoints`; its answer, or None if `command` is not one
    (CommandError: a `delete` of a breakpoint that is not there).

    `notes`: what the target says about a breakpoint just added (it cannot stop where it
    names...), each in parentheses after it; `listing`: lines the target adds under the list."""
    match command:
        case Break(spec=spec):
            bp = breakpoints.add(spec)
            return f"breakpoint {bp.number} at {bp.spec.text}" + "".join(f" ({note})" for note in notes(bp))
        case Delete(number=number):
            gone = breakpoints.delete(number)
            return "deleted " + (", ".join(str(bp.number) for bp in gone) if gone else "nothing")
        case ListBreakpoints():
            return "\n".join([*([str(bp) for bp in breakpoints] or ["no breakpoints"]), *listing()])
    return None
