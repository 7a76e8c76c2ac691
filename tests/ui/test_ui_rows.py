"""Pilot tests of the rows and the passes view: clicks select the row
clicked, browsing moves every pane, the output pane's last column, the flow's zero weights."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from gradtui.ui.app import GradtuiApp
from gradtui.ui.flowtable import flag_of, flow_rows
from gradtui.ui.fmt import cut_left
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.state import UIState
from gradtui.ui.widgets.detail import DetailPane
from gradtui.ui.widgets.graph_view import GraphPane
from gradtui.ui.widgets.header import GradHeader
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import OutputLog
from tests.helpers import (
    detail_text,
    example,
    finished,
    flow_row,
    graph_text,
    run_mlp_pass,
    selected,
    started,
    wait_for,
    wait_paused_at,
)

SMALL = (80, 24)


async def click_row(pilot, widget, row: int) -> None:
    """Click the middle of list row `row` (on screen), below the widget's top border."""
    top = round(widget.scroll_offset.y)
    await pilot.click(widget, offset=(widget.size.width // 2, 1 + row - top))


@pytest.mark.asyncio
async def test_a_click_selects_the_node_row_or_module_row_clicked():
    """A click selected the row below the one clicked (`event.y` counts the border)."""
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        nodes = app.query_one(NodeList)
        order = app.state.view.order
        for row in (3, 1, 6):
            await click_row(pilot, nodes, row)
            await wait_for(pilot, lambda: selected(app) == order[row], what=f"row {row} selected")
            await pilot.pause()
            assert app.query_one(DetailPane).node == order[row]

        await pilot.press("m")
        await wait_for(pilot, lambda: nodes.by_module, what="the module view")
        await pilot.pause()
        tree = nodes.tree
        module_row = next(i for i, r in enumerate(tree.rows) if r.module is not None and i > 0)
        await click_row(pilot, nodes, module_row)
        await wait_for(pilot, lambda: nodes.selected_module == tree.rows[module_row].module, what="the module row")
        node_row = next(i for i, r in enumerate(tree.rows) if r.node is not None)
        await click_row(pilot, nodes, node_row)
        await wait_for(pilot, lambda: selected(app) == tree.rows[node_row].node, what="the node row")


@pytest.mark.asyncio
async def test_a_click_selects_the_flow_row_and_the_pass_row_clicked():
    app = GradtuiApp(example("mlp.py"), commands=["break pass 1", "continue"])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(
            pilot, lambda: app.state.paused is not None and app.state.paused.pass_index == 1, what="the pause in pass 1"
        )
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the end")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        table = app.screen.query_one(DataTable)
        await pilot.click(table, offset=(4, 1 + 2))  # the header row, then rows 0, 1, 2
        await wait_for(pilot, lambda: table.cursor_row == 2, what="flow row 2")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, FlowScreen))

        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")
        table = app.screen.query_one(DataTable)
        assert table.row_count == 3
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(3)]
        assert [r[0].split()[0] for r in rows] == ["0", "1", "2"]
        assert rows[1][3] == "1"  # pass 1 had the breakpoint hit
        assert rows[2][2] == "unhooked" and rows[0][2] == "10"
        assert rows[0][1] == f"{app.state.summaries[0].losses[0]:.4g}"
        await pilot.click(table, offset=(2, 1 + 0))  # pass 0's row
        await wait_for(pilot, lambda: not isinstance(app.screen, PassesScreen), what="the screen to close")
        await wait_for(pilot, lambda: app.state.view.index == 0, what="pass 0 on screen")
        assert "browsing" in app.query_one(GradHeader).pass_text


@pytest.mark.asyncio
async def test_browsing_to_an_unhooked_pass_moves_every_pane():
    """After `[` to an unhooked pass the header said `pass 1 … browsing` while the detail
    pane showed pass 0's node."""
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the end")
        await pilot.press("left_square_bracket", "left_square_bracket")
        await wait_for(pilot, lambda: app.state.view.index == 0, what="pass 0")
        await pilot.press("j")
        await wait_for(pilot, lambda: selected(app) == app.state.view.order[1])
        assert "pass 0" in app.query_one(GraphPane).border_title
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: app.state.view.index == 1, what="pass 1")
        await pilot.pause()
        assert "pass 1" in app.query_one(GradHeader).pass_text and "browsing" in app.query_one(GradHeader).pass_text
        assert "pass 1" in app.query_one(NodeList).border_title
        text = detail_text(app)
        assert "pass 1 ran unhooked" in text and "last pass 2" in text  # the run's story, then pass 1
        assert not any(line.startswith("op ") for line in text.splitlines())  # no node of pass 0 left over
        assert "pass 1" in app.query_one(GraphPane).border_title and "unhooked" in graph_text(app)


