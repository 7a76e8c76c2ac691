"""What user code raised, told apart from gradtui's own control flow and said in one short line:
shared by the edits (an expression that fails) and the summaries (a value whose repr fails),
so neither imports the other."""

from __future__ import annotations


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
