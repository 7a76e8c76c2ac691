"""A notebook cell's source in the UI: the cell's text lives only in the script's
process (`linecache`); the agent sends it, so the detail pane and the source view show the
cell's lines, not a bare `at 3049230926.py:3`."""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.source import SourceScreen
from tests.helpers import SIZE, detail_text, script, selected, wait_for, wait_paused_at

pytestmark = pytest.mark.timeout(120)


@pytest.mark.asyncio
async def test_a_cells_node_shows_the_cells_line_in_the_detail_pane_and_the_source_view():
    app = GradtuiApp(script("ui/notebook_cell.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        graph = app.state.view.graph
        tanh = next(n for n, d in graph.nodes(data="info") if d.name == "TanhBackward0")
        assert graph.nodes[tanh]["info"].source == "3049230926.py:3"
        app.query_one("#nodes").select_node(tanh)
        await wait_for(pilot, lambda: selected(app) == tanh, what="the tanh node")
        await wait_for(pilot, lambda: "the cell's own line" in detail_text(app), what="the cell's line in the detail")
        assert "hidden = torch.tanh(weight * 2.0)" in detail_text(app)

        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, SourceScreen), what="the source view")
        await pilot.pause()
        lines = app.screen.query_one(OptionList)
        assert lines.option_count == 5  # the cell's five lines
        assert lines.highlighted == 2
        assert "torch.tanh(weight * 2.0)" in str(lines.get_option_at_index(2).prompt)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SourceScreen), what="the view closed")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end")
