"""`GRADTUI_NATIVE`: whether gradtui builds and uses its compiled posthooks.

The usual boolean spellings are understood (as environment switches are usually read), and a
value that is none of them is refused in one line rather than read as the default: a user who
wrote `GRADTUI_NATIVE=disabled` meant something, and silently building and loading native code
instead is the opposite of it.
"""

from __future__ import annotations

import enum
import os

ENV = "GRADTUI_NATIVE"


class Mode(enum.Enum):
    """What to do with the compiled posthooks."""

    AUTO = "auto"
    """Use them when built; when not, build them once in the background (quietly)."""
    ON = "on"
    """As auto, and say in one line why a run does not use them (being built, failed, refused)."""
    USE = "use"
    """Use them when built, never build (the test suite's workers, once its controller built them)."""
    OFF = "off"
    """The Python hooks only: nothing is built, nothing loaded, the cache is not touched."""


SPELLINGS: dict[str, Mode] = {
    **dict.fromkeys(("", "auto", "default"), Mode.AUTO),
    **dict.fromkeys(("1", "true", "yes", "on", "y", "enable", "enabled"), Mode.ON),
    **dict.fromkeys(("0", "false", "no", "off", "n", "none", "disable", "disabled"), Mode.OFF),
    "use": Mode.USE,
}
"""Every value understood (compared stripped and lower-cased)."""


class SettingError(ValueError):
    """`GRADTUI_NATIVE` has a value that is none of SPELLINGS: one line for the user."""


def mode() -> Mode:
    """`GRADTUI_NATIVE`'s mode (unset: auto); SettingError for a value not understood."""
    value = os.environ.get(ENV, "")
    try:
        return SPELLINGS[value.strip().lower()]
    except KeyError:
        raise SettingError(
            f"{ENV}={value!r} is not understood: use auto (the default), on (1, true, yes), "
            "off (0, false, no, none, disable) or use (never build)"
        ) from None
