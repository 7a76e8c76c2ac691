"""Which code is the user's: a frame's file outside torch, gradtui (but its bundled examples)
and the standard library. Provenance names the user's line that made a node; the session names
where backward was called; both skip frames that are not the user's."""

from __future__ import annotations

import os
from typing import Any

from gradtui.model import places
from gradtui.model.places import STDLIB_DIRS as _STDLIB_DIRS


# A user's own mode forwarding the call to ours is not where the op was written.
SKIP_CODE_NAMES = frozenset({"__torch_function__", "__torch_dispatch__"})

is_user_file = places.is_user_file
"""Is `filename` the user's code? (places.py decides, for provenance, tracebacks and the UI alike.)"""


def started_by_user(frame: Any) -> bool:
    """Is the code that starts a thread the user's? (Skipping the stdlib, e.g. a
    ThreadPoolExecutor the user made; a pool that torch made is torch's.)"""
    while frame is not None and os.path.realpath(frame.f_code.co_filename).startswith(_STDLIB_DIRS) \
            and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and is_user_file(frame.f_code.co_filename)


def user_frame(frame: Any) -> Any:
    """The innermost user frame from `frame` outwards (outside torch, gradtui and the stdlib,
    and not a TorchFunctionMode's own __torch_function__), or None."""
    while frame is not None:
        code = frame.f_code
        if is_user_file(code.co_filename) and code.co_name not in SKIP_CODE_NAMES:
            return frame
        frame = frame.f_back
    return None


def innermost_user(frame: Any) -> tuple[str, int] | None:
    """(filename, lineno) of `user_frame(frame)`."""
    frame = user_frame(frame)
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno)
