"""gradtui as a person runs it, in a real terminal (tmux at 80x24 and 160x45): the demo's first
pause and `q` (or ctrl+q), a run continued to its end, attach / detach / re-attach to a script
under `--listen`, and `gradtui replay` of a recording. Each checks the exit status, that nothing
but gradtui's own words reached the terminal (no traceback, no asyncio complaint), and that the
terminal was left as it was found (tests/journeys/terminal.py).

The suite's other UI tests drive the app in-process (Textual's Pilot), where the event loop's
end, the terminal's modes and what is printed after the app has left are never seen.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, SCRIPTS
from tests.journeys.terminal import SIZES, START, Terminal, gradtui_command
from tests.procs import gone

from gradtui.protocol.events import QUIT_STATUS

pytestmark = pytest.mark.timeout(240)

SIZE_IDS = [f"{w}x{h}" for w, h in SIZES]


def _environment(runtime: Path) -> dict[str, str]:
    """The pane's variables: this checkout's gradtui, a runtime folder of the test's own."""
    return {"PYTHONPATH": str(REPO), "GRADTUI_RUNTIME_DIR": str(runtime)}


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    """A private runtime folder (where a listening agent says where it listens)."""
    folder = tmp_path / "runtime"
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture
def terminal(tmp_path: Path, runtime: Path):
    """Factory of Terminals (each in a folder of its own); all are closed at the end."""
    opened: list[Terminal] = []

    def open_(arguments: list[str], size: tuple[int, int]) -> Terminal:
        folder = tmp_path / f"terminal{len(opened)}"
        folder.mkdir()
        term = Terminal([*gradtui_command(), *arguments], folder, *size, env=_environment(runtime))
        opened.append(term)
        return term

    yield open_
    for term in opened:
        term.close()


def first_pause(screen: str) -> bool:
    """The UI at its first pause: the header says so."""
    return "paused at #0" in screen


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("key", ["q", "C-q"])
def test_the_demo_quit_at_its_first_pause(terminal, size, key):
    """`gradtui` with no script opens the demo (README's first command); `q` or ctrl+q at the first
    pause stops the script and leaves: exit 130, no traceback, the terminal as it was."""
    term = terminal([], size)
    term.wait(first_pause, "the demo's first pause", START)
    term.keys(key)
    term.assert_clean_exit(QUIT_STATUS)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("fixture", ["nanmlp.py", "user_hook.py"])
def test_a_script_quit_at_its_first_pause(terminal, tmp_path, size, fixture):
    """The same on a script whose gradient turns NaN and on one with a hook of its own."""
    arguments = {"nanmlp.py": [], "user_hook.py": [str(tmp_path / "grads.pt")]}[fixture]
    term = terminal([str(SCRIPTS / fixture), *arguments], size)
    term.wait(first_pause, f"{fixture}'s first pause", START)
    term.keys("q")
    term.assert_clean_exit(QUIT_STATUS)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_the_demo_continued_to_its_end_then_quit(terminal, size):
    """`c` runs the demo to its end (its three passes, its prints in the output pane); `q` then
    leaves with the script's own status, 0."""
    term = terminal([], size)
    term.wait(first_pause, "the demo's first pause", START)
    term.keys("c")
    term.wait(lambda s: "step 2 loss" in s and re.search(r"exited|ended|finished", s), "the demo's end", 60)
    term.keys("q")
    term.assert_clean_exit(0)
