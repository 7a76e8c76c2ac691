"""The UI is sized by its terminal, never by COLUMNS / LINES in the environment.

Textual asks `shutil.get_terminal_size()`, which prefers COLUMNS and LINES over the terminal:
exported once (a shell profile, a CI job, pytest), they fix the app's size for good, so
`COLUMNS=160 LINES=45 gradtui train.py` in an 80x24 terminal drew 160 columns off-screen, and a
resize was never followed. The script's child agent still gets them as the user set them
(`ChildTarget` takes its environment when it is made, before the app runs).
"""

from __future__ import annotations

import os

SIZE_VARIABLES = ("COLUMNS", "LINES")


def size_from_the_terminal() -> dict[str, str]:
    """Remove COLUMNS and LINES from this process's environment; what they were."""
    return {name: os.environ.pop(name) for name in SIZE_VARIABLES if name in os.environ}
