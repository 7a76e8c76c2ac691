"""The variables docked beside the detail pane (L), as pudb keeps its variables on screen: the
same rows as V's table, kept open across steps and passes until L again; enter on one selects its
node."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from gradtui.ui.app import GradtuiApp
from gradtui.ui.widgets.variables import VariablesPane, variable_rows
from tests.helpers import SIZE, script, selected, wait_for, wait_paused_at

pytestmark = pytest.mark.timeout(120)


def _names(pane: VariablesPane) -> list[str]:
    return [row.var.name for row in pane.rows]


@pytest.mark.asyncio
async def test_l_docks_the_variables_and_they_stay_for_the_next_pass_until_l_again():
    app = GradtuiApp(script("train_loop.py"), args=["2"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        pane = app.query_one(VariablesPane)
        assert not pane.display  # not docked: no room taken
        await pilot.press("L")
        await wait_for(pilot, lambda: pane.display and pane.rows, what="the docked pane's rows")
        assert _names(pane) == ["model", "x", "y", "batch", "loss"]
        assert pane.rows == variable_rows(app.state.view)  # V's rows, of the pass on screen
        assert app.screen is app.screen_stack[0]  # a pane, not a modal screen: the keys still drive the script
        table = pane.query_one(DataTable)
        assert table.row_count == 5 and str(table.get_row_at(4)[4]) == "#0"
        model = next(r for r in pane.rows if r.var.name == "model")
        assert model.norm is None

        await pilot.press("f")  # pass 0 ends, pass 1 pauses: the pane is still docked, with pass 1's rows
        await wait_for(
            pilot,
            lambda: app.state.paused is not None and app.state.paused.pass_index == 1,
            what="the first pause of pass 1",
        )
        await wait_for(
            pilot,
            lambda: app.state.view.variables is not None and app.state.view.variables.pass_index == 1,
            what="pass 1's variables",
        )
        await wait_for(
            pilot,
            lambda: pane.display and pane.rows == variable_rows(app.state.view),
            what="pass 1's rows in the docked pane",
        )
        await pilot.press("left_square_bracket")  # back to pass 0, ended: its leaves' norms are known
        await wait_for(pilot, lambda: app.state.view.index == 0, what="pass 0 shown")
        await wait_for(
            pilot,
            lambda: next(r for r in pane.rows if r.var.name == "model").norm is not None,
            what="pass 0's norms in the docked pane",
        )

        table.focus()  # enter on a row: its node
        await pilot.pause()
        table.move_cursor(row=_names(pane).index("loss"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: selected(app) == 0, what="loss's node selected")

        await pilot.press("L")
        await wait_for(pilot, lambda: not pane.display, what="undocked")
        assert app.focused is not table  # the focus left the hidden pane
