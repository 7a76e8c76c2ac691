"""Pilot tests of the module view, the flow screen, browsing passes, unhooked and nested passes."""

from __future__ import annotations

import math

import pytest
from textual.widgets import DataTable

from gradtui.protocol import events as ev
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.widgets.header import GradHeader
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.plots import PassPlots, SeriesPlot
from tests.helpers import (
    SIZE,
    colored_cells,
    detail_text,
    example,
    flow_row,
    output_lines,
    plot_lines,
    run_mlp_pass,
    script,
    selected,
    started,
    wait_for,
    wait_paused_at,
)


def list_lines(app: GradtuiApp) -> list[str]:
    """The node list's rows on screen, as text."""
    nodes = app.query_one(NodeList)
    return [nodes.render_line(y).text.rstrip() for y in range(min(nodes.size.height, nodes.row_count))]


@pytest.mark.asyncio
async def test_m_folds_the_node_list_by_module_and_keys_fold_and_unfold():
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        nodes = app.query_one(NodeList)
        await pilot.press("m")
        await wait_for(pilot, lambda: nodes.by_module, what="the module view")
        await pilot.pause()
        assert selected(app) == 0  # the paused node stays selected, its module opened
        lines = list_lines(app)
        # an nn.Sequential's children are led by its variable: `model.0`, not a bare `0`
        assert [line.split()[1] for line in lines if line.lstrip().startswith(("▾", "▸"))] == [
            "model",
            "model.0",
            "model.1",
            "model.2",
            "(no",
        ]
        assert "by module" in nodes.border_title

        await pilot.press("home", "down")
        await wait_for(pilot, lambda: nodes.selected_module == "model.0")
        await pilot.pause()
        assert "module model.0" in detail_text(app) and "nodes 4" in detail_text(app)
        count = nodes.row_count
        await pilot.press("enter")
        await wait_for(pilot, lambda: nodes.row_count == count - 4, what="module 0 folded")
        assert list_lines(app)[1].strip().startswith("▸ model.0")
        await pilot.press("right")
        await wait_for(pilot, lambda: nodes.row_count == count, what="module 0 unfolded")
        await pilot.press("right")  # into it: its first node
        await wait_for(pilot, lambda: selected(app) == 5)
        await pilot.press("left")  # out of it: the module row
        await wait_for(pilot, lambda: nodes.selected_module == "model.0")
        await pilot.press("left")  # fold
        await wait_for(pilot, lambda: nodes.row_count == count - 4)

        await pilot.press("s")  # the next pause selects its node, opening its module
        await wait_paused_at(pilot, 1)
        await pilot.press("s")
        await wait_paused_at(pilot, 2)
        module_2 = next(line for line in list_lines(app) if line.strip().startswith("▾ model.2"))
        # module 2's Addmm (#1) sent gradient to 2.bias and its T (inside) and to the tanh (#3, module 1)
        to_tanh = app.state.view.grad_inputs[1][app.state.view.graph.nodes[1]["info"].next.index(3)]
        assert module_2.split()[-1] == f"{to_tanh.norm:.4g}"

        await pilot.press("m")
        await wait_for(pilot, lambda: not nodes.by_module)
        assert selected(app) == 2 and nodes.row_count == 10


