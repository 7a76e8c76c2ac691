"""The run's quit, in one place on the agent side.

Whatever hears the user quit (a typed `quit` at the session, at a job's hub or at a diverge
hold; a client's quit message; a child agent whose UI went) calls `RunQuit.quit`. That takes
the way out of the mode that runs the session (set once by whoever builds it, gradtui.agent.build:
a runner's stop, `gradtui.listen()`'s stop-debugging, a job rank's every-rank quit), and every
way ends by stopping the session (`stop`: the flag every hook checks, and the paused hook woken
to see it). With no way set (an in-process headless run) quitting is stopping the session: the
runner follows the flag itself.
"""

from __future__ import annotations

from collections.abc import Callable


class RunQuit:
    """The run's one quit path (see module doc): `quit` for the user's quit, `stop` for the
    session's own stop, `asked` for whoever must notice it."""

    def __init__(self, wake: Callable[[], None]) -> None:
        """`wake`: unblock the paused hook, if any, so it sees the flag."""
        self.asked = False
        """Has the session been told to stop? A plain attribute, not a call: every planned
        posthook reads it (set once by `stop`, on any thread; a bool is written whole)."""
        self.attend = False
        """Must a planned pass's hooks stop and look: asked to stop, or a break-in (`pause`) waits
        for the next node? Read per hooked node instead of `asked`, so a break-in costs a pass
        nothing until one is asked for."""
        self.flag = bytearray(1)
        """`attend` as one byte: what the compiled posthooks read (gradtui.engine.hooks.native); 1
        makes them call the Python posthook, which sees why."""
        self._wake = wake
        self._way: Callable[[], None] | None = None

    def take(self, way: Callable[[], None]) -> None:
        """Quit the run by `way` from now on (the mode's own; it ends by calling `stop`)."""
        self._way = way

    def quit(self) -> None:
        """The user quit the run: the mode's way out, or, with none, stop the session."""
        (self._way or self.stop)()

    def stop(self) -> None:
        """Stop the session at the next opportunity: a paused hook raises GradtuiQuit, as will the next one."""
        self.asked = True
        self.attend_to(True)
        self._wake()

    def attend_to(self, wanted: bool) -> None:
        """A break-in waits for the next node (`wanted`), or waits no more: the hooks look (or,
        unless asked to stop, stop looking)."""
        self.attend = wanted or self.asked
        self.flag[0] = 1 if self.attend else 0

    def clear(self) -> None:
        """Debug on as if no quit had come (`gradtui.listen()` once the stopped pass has ended)."""
        self.asked = False
        self.attend_to(False)


# ---- what user code raised, told apart from gradtui's own quit and said in one short line:
# shared by the edits (an expression that fails) and the summaries (a value whose repr fails).


def raised_by_user(exc: BaseException) -> bool:
    """Did user code raise `exc` (so it is a refusal), rather than gradtui's own control flow?

    Every Exception is the user's; so is a BaseException that is not gradtui's (KeyboardInterrupt,
    GeneratorExit, SystemExit, a script's own). gradtui's (GradtuiQuit: raised in the script's
    thread to quit, even in the middle of an expression) must unwind the script.
    """
    if isinstance(exc, Exception):
        return True
    module = getattr(type(exc), "__module__", None)  # a class made in eval("type(...)", {}) has none
    return not (isinstance(module, str) and module.startswith("gradtui."))


def failure_text(exc: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, short (torch's dispatch errors run to pages)."""
    first = (str(exc).splitlines() or [""])[0]
    first = first if len(first) <= limit else first[:limit] + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
