"""The words of the command language that a breakpoint spec shares with commands: numbers
read one way everywhere, the one refusal type, a long text quoted for a message. Its own module,
so that the command grammar (gradtui.protocol.commands) and the spec grammar
(gradtui.protocol.breakpoints) both import it and not each other."""

from __future__ import annotations

import math


class CommandError(ValueError):
    """A line that is not a valid command; the message says what is wrong."""


def parse_float(word: str, what: str) -> float:
    """`word` as a finite number, read as `float()` reads it (`1e-3`, `1_000`, `٣`), or a
    CommandError that starts with `what` (`nan` and `inf` are refused: no command wants them).

    Every number of the command language goes through here or `parse_int`, so what one command
    accepts the others do too, and nothing `str` methods accept but `float()` refuses (`²`)
    gets further than a refusal.
    """
    try:
        value = float(word)
    except (ValueError, OverflowError):
        raise CommandError(f"{what}: {word!r} is not a number") from None
    if not math.isfinite(value):
        raise CommandError(f"{what}: {word!r} must be finite")
    return value


def parse_int(word: str, what: str, minimum: int | None = None) -> int:
    """`word` as a whole number, read as `int()` reads it (`12`, `+3`, `١٢`), at least `minimum`,
    or a CommandError that starts with `what` (`²` is a digit to `str.isdigit()`, not to `int()`)."""
    try:
        value = int(word)
    except ValueError:
        raise CommandError(f"{what}: {word!r} is not a whole number") from None
    if minimum is not None and value < minimum:
        raise CommandError(f"{what}: {word!r} must be at least {minimum}")
    return value


def shown(text: str, limit: int = 80) -> str:
    """`text` quoted for a message, cut to about `limit` characters (a pasted page stays readable)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"
