"""The exception a script ended with, as data: what `ScriptFinished.error` holds (the runner
makes it from the traceback, gradtui's frames trimmed; a client renders it, the UI with Rich's
Traceback). Plain data, no torch: it travels over the wire as the events do (gradtui.wire.codec).
"""

from __future__ import annotations

import msgspec


class FrameInfo(msgspec.Struct, frozen=True):
    """One frame of a script's traceback, as `traceback.FrameSummary` gives it."""

    filename: str
    lineno: int
    name: str
    """The function's name (`<module>` at the top level)."""
    line: str
    """The source line, stripped ("" when the file cannot be read)."""


class ErrorInfo(msgspec.Struct, frozen=True):
    """The exception a script ended with, as data a client renders (Rich's Traceback in the UI).

    `frames` are those of `ScriptFinished.traceback`: every frame but gradtui's own, outermost
    first (torch's and the standard library's included, as python prints them; a client that
    folds library frames asks `gradtui.protocol.places.is_user_file`). Chained exceptions
    (`__cause__`, `__context__`) are in the traceback text only."""

    exc_type: str
    """`ValueError`; qualified by module outside builtins and __main__ (`torch.OutOfMemoryError`)."""
    message: str
    frames: tuple[FrameInfo, ...]
