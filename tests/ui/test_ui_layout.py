"""The 80x24 layout, zooming, borders in 256 colours, themes, the node search, and the output
pane's terminal semantics (at 80x24, and what users of pudb and Textual expect)."""

from __future__ import annotations

import pytest
from rich.color import ColorSystem
from textual.app import App, ComposeResult
from textual.command import CommandPalette
from textual.keys import _character_to_key
from textual.widgets import DataTable, Footer

from gradtui.cli.main import demo_path
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.search import NodeIndex, ranked_matches
from gradtui.ui.widgets.detail import DetailPane
from gradtui.ui.widgets.graph_view import GraphPane
from gradtui.ui.widgets.header import GradHeader
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import OutputLog
from tests.helpers import detail_text, example, output_lines, row_text, script, selected, wait_for, wait_paused_at

SMALL = (80, 24)
DEMO = demo_path()


@pytest.mark.asyncio
async def test_at_80x24_labels_header_and_the_paused_node_come_first():
    app = GradtuiApp(example("lstm.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        view = app.state.view
        nodes = app.query_one(NodeList)
        for node in view.order[: nodes.size.height]:  # every label on screen is whole
            tags = " ".join(view.graph.nodes[node]["info"].tags)
            assert tags in row_text(app, node) and "…" not in row_text(app, node)
        assert any("outputs[3]" in row_text(app, n) for n in view.order[: nodes.size.height])
        header = str(app.query_one(GradHeader).render())
        assert "0/70 ran" in header and "paused" in header and "pass 0" in header
        text = detail_text(app)
        assert text.splitlines()[0].startswith("op MeanBackward0") and "▶ paused here" in text
        assert "at lstm.py:23 │ loss = " in text  # the source line beside the labels
        assert "incoming gradient" in text
        footer = app.query_one(Footer)
        assert footer.compact


@pytest.mark.asyncio
async def test_at_80x24_the_flow_table_shows_its_flags_and_the_header_says_browsing():
    app = GradtuiApp(script("ui/flow_extremes.py"), record_all=True)
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the end")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        flag_x = sum(c.get_render_width(table) for c in table.ordered_columns[:5])
        assert flag_x + table.ordered_columns[5].get_render_width(table) <= table.size.width
        await pilot.press("escape")
        if len(app.state.views) > 1:
            await pilot.press("left_square_bracket")
            await wait_for(pilot, lambda: app.state.browsed is not None, what="an older pass")
            await pilot.pause()
            assert "browsing" in str(app.query_one(GradHeader).render())


@pytest.mark.asyncio
async def test_z_zooms_the_focused_pane_o_the_output_escape_comes_back():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        nodes = app.query_one(NodeList)
        await pilot.press("Z")
        await wait_for(pilot, lambda: app.screen.maximized is nodes, what="the node list zoomed")
        await pilot.pause()
        assert nodes.size.height >= 24 - 1 - 2 - 1 - 2  # all but the header, bar, footer, border
        await pilot.press("Z")
        await wait_for(pilot, lambda: app.screen.maximized is None, what="back")
        await pilot.press("o")
        output = app.query_one(OutputLog)
        await wait_for(pilot, lambda: app.screen.maximized is output and output.has_focus, what="the output zoomed")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.maximized is None, what="escape un-zooms")
        await pilot.press("s")  # engine keys still work after a zoom
        await wait_paused_at(pilot, 1)


@pytest.mark.asyncio
async def test_unfocused_borders_stay_apart_from_the_background_in_256_colours():
    """Border and background were both colour 233 in 256 colours: no structure without focus."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        for pane in (app.query_one(OutputLog), app.query_one(DetailPane), app.query_one(GraphPane)):
            assert not pane.has_focus
            _, background = pane.background_colors
            border = background + pane.styles.border_top[1]
            eight = lambda c: c.rich_color.downgrade(ColorSystem.EIGHT_BIT).number  # noqa: E731
            assert eight(border) != eight(background), pane


@pytest.mark.asyncio
async def test_themes_by_keyword_and_a_bad_name_falls_back_with_a_notice():
    app = GradtuiApp(example("chain.py"), theme="textual-light")
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        assert app.theme == "textual-light"
    app = GradtuiApp(example("chain.py"), theme="no-such-theme")
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        assert app.theme == "gradtui"
        assert any("no theme 'no-such-theme'" in line for line in output_lines(app))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Theme" in titles  # Textual's theme switcher is in the palette


@pytest.mark.asyncio
async def test_the_palette_finds_nodes_by_op_label_module_and_source():
    app = GradtuiApp(DEMO)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0)
        index = app.nav.node_index()
        graph = app.state.view.graph

        def best(query: str) -> int:
            from textual.fuzzy import Matcher

            return ranked_matches(index, Matcher(query).match)[0][1]

        assert graph.nodes[best("tanh")]["info"].name == "TanhBackward0"
        assert graph.nodes[best("fc1.weight")]["info"].param == "fc1.weight"
        assert "prediction" in graph.nodes[best("prediction")]["info"].labels
        assert graph.nodes[best("torch.tanh(self")]["info"].name == "TanhBackward0"  # the source text
        assert isinstance(index, NodeIndex)

        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press(*[_character_to_key(ch) for ch in "fc1.bias"])
        await wait_for(pilot, lambda: app.screen.query_one("CommandList").option_count > 0, what="hits")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: graph.nodes[selected(app)]["info"].param == "fc1.bias", what="fc1.bias selected")


class LogApp(App):
    """Just an output pane, for its unit tests."""

    def compose(self) -> ComposeResult:
        yield OutputLog(id="output")


@pytest.mark.asyncio
async def test_the_output_pane_overwrites_on_carriage_return_across_writes_and_keeps_colours():
    app = LogApp()
    async with app.run_test(size=(60, 10)) as pilot:
        log = app.query_one(OutputLog)
        for i in range(0, 101, 10):  # a tqdm bar: one write per update, no newline
            log.write_stream(f"\r{i:3d}%|{'#' * (i // 10):<10}|")
        log.write_stream("\n")
        log.write_stream("epoch 1 \x1b[32mok\x1b[0m\nhalf")
        log.write_stream(" a line\n\n")
        log.write_lines("(gradtui) print")
        log.write_stream("after\r\n")
        await pilot.pause()
        assert log.plain_lines() == ["100%|##########|", "epoch 1 ok", "half a line", "", "(gradtui) print", "after"]
        green = [seg for seg in log.styled_line(1).render(app.console) if seg.text == "ok"]
        assert green and green[0].style.color is not None

        width = log.scrollable_content_region.width
        log.write_lines("w" * (width + 5) + "END")  # wraps hard, as a terminal does
        await pilot.pause()
        rows = [log.render_line(y).text for y in range(log.size.height)]
        at = next(i for i, row in enumerate(rows) if row.startswith("w"))
        assert rows[at][:width] == "w" * width and rows[at + 1].rstrip() == "wwwwwEND"


@pytest.mark.asyncio
async def test_the_output_pane_takes_100k_lines_styling_only_what_is_drawn():
    app = LogApp()
    async with app.run_test(size=(60, 10)) as pilot:
        log = app.query_one(OutputLog)
        for chunk in range(100):
            log.write_stream("".join(f"line {chunk * 1000 + i}\n" for i in range(1000)))
        await pilot.pause()
        assert log.line_count == 100_000
        assert log.plain_lines()[-1] == "line 99999"
        assert log.max_scroll_y == 100_000 - log.size.height  # follows the end
        assert log.render_line(log.size.height - 1).text.rstrip() == "line 99999"
        assert log.renders <= 4 * log.size.height  # only the rows on screen were styled
        log.write_stream("one more\n")
        assert log.line_count <= log.max_lines and log.plain_lines()[-1] == "one more"