@pytest.mark.asyncio
async def test_w_shows_the_flow_and_brackets_browse_earlier_passes():
    app = GradtuiApp(example("mlp.py"), record_all=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        assert "has not ended yet" in str(app.screen.query_one("#flow-note").visual)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, FlowScreen))

        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", timeout=30, what="the end")
        assert [v.index for v in app.state.views] == [0, 1, 2]
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        table = app.screen.query_one(DataTable)
        assert table.row_count == 4
        names = [str(table.get_row_at(i)[0]) for i in range(4)]
        assert sorted(names) == ["0.bias", "0.weight", "2.bias", "2.weight"]
        ratios = [row.ratio for row in app.state.view.flow]
        assert ratios == sorted(ratios)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, FlowScreen))

        header = app.query_one(GradHeader)
        assert header.pass_text.startswith("pass 2 · loss ")
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.state.view.index == 1, what="pass 1 on screen")
        await pilot.pause()
        assert "pass 1" in header.pass_text and "browsing · live is 2" in header.pass_text
        await pilot.press("j")
        await wait_for(pilot, lambda: selected(app) == 1)
        text = detail_text(app)
        assert "incoming norm over passes" in text and "passes 0–1" in text
        await pilot.press("left_square_bracket", "left_square_bracket")  # no pass before 0: said so
        await wait_for(pilot, lambda: "no older pass" in str(app.query_one("#answer").visual))
        assert app.state.view.index == 0
        await pilot.press("right_square_bracket", "right_square_bracket")
        await wait_for(pilot, lambda: app.state.browsed is None, what="the live pass")
        assert "browsing" not in header.pass_text

        # `pass N` in the command bar browses to a kept pass; one not run yet is refused
        def answer() -> str:
            return str(app.query_one("#answer").visual)

        await pilot.press("colon", *"pass 1", "enter")
        await wait_for(pilot, lambda: app.state.view.index == 1, what="pass 1 from `pass 1`")
        assert "showing pass 1" in answer() and "browsing · live is 2" in header.pass_text
        await pilot.press("colon", *"pass 9", "enter")
        await wait_for(pilot, lambda: "no pass 9 yet" in answer(), what="the refusal of pass 9")
        assert app.state.view.index == 1

        # P: the loss and gradient-norm plots of the passes so far, from each pass's flow
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")
        plots = {p.figure: p for p in app.screen.query(SeriesPlot)}
        assert sorted(plots) == ["loss", "norm"]
        points = app.state.series.points
        assert [p.index for p in points] == [0, 1, 2]
        for point, view in zip(points, app.state.views):
            assert point.loss == view.losses[0]
            assert point.grad_norm == pytest.approx(math.sqrt(sum(r.grad_norm**2 for r in view.flow)), rel=1e-12)
        assert all(p.drawn_version == app.state.series.version for p in plots.values())  # drawn with the data
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_the_agent_measures_no_flow_of_a_pass_nothing_shows():
    """Neither `w` nor `P` opened: the paused pass has its flow (the pass on screen), the passes
    that ran on without a pause have their leaves' gradients only; the passes view still plots their
    gradient norm (from those), and `w` says the last pass's flow was not measured."""
    app = GradtuiApp(example("mlp.py"), record_all=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", timeout=30, what="the end")
        views = list(app.state.views)
        assert [v.index for v in views] == [0, 1, 2]
        assert len(views[0].flow) == 4 and [v.flow for v in views[1:]] == [(), ()]
        assert all(len(v.leaf_grads) == 4 for v in views)
        for point, view in zip(app.state.series.points[1:], views[1:]):
            norms = [s.norm for s in view.leaf_grads.values()]
            assert point.grad_norm == pytest.approx(math.sqrt(sum(n * n for n in norms)), rel=1e-12)
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        assert "flow of pass 2 was not measured" in str(app.screen.query_one("#flow-note").visual)
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_unhooked_and_nested_passes_are_shown_for_what_they_are():
    """Engine events posted by hand (the script itself never calls backward)."""
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.script_over, what="the script's end")
        flow = (
            flow_row("fc1.weight", 0.0, 2.0),
            flow_row("fc2.weight", 0.5, 1.0),
            flow_row("fc2.bias", float("nan"), 1.0, nonfinite=3),
        )
        for event in run_mlp_pass(0):
            app.apply_batch([event])
        app.apply_batch([ev.NestedPass(0, "backward", "train.py:40", 12, "Thread-7")])
        app.apply_batch([started(1, losses=(0.5,), recorded=False)])
        app.apply_batch([ev.PassFinished(1, 0, 0, flow=flow)])
        await wait_for(
            pilot,
            lambda: app.state.live is not None and app.state.live.finished and app.state.live.index == 1,
            what="the unhooked pass",
        )
        await pilot.pause()
        nodes = app.query_one(NodeList)
        assert nodes.row_count == 0 and "unhooked" in nodes.border_title
        assert "pass 1 · loss 0.5 · loss.backward() · unhooked" in app.query_one(GradHeader).pass_text
        assert "pass 1 ran unhooked" in detail_text(app)
        output = " ".join(line.strip() for line in output_lines(app))
        assert "nested backward at train.py:40 in pass 0 from thread Thread-7: 12 nodes, ran unhooked" in output
        await pilot.press("m")  # an empty tree: nothing breaks
        await wait_for(pilot, lambda: nodes.by_module)

        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        table = app.screen.query_one(DataTable)
        flags = [str(table.get_row_at(i)[5]) for i in range(3)]  # the flag column, before the bar
        assert flags == ["vanishing", "", "non-finite"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, FlowScreen))
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.state.view.index == 0)
        await wait_for(pilot, lambda: nodes.row_count > 0, what="pass 0's tree")


