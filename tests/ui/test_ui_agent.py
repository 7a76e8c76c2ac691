"""The UI is a client: the script owns its process, and the UI survives whatever that process does."""

from __future__ import annotations

import pytest

from gradtui.protocol.events import QUIT_STATUS
from gradtui.ui.app import GradtuiApp
from tests.helpers import SIZE, output_lines, script, wait_for, wait_paused_at


def _output(app: GradtuiApp) -> str:
    return "\n".join(output_lines(app))


@pytest.mark.asyncio
async def test_a_script_that_installs_signal_handlers_runs_on_its_main_thread_and_fd_output_shows():
    app = GradtuiApp(script("ui/owns_signals.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await wait_for(pilot, lambda: "from-a-child" in _output(app), what="the shell child's output")
        assert "on MainThread" in _output(app)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the script's end")
    assert app.exit_status == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "name, words, status",
    [
        ("exits4.py", "exited with status 4", 4),
        ("crashes.py", "was killed by SIGSEGV", 128 + 11),
    ],
)
async def test_the_ui_stays_open_when_the_agent_dies_and_says_how(name, words, status):
    app = GradtuiApp(script(f"ui/{name}"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.link.finished.is_set(), what="the agent's end")
        await pilot.pause()
        log = " ".join(_output(app).split())
        assert words in log and "now" in log  # how it ended, and its last output
        assert app.is_running and app.state.view is not None and app.state.view.index == 0  # the last pass kept
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None, what="q to leave")
    assert app.return_value == status and app.return_value != QUIT_STATUS


@pytest.mark.asyncio
async def test_quit_typed_in_the_command_bar_ends_the_agent_and_the_app():
    """`send` called the coroutine `run_action("quit")` without awaiting it: typed quit did nothing."""
    app = GradtuiApp(script("ui/owns_signals.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        process = app.target.process
        await pilot.press("colon", *"quit", "enter")
        await wait_for(
            pilot,
            lambda: process.returncode is not None and app.return_value is not None,
            what="the agent to end and the app to exit",
        )
    assert app.return_value == QUIT_STATUS
