"""The passes view's plots: `s` smooths the loss and norms as TensorBoard
does (a debiased moving average), `t` puts one module's or parameter's gradient norm on the norm
plot (the debugger's selected node's, or any from a list)."""

from __future__ import annotations

import math

import pytest

from gradtui.protocol import events as ev
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.screens.plotchoice import PlotChoiceScreen
from gradtui.ui.series import PassSeries, ema
from gradtui.ui.widgets.plots import SeriesPlot
from tests.helpers import colored_cells, flow_row, plot_lines, script, started, wait_for

pytestmark = pytest.mark.timeout(120)


def test_ema_is_tensorboards_debiased_average_and_skips_what_is_not_finite():
    values = [4.0, None, 2.0, float("nan"), 1.0]
    smoothed = ema(values, 0.6)
    # TensorBoard: last = last * w + (1 - w) * v; shown: last / (1 - w ** n), n the finite values so far
    last, n, expected = 0.0, 0, []
    for v in values:
        if v is None or not math.isfinite(v):
            expected.append(v)
            continue
        last, n = last * 0.6 + 0.4 * v, n + 1
        expected.append(last / (1 - 0.6**n))
    assert smoothed[0] == 4.0 and smoothed[1] is None and math.isnan(smoothed[3])
    assert smoothed[2] == pytest.approx(expected[2]) and smoothed[4] == pytest.approx(expected[4])
    assert ema(values, 0.0) == values


def test_each_parameter_and_module_norm_is_kept_per_pass_and_a_node_names_its_own():
    series = PassSeries()
    series.finished(0, (flow_row("fc1.weight", 3.0, 1.0), flow_row("fc1.bias", 4.0, 1.0)))
    series.finished(1, (flow_row("fc2.weight", 7.0, 1.0), flow_row("fc1.weight", float("inf"), 1.0, nonfinite=1)))
    first, second = series.points
    assert series.norm_of(first, "fc1.weight") == 3.0 and series.norm_of(first, "fc1") == 5.0
    assert series.norm_of(first, "fc2.weight") is None  # named after this pass
    assert math.isinf(series.norm_of(second, "fc1.weight")) and series.norm_of(second, "fc1.bias") is None
    assert series.choices()[:2] == ["fc2", "fc1"] and set(series.choices()[2:]) == {
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
    }
    assert series.subject("fc1.bias", "model.fc1") == "fc1.bias"
    assert series.subject(None, "model.fc1") == "fc1" and series.subject(None, "model.fc2") == "fc2"
    assert series.subject(None, "other") is None and series.subject(None, None) is None


async def _passes(pilot, norms: list[tuple[float, float]]) -> dict[str, SeriesPlot]:
    """Passes posted by hand, fc1's and fc2's weight norms each, then the passes view."""
    app = pilot.app
    await wait_for(pilot, lambda: app.state.script_over, what="the script's end")
    for i, (a, b) in enumerate(norms):
        app.apply_batch([started(i, losses=(a + b,), recorded=False)])
        app.apply_batch(
            [ev.PassFinished(i, 0, 0, flow=(flow_row("fc1.weight", a, 1.0), flow_row("fc2.weight", b, 1.0)))]
        )
    await wait_for(pilot, lambda: len(app.state.series.points) == len(norms), what="the passes")
    await pilot.press("P")
    await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")
    await pilot.pause()
    return {p.figure: p for p in app.screen.query(SeriesPlot)}


@pytest.mark.asyncio
async def test_s_smooths_the_loss_and_norm_plots_and_the_cursor_reads_both_values():
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(160, 45)) as pilot:
        plots = await _passes(pilot, [(1.0, 0.0), (9.0, 0.0), (1.0, 0.0), (9.0, 0.0)])
        loss = plots["loss"]
        await wait_for(pilot, lambda: "pass 3: 9" in plot_lines(loss)[0], what="the cursor's reading")
        assert colored_cells(loss, "#5a5a5a") == 0  # no raw line under a smoothed one yet
        await pilot.press("s")
        smoothed = ema([1.0, 9.0, 1.0, 9.0], 0.6)[-1]
        await wait_for(pilot, lambda: "smoothed 0.6" in plot_lines(loss)[0], what="the smoothing in the title")
        assert f"pass 3: 9 ~{smoothed:.4g}" in plot_lines(loss)[0]
        assert colored_cells(loss, "#5a5a5a") > 0  # the raw values, dim, under the smoothed line
        for weight in ("0.9", "0.99"):
            await pilot.press("s")
            await wait_for(pilot, lambda: f"smoothed {weight}" in plot_lines(loss)[0], what=f"smoothing {weight}")
        await pilot.press("s")
        await wait_for(pilot, lambda: "smoothed" not in plot_lines(loss)[0], what="raw again")
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_t_plots_one_parameters_norm_chosen_from_the_list():
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=(160, 45)) as pilot:
        plots = await _passes(pilot, [(3.0, 4.0), (6.0, 8.0), (1.0, 2.0)])
        norm = plots["norm"]
        await wait_for(pilot, lambda: f"pass 2: {math.sqrt(5):.4g}" in plot_lines(norm)[0], what="all parameters")
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, PlotChoiceScreen), what="the choice")
        await pilot.pause()
        await pilot.press(*"fc2.w", "enter")  # narrowed to fc2.weight, chosen
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen again")
        await wait_for(pilot, lambda: "fc2.weight" in plot_lines(norm)[0], what="the chosen title")
        assert "pass 2: 2" in plot_lines(norm)[0]
        await pilot.press("left")
        await wait_for(pilot, lambda: "pass 1: 8" in plot_lines(norm)[0], what="fc2.weight at pass 1")
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, PlotChoiceScreen), what="the choice")
        await pilot.pause()
        await pilot.press("up", "up", "up", "up", "enter")  # all parameters together again, at the top
        await wait_for(
            pilot,
            lambda: "pass 1: 10" in plot_lines(norm)[0] and "fc2" not in plot_lines(norm)[0],
            what="all parameters again",
        )
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_t_offers_the_selected_nodes_parameter_first():
    from tests.helpers import script, selected, wait_paused_at

    app = GradtuiApp(script("train_loop.py"), args=["3"])
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("f")
        await wait_for(pilot, lambda: app.state.paused is not None and app.state.paused.pass_index == 1, what="pass 1")
        graph = app.state.view.graph
        node = next(n for n, d in graph.nodes(data="info") if d.param and d.param.endswith("2.weight"))
        app.query_one("#nodes").select_node(node)
        await wait_for(pilot, lambda: selected(app) == node, what="the parameter's node")
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, PlotChoiceScreen), what="the choice")
        await pilot.pause()
        name = graph.nodes[node]["info"].param
        assert app.screen.selected == name
        await pilot.press("down", "enter")  # the second row: the selected node's
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen again")
        norm = app.screen.query_one("#plot-norm", SeriesPlot)
        expected = next(f.grad_norm for f in app.state.views[0].flow if f.name == name)  # the engine's norm of .grad
        await wait_for(pilot, lambda: name in plot_lines(norm)[0], what="the parameter's plot")
        assert app.state.series.norm_of(app.state.series.points[0], name) == expected
        await pilot.press("escape")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end")