async def _passes_with_a_nan(pilot, losses: tuple[float, ...]) -> dict[str, SeriesPlot]:
    """Passes posted by hand (the loss is NaN: its gradient too), then the passes view's plots."""
    app = pilot.app
    await wait_for(pilot, lambda: app.state.script_over, what="the script's end")
    for i, loss in enumerate(losses):
        bad = math.isnan(loss)
        app.apply_batch([started(i, losses=(loss,), recorded=False)])
        app.apply_batch([ev.PassFinished(i, 0, 0, flow=(flow_row("fc.weight", loss * 10, 1.0, nonfinite=int(bad)),))])
    await wait_for(pilot, lambda: len(app.state.series.points) == len(losses), what="the passes")
    await pilot.press("P")
    await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")
    await pilot.pause()
    return {p.figure: p for p in app.screen.query(SeriesPlot)}


@pytest.mark.asyncio
async def test_the_loss_and_norm_plots_mark_a_non_finite_pass():
    """The loss line used to just stop at a NaN pass, nothing said why."""
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(160, 45)) as pilot:
        plots = await _passes_with_a_nan(pilot, (4.0, 3.0, 2.0, float("nan"), 1.0, 0.5))
        for figure in ("loss", "norm"):
            plot = plots[figure]
            await wait_for(pilot, lambda: " · 1 non-finite" in plot_lines(plot)[0], what=f"the {figure} plot's count")
            assert colored_cells(plot, "color(1)") >= 3, figure  # a red line down the plot at pass 3
        await pilot.press("escape")


def _y_labels(plot: SeriesPlot) -> list[str]:
    """The y axis's tick labels, top to bottom (left of the frame's `┤`)."""
    return [line.split("┤")[0].strip() for line in plot_lines(plot) if "┤" in line]


@pytest.mark.asyncio
async def test_l_puts_the_loss_and_norm_plots_on_a_log_scale_and_back():
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(160, 45)) as pilot:
        plots = await _passes_with_a_nan(pilot, (1000.0, 100.0, 0.0, 10.0, 1.0))  # a zero: left out on a log scale
        loss = plots["loss"]
        await wait_for(pilot, lambda: _y_labels(loss), what="the loss plot's axis")
        linear = _y_labels(loss)
        await pilot.press("l")
        await wait_for(pilot, lambda: "loss · log" in plot_lines(loss)[0], what="the log scale's title")
        await wait_for(pilot, lambda: " · log" in plot_lines(plots["norm"])[0], what="the norm plot's log title")
        await wait_for(pilot, lambda: _y_labels(loss) != linear, what="the log axis")
        logged = [float(v) for v in _y_labels(loss)]
        ratios = [a / b for a, b in zip(logged, logged[1:])]
        assert ratios == pytest.approx([ratios[0]] * len(ratios), rel=0.05)  # evenly spaced in log: equal ratios
        await pilot.press("l")
        await wait_for(
            pilot, lambda: _y_labels(loss) == linear and "log" not in plot_lines(loss)[0], what="linear again"
        )
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_l_on_plots_with_no_positive_value_leaves_them_empty_not_the_app_crashed():
    """The tmux walk: after `z` zeroed pass 0's gradient, `l` then `t` in the passes view
    ended the app (plotext cannot place log ticks when no value is above zero)."""
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(80, 24)) as pilot:
        plots = await _passes_with_a_nan(pilot, (0.0, 0.0))  # loss 0 and gradient norm 0: nothing to log
        await pilot.press("l")
        for figure in ("loss", "norm"):
            plot = plots[figure]
            await wait_for(pilot, lambda: "log" in plot_lines(plot)[0], what=f"the {figure} plot's log title")
        await pilot.press("s", "left")
        await pilot.pause()
        assert all(plot_lines(plot) for plot in plots.values())  # drawn, and the app still runs
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, PassesScreen), what="the debugger")


