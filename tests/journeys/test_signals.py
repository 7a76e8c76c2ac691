"""A signal to the UI in a real terminal (tmux), as `kill` or a closing terminal sends it: SIGINT,
SIGTERM or SIGHUP to the `gradtui` process while the script is paused, while it is being stepped
and while it runs on. Each ends gradtui as python ends of it (a shell sees 128 + N: 130, 143,
129), the child agent with it (no process of the run is left), nothing but gradtui's words
(and the shell's own name of the signal that killed its child) reaches the terminal, and the
terminal is left as it was found: the main screen, the cursor shown, mouse reporting off, the
tty's modes as before (tests/journeys/terminal.py).

The last case closes the terminal itself (tmux kills the pane: SIGHUP, then a terminal that
is gone): every process of the run ends.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, SCRIPTS
from tests.processes import PROCESS_TIMEOUT, Terminal, children, descendants, gone, gradtui_command

pytestmark = pytest.mark.timeout(240)

SIZE = (100, 30)
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
SHELL_SAYS = {signal.SIGTERM: "Terminated", signal.SIGHUP: "Hangup"}
"""What the pane's `sh` prints when its child was killed by the signal (python's own death by
it is reported the same way): the shell's words, not gradtui's. SIGINT: nothing."""
END_WAIT = 15.0
"""Seconds every process of the run has to end once gradtui's exit status is printed."""


def paused(screen: str) -> bool:
    """The UI at a pause (the header's long or short form)."""
    return re.search(r"paused (at )?#\d+\b", screen) is not None


def steps(screen: str) -> int:
    """The highest `step N` line the script printed that the output pane shows (-1: none)."""
    return max((int(n) for n in re.findall(r"\bstep (\d+)\b", screen)), default=-1)


@pytest.fixture
def terminal(tmp_path: Path):
    """gradtui on tests/fixtures/endless_loop.py (a training loop that runs until killed) in a
    tmux pane, at its first pause; closed at the end."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    term = Terminal(
        [*gradtui_command(), str(SCRIPTS / "endless_loop.py")],
        tmp_path,
        *SIZE,
        env={"PYTHONPATH": str(REPO), "GRADTUI_RUNTIME_DIR": str(runtime)},
    )
    try:
        term.wait(paused, "the first pause", PROCESS_TIMEOUT)
        yield term
    finally:
        term.close()


def bring_to(term: Terminal, state: str) -> None:
    """Put the UI in `state`: `paused` (the first pause), `stepping` (steps asked for one after
    another, the signal comes among them) or `running` (continued: the script prints its steps)."""
    match state:
        case "paused":
            pass
        case "stepping":
            for _ in range(6):
                term.keys("s")
                time.sleep(0.05)
        case "running":
            term.keys("c")
            first = steps(term.wait(lambda s: steps(s) >= 0, "the script running on", 60))
            term.wait(lambda s: steps(s) > first, "the script still running", 30)
        case _:
            raise ValueError(state)


def the_run(term: Terminal) -> tuple[int, list[int]]:
    """The gradtui process (the pane's shell's child) and every process below it (its agent)."""
    ui = children(term.shell)
    assert len(ui) == 1, ui
    below = descendants(ui[0])
    assert below, "the UI has no child agent"
    term.pids.update([ui[0], *below])
    return ui[0], below


def assert_all_end(pids: list[int]) -> None:
    deadline = time.monotonic() + END_WAIT
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"left running: {[pid for pid in pids if not gone(pid)]}"
        time.sleep(0.1)


@pytest.mark.parametrize("state", ["paused", "stepping", "running"])
@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_to_the_ui_ends_it_as_python_and_gives_the_terminal_back(terminal, state, name):
    signum = SIGNALS[name]
    bring_to(terminal, state)
    ui, agent = the_run(terminal)
    os.kill(ui, signum)
    said = SHELL_SAYS.get(signum)
    terminal.assert_clean_exit(128 + signum, lambda text: text == said)
    assert_all_end([ui, *agent])


def test_closing_the_terminal_ends_every_process_of_the_run(terminal):
    """tmux kills the pane while the script runs on (a terminal window closed): the UI gets
    SIGHUP and then a terminal that is gone; it, its agent and the script all end."""
    bring_to(terminal, "running")
    ui, agent = the_run(terminal)
    terminal.close_pane()
    assert_all_end([ui, *agent])
