"""Every modal screen's footer shows that screen's own keys (under a modal the
footer showed only `q quit`, none of the keys the modal answers to)."""

from __future__ import annotations

import pytest
from textual.screen import Screen
from textual.widgets._footer import FooterKey

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.breakpoints import BreakpointsScreen
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.screens.leave import LeaveScreen
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.screens.plotchoice import PlotChoiceScreen
from gradtui.ui.screens.prompt import PromptScreen
from gradtui.ui.screens.source import SourceScreen
from gradtui.ui.widgets.variables import VariablesScreen
from tests.helpers import SIZE, FakeTarget, finish_into_pass_1, script, wait_for

OPENED_BY = [  # the keys that open it from the debugger in pass 1 of loop.py, then the screen
    (("question_mark",), HelpScreen),
    (("B",), BreakpointsScreen),
    (("v",), SourceScreen),
    (("w",), FlowScreen),
    (("V",), VariablesScreen),
    (("x",), PromptScreen),
    (("P",), PassesScreen),
    (("P", "t"), PlotChoiceScreen),
]


def _shown_keys(screen: Screen) -> set[str]:
    """The keys the footer of `screen` itself shows."""
    return {key.key for key in screen.query(FooterKey)}


def _own_keys(screen: Screen) -> set[str]:
    """The first key of each of the screen's bindings meant for the footer."""
    return {binding.key.split(",")[0] for binding in screen.BINDINGS if getattr(binding, "show", True)}


async def _shows_its_keys(pilot, screen: Screen) -> None:
    await wait_for(
        pilot,
        lambda: _own_keys(screen) <= _shown_keys(screen),
        what=f"{type(screen).__name__}'s footer with {_own_keys(screen)}",
    )


@pytest.mark.asyncio
async def test_each_modal_footer_shows_its_own_keys():
    app = GradtuiApp(script("loop.py"))
    async with app.run_test(size=SIZE) as pilot:
        await finish_into_pass_1(pilot)
        for keys, kind in OPENED_BY:
            await pilot.press(*keys)
            await wait_for(pilot, lambda: isinstance(app.screen, kind), what=kind.__name__)
            screen = app.screen
            assert _own_keys(screen)
            await _shows_its_keys(pilot, screen)
            while app.screen is not app.debugger:
                await pilot.press("escape")
                await pilot.pause()


@pytest.mark.asyncio
async def test_the_leave_question_footer_shows_its_answers():
    app = GradtuiApp(target=FakeTarget())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, LeaveScreen), what="the question")
        await _shows_its_keys(pilot, app.screen)
        assert {"q", "D", "escape"} <= _shown_keys(app.screen)