@pytest.mark.asyncio
async def test_at_80x24_a_smoothed_log_plot_keeps_a_title_with_the_cursors_reading():
    """The tmux walk: at 80x24, `l` then `s` left the loss and norm plots with no title at all
    (its shortest form overflowed and plotext dropped it), so the cursor read nothing."""
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(80, 24)) as pilot:
        plots = await _passes_with_a_nan(pilot, (4.0, 3.0, 2.0))
        await pilot.press("l", "s")
        for figure, reading in (("loss", "2: 2"), ("norm", "2: 20")):
            plot = plots[figure]
            await wait_for(pilot, lambda: plot.smoothing > 0 and plot.log_scale, what=f"the {figure} plot smoothed")
            await pilot.pause()
            assert reading in plot_lines(plot)[0] and plot.title_text in plot_lines(plot)[0], plot_lines(plot)[:2]
        plots_box = app.screen.query_one(PassPlots)
        plots_box.chosen = "fc"  # as `t` sets it: the norm of module fc, named while there is room
        plots_box.replot()
        await pilot.pause()
        title = plot_lines(plots["norm"])[0]
        assert "fc" in title and "2: 20" in title, title
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_smoothing_one_pass_keeps_the_axis_labels_short():
    """The tmux walk: `s` on a run of one pass drew the raw and the smoothed value, a rounding
    apart, and plotext spread its axis over that gap: `0.20348939299583438` squeezed the plot."""
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(80, 24)) as pilot:
        plots = await _passes_with_a_nan(pilot, (0.20348939299583435,))
        await pilot.press("s")
        for key in ("", "l"):  # linear, then log
            if key:
                await pilot.press(key)
            for figure, plot in plots.items():
                await wait_for(pilot, lambda: plot.smoothing > 0 and _y_labels(plot), what=f"the {figure} axis")
                await pilot.pause()
                assert max(len(label) for label in _y_labels(plot)) <= 6, (key, figure, _y_labels(plot))
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_left_and_right_move_the_cursor_and_the_plots_read_its_pass():
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(160, 45)) as pilot:
        plots = await _passes_with_a_nan(pilot, (4.0, 3.0, 2.0, float("nan"), 1.0, 0.5))
        loss, norm = plots["loss"], plots["norm"]
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: "pass 5: 0.5" in plot_lines(loss)[0], what="the cursor on the pass on screen")
        assert "pass 5: 5" in plot_lines(norm)[0] and colored_cells(loss, "#ffc800") > 0  # the cursor's line
        await pilot.press("left")
        await wait_for(pilot, lambda: "pass 4: 1 " in plot_lines(loss)[0] + " ", what="the cursor on pass 4")
        assert table.cursor_row == 4 and "pass 4: 10" in plot_lines(norm)[0]
        await pilot.press("left")
        await wait_for(pilot, lambda: "pass 3: nan" in plot_lines(loss)[0], what="the cursor on the NaN pass")
        assert "pass 3: nan" in plot_lines(norm)[0]
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: table.cursor_row == 5 and "pass 5: 0.5" in plot_lines(loss)[0], what="back")
        await pilot.press("enter")  # the row chosen: the pass of the cursor
        await wait_for(pilot, lambda: not isinstance(app.screen, PassesScreen), what="the debugger")


@pytest.mark.asyncio
async def test_the_pass_in_flight_has_its_loss_plotted_and_its_norms_said_to_come_when_it_ends():
    """The walk: with the cursor on the pass in flight the plots read "pass 1: not plotted"
    although its loss was known; now the loss plot draws it and the norm plot says what is true."""
    from tests.helpers import finish_into_pass_1, script

    app = GradtuiApp(script("loop.py"))
    async with app.run_test(size=(160, 45)) as pilot:
        await finish_into_pass_1(pilot)
        assert app.state.live.index == 1 and not app.state.live.finished
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")
        plots = {p.figure: p for p in app.screen.query(SeriesPlot)}
        loss, norm = plots["loss"], plots["norm"]
        await wait_for(pilot, lambda: "pass 1: 36, running" in plot_lines(loss)[0], what="the running pass's loss")
        assert "1: running, norms at its end" in plot_lines(norm)[0]  # the long form needs a wider plot
        assert "not plotted" not in plot_lines(loss)[0] + plot_lines(norm)[0]
        assert loss._span == (36.0, 36.0)  # pass 0's loss and pass 1's: both drawn
        await pilot.press("left")  # pass 0 ended: its values
        await wait_for(pilot, lambda: "pass 0: 36" in plot_lines(loss)[0], what="the cursor on pass 0")
        assert "running" not in plot_lines(norm)[0]
        await pilot.press("escape")
