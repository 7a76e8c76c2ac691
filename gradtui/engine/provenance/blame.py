"""Warnings that torch raises inside gradtui's own frames are shown at the user's line.

A warning from C++ (TORCH_WARN) names the innermost Python frame. Under provenance that is the
mode's `__torch_function__` (or the `Function.apply` wrapper), not the user's line a plain run
names (`t[[[0, 1]]]` warned at provenance.py instead of train.py:12), and Python's "show once
per line" registry was keyed by gradtui's one line, so the same warning from two user lines
showed once. While installed, `warnings._showwarnmsg` (what the interpreter calls to show a
warning) moves such a warning to the frame that called into gradtui's frame, and applies the
filters and the once-per-line registry as Python would have for that frame.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

_installed: dict[str, Any] = {}


def install(codes: frozenset[CodeType], filename: str, module_globals: dict[str, Any]) -> None:
    """Re-home warnings raised in frames running `codes` (functions of `filename`, a module with
    `module_globals`) to their callers' lines; a second call does nothing."""
    if _installed:
        return
    original: Callable[[Any], None] = warnings._showwarnmsg  # type: ignore[attr-defined]

    def showwarnmsg(msg: warnings.WarningMessage) -> None:
        if msg.filename == filename:
            frame: FrameType | None = sys._getframe(1)
            while frame is not None and frame.f_code not in codes:
                frame = frame.f_back
            if frame is not None and frame.f_back is not None:
                caller = frame.f_back
                _forget(module_globals, msg)
                if not _should_show(msg, caller):
                    return
                msg = warnings.WarningMessage(
                    msg.message, msg.category, caller.f_code.co_filename, caller.f_lineno, msg.file, None, msg.source
                )
        original(msg)

    _installed.update(original=original, wrapper=showwarnmsg)
    warnings._showwarnmsg = showwarnmsg  # type: ignore[attr-defined]


def uninstall() -> None:
    """Put `warnings._showwarnmsg` back (unless someone replaced ours meanwhile)."""
    if not _installed:
        return
    if warnings._showwarnmsg is _installed["wrapper"]:  # type: ignore[attr-defined]
        warnings._showwarnmsg = _installed["original"]  # type: ignore[attr-defined]
    _installed.clear()


def _forget(module_globals: dict[str, Any], msg: warnings.WarningMessage) -> None:
    """Drop what the interpreter noted in gradtui's module registry for this warning, so the
    next one is decided for its own line."""
    registry = module_globals.get("__warningregistry__")
    if registry:
        text = str(msg.message)
        registry.pop((text, msg.category, msg.lineno), None)
        registry.pop((text, msg.category, 0), None)


def _action(text: str, category: type, module: str, lineno: int) -> str:
    for action, message, kind, mod, line in warnings.filters:
        if (
            (message is None or message.match(text))
            and issubclass(category, kind)
            and (mod is None or mod.match(module))
            and (line == 0 or line == lineno)
        ):
            return action
    return warnings.defaultaction  # type: ignore[attr-defined]  # CPython's module default, not in typeshed


def _should_show(msg: warnings.WarningMessage, caller: Any) -> bool:
    """Python's decision for this warning at `caller`'s line (warnings.warn_explicit's rules)."""
    text, category, lineno = str(msg.message), msg.category, caller.f_lineno
    action = _action(text, category, caller.f_globals.get("__name__", "<string>"), lineno)
    match action:
        case "ignore":
            return False
        case "error":
            raise msg.message if isinstance(msg.message, Warning) else category(text)
        case "always" | "once":  # "once" was already decided process-wide by the interpreter
            return True
    registry = caller.f_globals.setdefault("__warningregistry__", {})
    key = (text, category, lineno)
    if registry.get(key):
        return False
    registry[key] = True
    if action == "module":
        if registry.get((text, category, 0)):
            return False
        registry[(text, category, 0)] = True
    return True