def test_the_one_hooked_pass_of_a_loop_is_kept_over_unhooked_ones():
    """With 20 views kept, a loop's one hooked pass was pushed out by the unhooked ones after it."""
    state = UIState("train.py")
    for event in run_mlp_pass(0):
        state.apply(event)
    for index in range(1, 60):
        state.apply(started(index, recorded=False))
        state.apply(finished(index, total=0))
    kept = [v.index for v in state.views]
    assert kept[0] == 0 and kept[-1] == 59 and len(kept) <= 20
    assert state.last_recorded is not None and state.last_recorded.index == 0


@pytest.mark.asyncio
async def test_the_output_pane_keeps_its_last_column_and_graph_rows_their_gutter():
    """The scrollbar hid the last column (`too many indice`); wrapped graph rows lost their
    depth gutter."""
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        log = app.query_one(OutputLog)
        width = log.scrollable_content_region.width
        line = "x" * (width - len("indices")) + "indices"
        log.write_lines("\n".join([line] * 30))  # enough for a scrollbar
        await pilot.pause()
        assert log.max_scroll_y > 0
        assert log.render_line(log.size.height - 1).text[:width] == line

        graph = graph_text(app).split("whole pass, by depth from the root")[1].strip("\n").splitlines()
        assert graph and all(" │ " in row[:6] for row in graph), graph


def test_a_zero_weight_is_its_own_flow_case_not_an_explosion():
    """Zero-initialised biases were flagged `exploding` (weight norm 0, ratio inf)."""
    zero_bias = flow_row("fc.bias", 0.3, 0.0)
    assert zero_bias.ratio == float("inf")
    assert flag_of(zero_bias, 0.01) == "zero weight"
    rows = flow_rows((flow_row("fc.weight", 0.5, 1.0), zero_bias, flow_row("fc2.weight", 50.0, 1.0)))
    assert [r.flag for r in rows] == ["", "zero weight", "exploding"]
    assert rows[1].bar == ""  # no bar off the scale for it
    nan_on_zero = flow_row("fc3.bias", float("nan"), 0.0, nonfinite=2)
    assert flag_of(nan_on_zero, 0.01) == "non-finite"


@pytest.mark.asyncio
async def test_u_and_d_walk_the_graph_n_steps_and_r_finishes():
    """pdb's fingers: n next, u/d up and down, r return."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("n")
        await wait_paused_at(pilot, 1)
        await pilot.press("d")
        await wait_for(pilot, lambda: selected(app) == 2, what="d to the input")
        await pilot.press("u", "u")
        await wait_for(pilot, lambda: selected(app) == 0, what="u twice to the root")
        await pilot.press("u")
        await wait_for(pilot, lambda: "the root" in str(app.query_one("#answer").visual))
        await pilot.press("r")
        await wait_for(pilot, lambda: app.state.status == "finished", what="r to the end")
        assert app.state.view.leaf_grads[2].values == (36.0,)


def test_module_paths_are_cut_at_dots_never_mid_word():
    """`▾ …o module)` was cut mid-word."""
    assert cut_left("encoder.layers.3.attn", 12) == "…3.attn"
    assert cut_left("encoder.layers.3.attn", 14) == "…layers.3.attn"
    assert cut_left("(no module)", 11) == "(no module)"
    assert cut_left("averyveryverylongname", 8) == "…ongname"


@pytest.mark.asyncio
async def test_the_module_view_at_80x24_shows_whole_module_names():
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        nodes = app.query_one(NodeList)
        await pilot.press("m")
        await wait_for(pilot, lambda: nodes.by_module, what="the module view")
        await pilot.press("end")  # the (no module) group comes last
        await wait_for(pilot, lambda: nodes.cursor == nodes.row_count - 1, what="the last row")
        await pilot.pause()
        rows = [nodes.render_line(y).text for y in range(nodes.size.height)]
        assert any("▾ (no module)" in row for row in rows), rows
        assert not any("…" in row for row in rows), rows
