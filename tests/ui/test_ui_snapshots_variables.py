"""SVG snapshots of the variables pane (V) at 80x24 and 160x45: train_loop.py's
pass 0, browsed after it ended, so every variable's gradient norm is known. Regenerate with
`--snapshot-update` and look at every SVG."""

from __future__ import annotations

import pytest

from gradtui.ui.app import GradtuiApp
from gradtui.ui.widgets.variables import VariablesScreen
from tests.helpers import finish_into_pass_1, footer_of_the_modal, script, settle, wait_for

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])


@SIZES
def test_the_variables_of_an_ended_pass(snap_compare, size):
    async def run_before(pilot):
        app = pilot.app
        await finish_into_pass_1(pilot)
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.state.view.index == 0, what="pass 0 shown")
        await pilot.press("V")
        await wait_for(pilot, lambda: isinstance(app.screen, VariablesScreen), what="the variables pane")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    assert snap_compare(GradtuiApp(script("train_loop.py"), args=["2"]), terminal_size=size, run_before=run_before)
