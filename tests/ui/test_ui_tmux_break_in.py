"""Ctrl-C in a real terminal (tmux, a private server socket): after `c` a 3,000-step training
loop runs; Ctrl-C, a key the terminal sends as a byte (not a signal: the app's terminal is raw),
breaks in and the screen shows a pause at a backward node with the script alive; `q` then ends
the script and the app. Every wait has a timeout; the tmux server is killed at the end."""

from __future__ import annotations

import re
import sys
import time

import pytest

from tests.helpers import script
from tests.processes import Tmux

pytestmark = pytest.mark.timeout(120)


def test_ctrl_c_after_continue_breaks_in_to_a_training_loop_then_q_quits():
    tmux = Tmux([sys.executable, "-m", "gradtui", script("train_3000.py")], width=120, height=36)
    try:
        tmux.wait(lambda s: "paused at #0" in s, timeout=60, what="the first pause")
        tmux.keys("c")
        header = lambda s: s.splitlines()[0] if s.strip() else ""  # noqa: E731 - the app's first row
        screen = tmux.wait(
            lambda s: header(s).rstrip().endswith("running") and "^c pause" in s,
            timeout=30,
            what="running, the footer offering Ctrl-C",
        )
        assert "done: loss" not in screen  # still in its 3,000 steps
        tmux.keys("C-c")
        screen = tmux.wait(
            lambda s: "paused at #" in header(s) and "break in" in s, timeout=30, what="the break-in's pause"
        )
        found = re.search(r"pass (\d+)", header(screen))
        assert found and int(found.group(1)) >= 1, screen  # a pass after the one `c` left
        assert re.search(r"paused at #\d+ \w+Backward\d*|paused at #\d+ AccumulateGrad", header(screen)), screen
        assert "done: loss" not in screen and tmux.alive(), screen  # the script is alive, paused in its loop
        tmux.keys("q")
        deadline = time.monotonic() + 20
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tmux.alive(), tmux.screen()  # q left the app (the script stopped with it)
    finally:
        tmux.kill()
