"""The variables pane, V (pudb's locals): the tensors and modules in scope where
backward was called, with shape, dtype, requires_grad, their node on the pass's graph and their
gradient's norm once the pass made it; enter selects the node, or asks `why NAME` off the graph."""

from __future__ import annotations

import math

import pytest
from textual.widgets import DataTable

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.variables import VariablesScreen
from tests.helpers import SIZE, script, selected, wait_for, wait_paused_at

pytestmark = pytest.mark.timeout(120)


async def _open(pilot) -> VariablesScreen:
    await pilot.press("V")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, VariablesScreen), what="the variables pane")
    await pilot.pause()
    return pilot.app.screen


def _choose(screen: VariablesScreen, name: str) -> None:
    screen.query_one(DataTable).move_cursor(row=next(i for i, r in enumerate(screen.rows) if r.var.name == name))


@pytest.mark.asyncio
async def test_the_call_sites_tensors_and_modules_with_their_nodes_and_norms():
    app = GradtuiApp(script("train_loop.py"), args=["2"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        screen = await _open(pilot)
        rows = {row.var.name: row for row in screen.rows}
        assert list(rows) == ["model", "x", "y", "batch", "loss"]  # the frame's tensors and modules, in order
        graph = app.state.view.graph
        assert rows["loss"].var.kind == "tensor" and rows["loss"].var.shape == () and rows["loss"].var.requires_grad
        assert rows["loss"].node == 0 and graph.nodes[0]["info"].labels == ("loss",)
        assert rows["x"].var.shape == (32, 4) and rows["x"].var.dtype == "float32"
        assert not rows["x"].var.requires_grad and rows["x"].node is None
        model = rows["model"]
        assert model.var.kind == "module" and model.var.parameters == 4 * 16 + 16 + 16 + 1
        params = {graph.nodes[n]["info"].param for n in model.var.nodes}
        assert params == {"0.weight", "0.bias", "2.weight", "2.bias"} or params == {
            "model.0.weight",
            "model.0.bias",
            "model.2.weight",
            "model.2.bias",
        }
        assert model.norm is None  # the pass has not made the leaves' gradients yet
        table = str(screen.query_one(DataTable).get_row_at(4)[4])
        assert table == "#0"

        _choose(screen, "model")  # enter on a module: its first accumulator in engine order
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, VariablesScreen), what="the pane closed")
        first = min(model.var.nodes, key=app.state.view.row.__getitem__)
        await wait_for(pilot, lambda: selected(app) == first, what="the module's first node")

        screen = await _open(pilot)  # enter on a variable off the graph: why
        _choose(screen, "x")
        bar = app.query_one(CommandBar)
        bar.answer_text = ""
        await pilot.press("enter")
        await wait_for(pilot, lambda: "x" in bar.answer_text and "grad" in bar.answer_text, what="why x answered")
        assert "requires_grad" in bar.answer_text or "not" in bar.answer_text

        await pilot.press("f")  # the pass ends: the leaves' norms are known; pass 1 pauses
        await wait_paused_at(pilot, 0)
        await wait_for(pilot, lambda: app.state.view.index == 1, what="pass 1")
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.state.view.index == 0, what="pass 0 shown")
        screen = await _open(pilot)
        model = next(r for r in screen.rows if r.var.name == "model")
        flow = app.state.view.flow  # the engine's own norms of each parameter's .grad
        expected = math.sqrt(sum(f.grad_norm**2 for f in flow))
        assert model.norm == pytest.approx(expected, rel=1e-6)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, VariablesScreen), what="the pane closed")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.pause()
        assert "variables where backward was called" in " ".join(str(w.visual) for w in app.screen.query("Static"))
        await pilot.press("escape")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end")
