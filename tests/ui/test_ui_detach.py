"""An attached UI can leave the script running: `q` says it would stop
the script and offers `detach`; `D` (or the `detach` command) leaves it running, and the next
client finds it paused where it was, its breakpoints armed."""

from __future__ import annotations

import os

import pytest

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.leave import LeaveScreen
from tests.helpers import SIZE, answer_text, example, script, wait_for, wait_paused_at
from tests.processes import Listening, remote_target


@pytest.fixture
def agent():
    """loop.py (three passes of chain.py) under `gradtui --listen`, waiting for a client at its first pause."""
    listening = Listening(script("loop.py"), os.environ["GRADTUI_RUNTIME_DIR"])
    try:
        listening.wait_listening()
        yield listening
    finally:
        listening.close()


@pytest.mark.asyncio
async def test_q_attached_asks_and_D_detaches_leaving_the_script_for_the_next_client(agent):
    app = GradtuiApp(target=remote_target(agent))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("b")  # a breakpoint on #0, for the next client to find
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 1, what="the breakpoint")
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, LeaveScreen), what="the leave question")
        text = " ".join(str(part.visual) for part in app.screen.query("Static"))
        assert "loop.py runs in its own process" in text and "q stops it" in text and "detach" in text
        await pilot.press("escape")  # stay
        await wait_for(pilot, lambda: not isinstance(app.screen, LeaveScreen), what="back to the debugger")
        assert app.is_running and agent.process.poll() is None
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, LeaveScreen), what="the leave question")
        await pilot.press("D")
        await wait_for(pilot, lambda: app.return_value is not None, what="the app to leave")
    assert app.return_value == 0
    assert agent.process.poll() is None  # the script waits, at its first pause, for the next client
    again = agent.attach(agent.address, "--headless", "-c", "breakpoints", "-c", "continue", "-c", "breakpoints")
    assert again.returncode == 0, again.stderr
    first, _, rest = again.stdout.partition("pass 1 · z.backward()")
    assert "pass 0 · z.backward()" in first and "paused before #0 PowBackward0" in first, again.stdout
    assert "paused before #0 PowBackward0" in rest, again.stdout  # `continue` stopped at the breakpoint
    assert "1: #0  (hit once)" in rest  # the breakpoint set before the detach, still armed


@pytest.mark.asyncio
async def test_the_detach_command_of_a_ui_that_started_its_script_says_why_it_cannot():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("colon", *"detach", "enter")
        await wait_for(pilot, lambda: "detach:" in answer_text(app), what="the answer")
        assert "lives only with it" in answer_text(app)
        assert app.is_running and not app.state.script_over
