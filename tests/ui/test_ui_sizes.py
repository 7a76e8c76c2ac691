"""The panes are sized by what they show and the user can move their edges."""

from __future__ import annotations

import pytest

from gradtui.cli.main import demo_path
from gradtui.ui.app import GradtuiApp
from gradtui.ui.layout import STEP, PaneSizes
from tests.helpers import detail_text, graph_text, wait_for, wait_paused_at


def test_pane_sizes_follow_the_content_within_bounds_and_the_users_moves():
    sizes = PaneSizes()
    assert sizes.left(160, 40) == 43  # the rows' width and the border, not 40% of 160
    assert sizes.left(160, 200) == 64  # at most 40%
    assert sizes.left(80, 20) == 34  # at least 34
    assert sizes.graph(116, 40) == 45 and sizes.graph(116, None) == 52
    sizes.left_moved, sizes.graph_moved = 8, -4
    assert sizes.left(160, 40) == 51 and sizes.graph(116, 40) == 41
    sizes.drag_left(160, 40, 29)  # the border dragged to column 29: 30 wide
    assert sizes.left(160, 40) == 30


async def _demo_at_tanh(pilot) -> None:
    app = pilot.app
    await wait_paused_at(pilot, 0)
    for _ in range(7):
        node = app.state.current
        await pilot.press("s")
        await wait_for(pilot, lambda: app.state.current not in (None, node), what="the next pause")
    await wait_paused_at(pilot, 5)


@pytest.mark.asyncio
async def test_at_160x45_source_lines_are_whole_and_graph_rows_keep_their_depth_column():
    app = GradtuiApp(demo_path())
    async with app.run_test(size=(160, 45)) as pilot:
        await _demo_at_tanh(pilot)
        await pilot.pause()
        left = app.query_one("#left")
        assert left.size.width < 50  # was 64 (40%), mostly empty
        assert "def forward(self, x: torch.Tensor) -> torch.Tensor:" in detail_text(app)
        whole = graph_text(app).split("whole pass, by depth from the root\n")[1].splitlines()
        assert whole and all(line.startswith(" ") and "│" in line[:6] for line in whole), whole
        graph = app.query_one("#graph")
        assert max(map(len, graph_text(app).splitlines())) <= graph.scrollable_content_region.width

        width, graph_width = left.size.width, graph.size.width
        await pilot.press("greater_than_sign")
        await wait_for(pilot, lambda: left.size.width == width + STEP, what="a wider node list")
        await pilot.press("less_than_sign", "less_than_sign")
        await wait_for(pilot, lambda: left.size.width == width - STEP, what="a narrower node list")
        await pilot.press("plus")
        await wait_for(pilot, lambda: graph.size.width == graph_width + STEP, what="a wider graph")
        await pilot.press("minus")
        await wait_for(pilot, lambda: graph.size.width == graph_width, what="the graph back")

        edge = left.region.right - 1
        await pilot.mouse_down("#nodes", offset=(left.size.width - 1, 3))
        to = (left.size.width + 9, 3)
        await pilot.hover("#nodes", offset=to)
        await pilot.mouse_up("#nodes", offset=to)
        await wait_for(pilot, lambda: left.region.right - 1 == edge + 10, what="the dragged border")
