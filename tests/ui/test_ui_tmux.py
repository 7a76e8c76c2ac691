"""The real `gradtui` on the demo in tmux at 80x24, driven with send-keys and read with
capture-pane, as a user on a laptop split or over SSH sees it: steps, `why`, `w`, `m`, quit.
Every wait has a timeout; the tmux server (a private socket) is killed at the end."""

from __future__ import annotations

import sys
import time

import pytest

from tests.processes import Tmux

pytestmark = pytest.mark.timeout(90)


def paused_row(screen: str) -> str:
    """The node list row of the paused node (its `▶` marker), the left pane only."""
    rows = [line for line in screen.splitlines() if line.startswith("│▶") or line.startswith("│ ▶")]
    assert rows, screen
    return rows[0][:36]


def test_the_demo_at_80x24_in_tmux_steps_why_flow_modules_and_quits():
    tmux = Tmux([sys.executable, "-m", "gradtui"])
    try:
        screen = tmux.wait(lambda s: "paused at #0" in s, timeout=40, what="the first pause")
        assert "0/12 ran" in screen
        for n in (1, 2, 3):
            tmux.keys("s")
            screen = tmux.wait(lambda s, n=n: f"{n}/12 ran" in s and "paused" in s, what=f"step {n}")
        row = paused_row(screen)
        assert "…" not in row and "prediction" in row, row
        assert "incoming gradient" in screen and "norm " in screen and "at demo.py:" in screen

        # In one burst, as typed fast or pasted: the keys after `:` were lost to the node list
        # (`w` of `why` opened the flow screen) while the focus moved to the bar.
        tmux.keys(":")
        tmux.text("why x")
        tmux.keys("Enter")
        # The bar's answer stays on screen (the output pane's echo scrolls away under the answer)
        screen = tmux.wait(lambda s: "x is not on this pass's graph" in s, what="why's answer in the bar")
        assert "✓" in screen or "✗" in screen
        assert "gradient flow ·" not in screen  # `w` of `why` reached the bar, not the node list

        tmux.keys("w")
        screen = tmux.wait(lambda s: "gradient flow" in s, what="the flow screen")
        tmux.keys("Escape")
        tmux.wait(lambda s: "gradient flow ·" not in s, what="the flow screen to close")

        tmux.keys("m")
        screen = tmux.wait(lambda s: "by module" in s, what="the module view")
        assert "▾" in screen or "▸" in screen

        tmux.keys("q")
        deadline = time.monotonic() + 15
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tmux.alive(), "gradtui still ran 15 s after q"
    finally:
        tmux.kill()


def test_the_ui_is_sized_by_its_terminal_not_by_columns_and_lines(tmp_path):
    """COLUMNS=160 LINES=45 exported in an 80x24 terminal: the app draws 80x24 (it drew 160
    columns, off-screen), and the script still sees the variables as the user set them."""
    path = tmp_path / "sized.py"
    path.write_text(
        "import os\nimport torch\n"
        "print('script sees', os.environ.get('COLUMNS'), os.environ.get('LINES'), flush=True)\n"
        "x = torch.ones(1, requires_grad=True)\n(x * 3).sum().backward()\n"
    )
    tmux = Tmux(["env", "COLUMNS=160", "LINES=45", sys.executable, "-m", "gradtui", str(path)])
    try:
        # the footer settles a frame after the header says paused (Ctrl-C's key leaves it then)
        screen = tmux.wait(
            lambda s: "paused at #0" in s and "script sees" in s and "^c" not in s,
            timeout=40,
            what="the first pause, with the header's right end on screen",
        )
        lines = screen.rstrip("\n").split("\n")
        assert len(lines) == 24 and "q quit" in lines[-1], screen  # the footer is the terminal's last row
        assert lines[0].rstrip().endswith("paused at #0 SumBackward0"), screen  # the header ends at column 80
        assert lines[1].rstrip().endswith("╮"), screen  # so does the right pane's border
        assert "script sees 160 45" in screen
    finally:
        tmux.kill()
