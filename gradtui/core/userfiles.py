"""Which code is the user's: a frame's file outside torch, gradtui (but its bundled examples)
and the standard library. Provenance names the user's line that made a node; the session names
where backward was called; both skip frames that are not the user's."""

from __future__ import annotations

import os
import sysconfig
from typing import Any

import torch


def _dir_of(path: str) -> str:
    return os.path.join(os.path.dirname(os.path.realpath(path)), "")


_TORCH_DIR = _dir_of(torch.__file__)
_GRADTUI_DIR = os.path.join(os.path.dirname(_dir_of(__file__).rstrip(os.sep)), "")
_GRADTUI_EXAMPLES = os.path.join(_GRADTUI_DIR, "examples", "")  # the bundled demo is user code
_paths = sysconfig.get_paths()
_STDLIB_DIRS = tuple({_dir_of(os.path.join(_paths[k], "x")) for k in ("stdlib", "platstdlib")})
# site-packages usually sits inside the stdlib dir; third-party code counts as the user's.
_SITE_DIRS = tuple({_dir_of(os.path.join(_paths[k], "x")) for k in ("purelib", "platlib")})
# A user's own mode forwarding the call to ours is not where the op was written.
SKIP_CODE_NAMES = frozenset({"__torch_function__", "__torch_dispatch__"})


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return False
    if filename.startswith("<"):
        return True  # <stdin>, <string>, notebook cells: code the user typed
    path = os.path.realpath(filename)
    if path.startswith(_TORCH_DIR):
        return False
    if path.startswith(_GRADTUI_DIR) and not path.startswith(_GRADTUI_EXAMPLES):
        return False
    return not path.startswith(_STDLIB_DIRS) or path.startswith(_SITE_DIRS)


_user_files: dict[str, bool] = {}  # filename -> _is_user_file(filename)


def is_user_file(filename: str) -> bool:
    """Is `filename` the user's code (not torch's, gradtui's or the stdlib's; site-packages and
    code typed at a prompt are the user's)? Remembered per filename."""
    is_user = _user_files.get(filename)
    if is_user is None:
        is_user = _user_files[filename] = _is_user_file(filename)
    return is_user


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
