"""Keys on the panes: `w` mid-pass, `Z` on every pane, focus after a zoom, `tab`,
clicks on node references, module names of an nn.Sequential."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.flow import FlowScreen
from tests.helpers import SIZE, example, wait_for, wait_paused_at


@pytest.mark.asyncio
async def test_w_mid_pass_shows_the_last_ended_pass_flow_titled_with_its_index():
    app = GradtuiApp(example("mlp.py"), record_all=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("f")  # to the first node of pass 1
        await wait_for(
            pilot,
            lambda: app.state.paused is not None and app.state.paused.pass_index == 1,
            what="the first pause of pass 1",
        )
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert table.row_count == 4
        assert sorted(str(table.get_row_at(i)[0]) for i in range(4)) == ["0.bias", "0.weight", "2.bias", "2.weight"]
        assert app.screen.query_one("#flow").border_title == "gradient flow · pass 0"
        note = str(app.screen.query_one("#flow-note").visual)
        assert "pass 1 has not ended yet" in note and "last pass that ended" in note


@pytest.mark.asyncio
async def test_Z_zooms_the_detail_and_graph_panes():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        for pane in ("detail", "graph"):
            app.query_one(f"#{pane}").focus()
            await pilot.pause()
            await pilot.press("Z")
            await wait_for(pilot, lambda: app.screen.maximized is app.query_one(f"#{pane}"), what=f"{pane} zoomed")
            await pilot.press("Z")
            await wait_for(pilot, lambda: app.screen.maximized is None, what=f"{pane} back")


@pytest.mark.asyncio
async def test_Z_at_160_columns_gives_every_pane_the_whole_width():
    """The tmux walk at 160x45: Z on the graph pane kept the width the sizer gave it beside the
    detail pane (44 columns, the rest of the screen hatched); back, it has that width again."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_paused_at(pilot, 0)
        graph = app.query_one("#graph")
        beside = graph.size.width
        assert beside < 100  # the wide layout: graph beside the detail pane
        for pane in ("nodes", "detail", "graph", "output"):
            app.query_one(f"#{pane}").focus()
            await pilot.pause()
            await pilot.press("Z")
            await wait_for(pilot, lambda: app.screen.maximized is app.query_one(f"#{pane}"), what=f"{pane} zoomed")
            await wait_for(pilot, lambda: app.query_one(f"#{pane}").outer_size.width == 160, what=f"{pane} full width")
            await pilot.press("Z")
            await wait_for(pilot, lambda: app.screen.maximized is None, what=f"{pane} back")
        await wait_for(pilot, lambda: graph.size.width == beside, what="the graph pane beside the detail again")


@pytest.mark.asyncio
async def test_under_the_flow_screen_the_footer_does_not_offer_q_quit_where_q_closes_it():
    """The tmux walk: under `w` the footer read `q quit`, but q there closes the flow (its own
    key, as in the passes view and help); the footer offers only what a key does now."""
    from textual.widgets._footer import FooterKey

    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow")
        await wait_for(
            pilot,
            lambda: not any(key.action == "step" for key in app.query(FooterKey)),
            what="the footer of the flow screen",
        )
        assert not any(key.key == "q" for key in app.query(FooterKey))
        await pilot.press("q")
        await wait_for(pilot, lambda: not isinstance(app.screen, FlowScreen), what="q closed the flow")
        assert app.is_running and not app.state.script_over
        await wait_for(pilot, lambda: any(key.key == "q" for key in app.query(FooterKey)), what="q quit back")


@pytest.mark.asyncio
async def test_after_o_then_escape_the_focus_is_back_on_the_node_list_and_j_moves_it():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("o")
        await wait_for(pilot, lambda: app.screen.maximized is not None, what="the output zoomed")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.maximized is None, what="the zoom's end")
        await pilot.pause()
        assert app.focused.id == "nodes"
        await pilot.press("j")
        await wait_for(pilot, lambda: app.query_one("#nodes").selected == 1, what="j moving the node list")


@pytest.mark.asyncio
async def test_the_palette_titles_every_action_by_its_name_once_and_finds_zoom():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        commands = list(app.get_system_commands(app.screen))
        titles = [c.title for c in commands]
        assert titles.count("Quit") == 1 and "Maximize" not in titles
        assert "Zoom" in titles and "Zoom output" in titles and "Detach" in titles
        assert all(":" not in t and "(" not in t for t in titles), titles
        zoom = next(c for c in commands if c.title == "Zoom")
        assert "(again or escape: back)" in zoom.help and "key Z" in zoom.help
        await pilot.press("ctrl+p")
        from textual.command import CommandPalette

        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press(*"zoom")
        from tests.helpers import highlighted

        await wait_for(pilot, lambda: (highlighted(app.screen) or "").startswith("Zoom"), what="zoom found")


@pytest.mark.asyncio
async def test_a_refusal_goes_from_the_answer_line_once_a_later_action_works():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        from tests.helpers import answer_text

        await pilot.press("end", "d")  # #2 is a leaf: nothing below it
        await wait_for(pilot, lambda: "is a leaf" in answer_text(app), what="the refusal")
        await pilot.press("u")  # this one works
        await wait_for(pilot, lambda: app.query_one("#nodes").selected == 1, what="u moving")
        await pilot.pause()
        assert "is a leaf" not in answer_text(app) and "✗" not in answer_text(app)
        await pilot.press("colon", *"scale x", "enter")
        await wait_for(pilot, lambda: "✗" in answer_text(app), what="the refused scale")
        await pilot.press("colon", *"pass 0", "enter")  # a good `pass N`
        await wait_for(pilot, lambda: "✗" not in answer_text(app), what="the refusal gone")


def _where(text: str, fragment: str) -> tuple[int, int]:
    """(column, row) of `fragment` in a pane's text."""
    for row, line in enumerate(text.splitlines()):
        if fragment in line:
            return line.index(fragment) + 1, row
    raise AssertionError(f"{fragment!r} not in {text}")


@pytest.mark.asyncio
async def test_a_click_on_a_node_reference_in_the_graph_or_detail_pane_selects_it():
    from tests.helpers import detail_text, graph_text

    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.click("#graph-body", offset=_where(graph_text(app), "#1 MulBackward0"))
        await wait_for(pilot, lambda: app.query_one("#nodes").selected == 1, what="#1 selected from the graph")
        await pilot.pause()
        line = next(line for line in detail_text(app).splitlines() if line.startswith("↓ inputs"))
        assert "#2 AccumulateGrad" in line
        await pilot.click("#detail-body", offset=_where(detail_text(app), "#2 AccumulateGrad"))
        await wait_for(pilot, lambda: app.query_one("#nodes").selected == 2, what="#2 selected from the detail")
        assert app.state.current == 0  # selecting is not stepping
