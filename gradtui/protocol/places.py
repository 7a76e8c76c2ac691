"""Whose code is this file? The one answer provenance, tracebacks and the UI share.

User code is what the user wrote or chose to run: their scripts, code typed at a prompt or in
a notebook cell (`<stdin>`, `<ipython-input-…>`), gradtui's bundled examples, and third-party
packages in site-packages (a model from `transformers` is the user's model: its lines are
where its nodes come from). Not user code: torch, gradtui itself, the standard library and
frozen modules (`<frozen runpy>`). Provenance names the user's line that made a node and the
session names where backward was called from the user's frames (`user_frame`, `innermost_user`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
from typing import Any


def _dir_of(path: str) -> str:
    return os.path.join(os.path.dirname(os.path.realpath(path)), "")


def _torch_file() -> str:
    """torch's `__init__.py`, found without importing torch (clients never import it: seconds)."""
    module = sys.modules.get("torch")
    file = getattr(module, "__file__", None)
    if module is not None and file:
        return file
    spec = importlib.util.find_spec("torch")
    return spec.origin if spec is not None and spec.origin else os.path.join(os.sep, "nonexistent", "torch", "x")


TORCH_DIR = _dir_of(_torch_file())
GRADTUI_DIR = os.path.join(os.path.dirname(_dir_of(__file__).rstrip(os.sep)), "")
_EXAMPLES_DIR = os.path.join(GRADTUI_DIR, "examples", "")
_paths = sysconfig.get_paths()
STDLIB_DIRS = tuple({_dir_of(os.path.join(_paths[k], "x")) for k in ("stdlib", "platstdlib")})
# site-packages usually sits inside the stdlib dir; checked first.
_SITE_DIRS = tuple({_dir_of(os.path.join(_paths[k], "x")) for k in ("purelib", "platlib")})


@functools.lru_cache(maxsize=4096)
def library_of(path: str) -> str | None:
    """`torch`, `gradtui` or `python` (the standard library, frozen modules) for a file that is
    not user code; None for user code. Cached: provenance asks per forward call."""
    if path.startswith("<frozen"):
        return "python"
    if path.startswith("<"):
        return None  # <stdin>, <string>, notebook cells: code the user typed
    full = os.path.realpath(path)
    if full.startswith(TORCH_DIR):
        return "torch"
    if full.startswith(GRADTUI_DIR):
        return None if full.startswith(_EXAMPLES_DIR) else "gradtui"
    if full.startswith(_SITE_DIRS):
        return None
    return "python" if full.startswith(STDLIB_DIRS) else None


def is_user_file(path: str) -> bool:
    """Is `path` user code (see the module doc)?"""
    return library_of(path) is None


def is_gradtui_file(path: str) -> bool:
    """Is `path` gradtui's own machinery (not its bundled examples)? Tracebacks drop these frames."""
    return library_of(path) == "gradtui"


SKIP_CODE_NAMES = frozenset({"__torch_function__", "__torch_dispatch__"})
"""A user's own mode forwarding the call to ours is not where the op was written."""


def started_by_user(frame: Any) -> bool:
    """Is the code that starts a thread the user's? (Skipping the stdlib, e.g. a
    ThreadPoolExecutor the user made; a pool that torch made is torch's.)"""
    while (
        frame is not None
        and os.path.realpath(frame.f_code.co_filename).startswith(STDLIB_DIRS)
        and not is_user_file(frame.f_code.co_filename)
    ):
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
