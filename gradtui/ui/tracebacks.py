"""The script's exception drawn by Rich's `Traceback` from structured frames (no text parsing).

The agent sends the exception as `ErrorInfo` (type, message, frames); this turns it into the
ANSI text of a Rich traceback for the output pane: the user's frames with paths relative to
the script's folder, the frames inside torch, gradtui or the standard library counted in one
line under it (they are not where a user's bug is).
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.traceback import Frame, Stack, Trace, Traceback

from gradtui.protocol.errors import ErrorInfo
from gradtui.protocol.places import is_user_file, library_of
from gradtui.ui.fmt import short_path


def render_error(error: ErrorInfo, home: str | None, width: int) -> tuple[str, str]:
    """`error` as Rich draws a traceback `width` columns wide (ANSI text), and a line that
    counts the library frames left out ("" when there are none)."""
    user = [f for f in error.frames if is_user_file(f.filename)]
    frames = [Frame(filename=short_path(f.filename, home), lineno=f.lineno, name=f.name, line=f.line) for f in user]
    trace = Trace(stacks=[Stack(exc_type=error.exc_type, exc_value=error.message, frames=frames)])
    out = io.StringIO()
    console = Console(file=out, width=max(width, 30), force_terminal=True, color_system="256")
    console.print(Traceback(trace=trace, width=max(width, 30), extra_lines=0, word_wrap=True))
    hidden = [library_of(f.filename) for f in error.frames if not is_user_file(f.filename)]
    note = ""
    if hidden:
        names = ", ".join(dict.fromkeys(name for name in hidden if name))
        note = f"… {len(hidden)} frame{'s' if len(hidden) > 1 else ''} in {names} left out"
    return out.getvalue(), note
