"""The UI is a client: the script owns its process, and the UI survives whatever that process does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.events import QUIT_STATUS
from gradtui.protocol.options import RunOptions
from gradtui.ui.app import GradtuiApp
from gradtui.wire.child import ChildTarget
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


class EndHeldUntilQuit(ChildTarget):
    """A child agent whose told end is held until the UI quits: as a ChildTarget holds it until the
    script's last output is read (its pipes close when the process has gone, seconds when a loaded
    machine finalizes torch), made as long as the test needs."""

    def __init__(self, path: str) -> None:
        super().__init__(RunOptions(path, []))
        self.quit_asked = asyncio.Event()

    async def batches(self) -> AsyncIterator[list[ev.Event]]:
        """The child's batches; the one with the script's end once the UI has quit."""
        async for batch in super().batches():
            if any(isinstance(event, ev.ScriptFinished) for event in batch):
                await self.quit_asked.wait()
            yield batch

    async def quit(self) -> None:
        """The UI quits: the held end may come now."""
        self.quit_asked.set()
        await super().quit()


@pytest.mark.asyncio
async def test_q_after_the_script_ended_by_itself_but_before_its_end_was_shown_leaves_with_its_status():
    """The script ran to its end (status 0) and its agent said so, but the end, held until the
    last output is read, was not shown yet: `q` then left with 130, as if it had stopped a running
    script (and the end, applied while quitting, was taken for a quit too)."""
    target = EndHeldUntilQuit(script("ui/owns_signals.py"))
    app = GradtuiApp(target=target)
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: target.told_end is not None, what="the agent to tell the script's end")
        assert not app.state.script_over  # held: the UI still shows the script running
        assert target.told_end.exit_status == 0 and not target.told_end.quit
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None, what="q to leave")
    assert app.return_value == 0 and app.exit_status == 0
