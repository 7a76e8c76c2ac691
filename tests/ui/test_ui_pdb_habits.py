"""What pdb and pudb users reach for, in the UI (Pilot): `!` / `interact` opens a Python console
at the pause whose namespace holds g, node, module, the call-site variables and torch, keeps what
is bound, and whose `g = ...` is an edit; Ctrl-C while the script runs breaks in (the footer
shows it then), says what it waits for, and a second Ctrl-C offers to quit; `-m` runs a module
in the UI's child agent as python -m does.

chain.py: x = 2, y = x * 3, z = y ** 2; at #1 (MulBackward0) the incoming gradient is dz/dy = 2y,
which torch computes here as the oracle."""

from __future__ import annotations

import pytest
import torch

from gradtui.protocol import events as ev
from gradtui.protocol.options import RunOptions
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.console import ConsoleScreen, complete
from gradtui.ui.screens.leave import LeaveScreen
from gradtui.wire.child import ChildTarget
from tests.helpers import REPO, SIZE, answer_text, example, output_lines, script, type_text, wait_for, wait_paused_at

FIXTURES = REPO / "tests" / "fixtures"

pytestmark = pytest.mark.timeout(120)


def _dz_dy() -> torch.Tensor:
    x = torch.tensor([2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    (y**2).backward()
    return y.grad


def test_a_statement_is_complete_as_the_repl_says():
    assert complete("x = 1") and complete("print(g)") and complete("a = 1\nb = 2")
    assert not complete("for i in range(3):") and not complete("for i in range(3):\n    print(i)")
    assert complete("for i in range(3):\n    print(i)\n") and complete("x = = 1")  # its error is the answer


@pytest.mark.asyncio
async def test_interact_runs_python_at_the_pause_and_g_is_an_edit():
    app = GradtuiApp(example("chain.py"))
    edits: list[ev.GradEdited] = []
    apply = app.apply_batch

    def spy(batch):
        edits.extend(e for e in batch if isinstance(e, ev.GradEdited))
        return apply(batch)

    app.apply_batch = spy  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        await pilot.press("exclamation_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, ConsoleScreen), what="the console")
        console = app.screen
        await type_text(pilot, "h = g * 7")
        await pilot.press("enter")
        await type_text(pilot, "print(float(h.sum()), type(node).__name__, module, y.shape)")
        await pilot.press("enter")
        expected = f"{float(_dz_dy().sum()) * 7} MulBackward0 None torch.Size([1])"
        await wait_for(pilot, lambda: expected in console.log_lines, what="the print's line")
        assert ">>> h = g * 7" in console.log_lines  # echoed as the REPL shows it
        await type_text(pilot, "g = g * 0")
        await pilot.press("enter")
        await wait_for(pilot, lambda: edits, what="the edit")
        await wait_for(
            pilot, lambda: any(line.startswith("gradient now") for line in console.log_lines), what="the edit's answer"
        )
        assert edits[0].command == "!g = g * 0" and edits[0].node == 1
        assert edits[0].after[0].norm == 0 and edits[0].before[0].norm == float(_dz_dy().norm())
        await pilot.press("up")  # the history: the last statement again
        assert console.query_one("#console-input").text == "g = g * 0"
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConsoleScreen), what="the console to close")
        await pilot.press("exclamation_mark")  # a console again: the history is kept
        await wait_for(pilot, lambda: isinstance(app.screen, ConsoleScreen), what="the console again")
        await pilot.press("up", "up")
        assert app.screen.query_one("#console-input").text.startswith("print(float(h.sum())")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConsoleScreen), what="the console to close")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the script's end")
    assert app.link.exit_status == 0


@pytest.mark.asyncio
async def test_interact_while_running_says_how_to_break_in():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("colon", *"interact", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConsoleScreen), what="the console from the bar")
        await pilot.press("escape")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the script's end")


@pytest.mark.asyncio
async def test_ctrl_c_breaks_in_to_a_running_loop():
    app = GradtuiApp(script("endless_loop.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)

        def shown() -> list[str]:
            return [b.binding.key for b in app.screen.active_bindings.values() if b.binding.show and b.enabled]

        assert "ctrl+c" not in shown()  # paused: nothing to break into
        for _ in range(2):
            await pilot.press("c")
            await wait_for(pilot, lambda: app.state.paused is None and "ctrl+c" in shown(), what="the running footer")
            passes = app.state.passes  # break in once the loop has started a later pass: a running loop
            await wait_for(pilot, lambda: app.state.passes > passes, what="the next pass to start")
            await pilot.press("ctrl+c")
            await wait_for(pilot, lambda: app.state.paused is not None, what="the break-in's pause")
            assert app.state.paused.reason == "break in" and app.state.paused.pass_index >= 1
            assert not app.break_in.waiting
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None, what="the app to leave")
    assert app.return_value == 130


@pytest.mark.asyncio
async def test_ctrl_c_in_a_long_forward_says_what_it_waits_for_and_a_second_offers_to_quit():
    """long_loop.py runs its forward for ever and never calls backward: the break-in waits."""
    app = GradtuiApp(script("long_loop.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.status_text().startswith("running"), what="the script to run")
        await pilot.press("ctrl+c")
        await wait_for(
            pilot,
            lambda: "running forward; pausing at the next backward" in answer_text(app),
            what="what the break-in waits for",
        )
        assert app.break_in.waiting
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: isinstance(app.screen, LeaveScreen), what="the offer to quit")
        assert "waiting to break in" in app.screen.question and not app.screen.detachable
        await pilot.press("escape")  # go on waiting
        await wait_for(pilot, lambda: not isinstance(app.screen, LeaveScreen), what="back")
        assert app.break_in.waiting and app.state.paused is None
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: isinstance(app.screen, LeaveScreen), what="the offer again")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None, what="the app to leave")
    assert app.return_value == 130


@pytest.mark.asyncio
async def test_the_ui_runs_a_module_as_python_dash_m(monkeypatch):
    """`gradtui -m pkg.train` in the UI: its child agent runs the module (a relative import in it)."""
    monkeypatch.chdir(FIXTURES)
    app = GradtuiApp(target=ChildTarget(RunOptions("pkg.train", ["2"], module=True)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the module's end")
        lines = output_lines(app)
    assert app.link.exit_status == 0
    assert "package pkg spec pkg.train name __main__" in lines and "pass 1 x.grad = [18.0, -36.0]" in lines, lines


def test_the_refusal_of_the_pause_sent_ends_the_wait_and_no_other_answer_does():
    """Ctrl-C's `pause` is told from other commands by its request id, not by its text: the
    target's refusal of it (the script ended meanwhile) ends the wait, another answer does not."""
    from types import SimpleNamespace

    from gradtui.ui.breakin import BreakIn

    sent: list[str] = []
    bar = SimpleNamespace(answer=lambda text, ok=True: None)
    state = SimpleNamespace(script_over=False, paused=None)
    break_in = BreakIn(state, None, lambda: bar, lambda line: (sent.append(line), 5)[1])  # type: ignore[arg-type]
    break_in.press()
    assert sent == ["pause"] and break_in.waiting
    break_in.answered(ev.CommandResult("pause", "no: another command's", ok=False, request=4))
    break_in.answered(ev.CommandResult("pause", "taken", ok=True, request=5))
    assert break_in.waiting
    break_in.answered(ev.CommandResult("pause", "not running: the script has ended", ok=False, request=5))
    assert not break_in.waiting
