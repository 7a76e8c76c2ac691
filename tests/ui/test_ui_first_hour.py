"""What a new user reads in the first hour, each said truly: the help screen's rows, the header's
script name at 80 columns, the detail pane of a node whose gradient has gone by, a NaN gradient's
range, the passes view's note on what it kept, and the node list after `gradtui attach`."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from textual.widgets import Static

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.widgets.header import GradHeader
from tests.helpers import SCRIPTS, wait_for, wait_paused_at


def _text(widget: Static) -> str:
    return str(widget.render())


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_every_key_of_the_help_screen_fits_its_column(size):
    """`enter space` wrapped in a 10-cell column: `enter` beside its text, `space` on a row of its
    own with nothing beside it. Each label fits its column on one line."""
    app = GradtuiApp(str(SCRIPTS / "chain.py"))
    async with app.run_test(size=size) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        await pilot.pause()
        labels = list(app.screen.query(".help-key"))
        assert any(_text(label) == "enter space" for label in labels)
        for label in labels:
            assert label.size.width >= cell_len(_text(label)), _text(label)
            assert label.size.height == 1, _text(label)


@pytest.mark.asyncio
async def test_the_80_column_header_keeps_the_script_name():
    """At 80 columns a long op name (`paused at #0 MseLossBackward0 (loss)`) pushed the script's
    name out of the header; the state's short form goes first now."""
    app = GradtuiApp(str(SCRIPTS / "nanmlp.py"))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.pause()
        header = str(app.query_one(GradHeader).render())
        assert "nanmlp.py" in header and "pass 0" in header and "paused" in header, header
        assert " ran" in header, header  # `0/15 ran` stays too


@pytest.mark.asyncio
async def test_the_passes_view_says_which_passes_kept_node_data():
    """The demo continued from its first pause: pass 0 was hooked, passes 1 and 2 ran unhooked
    (nothing could stop in them). The note said "node data kept for the last 3"; only pass 0's
    node data is there."""
    from gradtui.cli.main import demo_path
    from gradtui.ui.screens.passes import PassesScreen

    app = GradtuiApp(demo_path())
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the demo's end")
        assert [summary.recorded for summary in app.state.summaries] == [True, False, False]
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes view")
        note = _text(app.screen.query_one("#passes-note", Static))
        assert "node data kept for pass 0 " in note + " " and "last 3" not in note, note


@pytest.mark.asyncio
async def test_a_node_whose_gradient_was_sent_does_not_say_not_arrived_yet():
    """The demo stepped past its AddmmBackward0 (#3): it has sent #5 and #6 their gradients, which
    have not run. Selected, #6 said "not arrived yet"; it names the node that sent it."""
    from gradtui.cli.main import demo_path
    from gradtui.ui.widgets.node_list import NodeList
    from tests.helpers import detail_text

    app = GradtuiApp(demo_path())
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_paused_at(pilot, 0)
        while app.state.current != 4:
            before = app.state.current
            await pilot.press("s")
            await wait_for(
                pilot, lambda: app.state.current != before and app.state.paused is not None, what="the next pause"
            )
        view = app.state.view
        assert 3 in view.grad_inputs and 6 not in view.ran and list(view.graph.predecessors(6)) == [3]
        app.query_one(NodeList).select_node(6)
        await wait_for(pilot, lambda: "op TBackward0" in detail_text(app), what="#6 in the detail pane")
        text = detail_text(app)
        assert "not arrived yet" not in text, text
        assert "sent by #3 AddmmBackward0" in text, text


@pytest.mark.asyncio
async def test_attached_to_a_script_paused_deep_in_a_pass_the_paused_row_is_on_screen():
    """`gradtui attach` to a script waiting at a breakpoint on #100 of 111 nodes: the node list
    opened at its top, the paused row far below it, off screen."""
    import os

    from gradtui.ui.widgets.node_list import NodeList
    from tests.processes import Listening, remote_target

    agent = Listening(SCRIPTS / "encoder.py", os.environ["GRADTUI_RUNTIME_DIR"])
    try:
        agent.wait_listening()
        # A first client arms the breakpoint, lets the script run to it and detaches there (the
        # run's first pause waits for a client that resumes it: leaving it alone would not).
        first = agent.attach(agent.address, "--headless", "-c", "break #100", "-c", "continue")
        assert first.returncode == 0, first.stderr
        app = GradtuiApp(target=remote_target(agent))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.state.current == 100, what="the pause at #100")
            await pilot.pause()
            await pilot.pause()
            nodes = app.query_one(NodeList)
            await wait_for(pilot, lambda: nodes.selected == 100, what="#100 selected")

            def on_screen() -> bool:  # the scroll follows the selection a refresh later
                top = round(nodes.scroll_offset.y)
                return top <= nodes.cursor < top + nodes.size.height

            await wait_for(pilot, on_screen, what="the paused row scrolled into view")
    finally:
        agent.close()


@pytest.mark.asyncio
async def test_a_nan_gradient_shows_the_finite_min_and_max_beside_its_count(tmp_path):
    """`break nan` stops after the sqrt whose gradient is NaN where its input was 0 (0/0), finite
    elsewhere, 200 values: the detail pane said `min nan max nan`; it gives the finite values'
    min and max, torch's."""
    import math

    import torch

    from gradtui.protocol.stats import format_number
    from tests.helpers import detail_text

    path = tmp_path / "nan_sqrt.py"
    path.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "w = torch.rand(200)\n"
        "w[::7] = 0.0\n"
        "w.requires_grad_()\n"
        "scale = (w != 0).float()\n"
        "(torch.sqrt(w) * scale).sum().backward()\n"
        "torch.save(w.grad, __file__ + '.grad')\n"
    )
    app = GradtuiApp(str(path))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("colon", *"break", "space", *"nan", "enter")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 1, what="break nan")
        await pilot.press("escape")
        await pilot.press("c")
        await wait_for(
            pilot,
            lambda: app.state.paused is not None and app.state.paused.phase == "after",
            timeout=60,
            what="the NaN stop",
        )
        node = app.state.paused.node
        await wait_paused_at(pilot, node)
        view = app.state.view
        assert view.title(node).endswith("SqrtBackward0")
        [sent] = view.grad_inputs[node]
        assert sent.nonfinite == 29 and sent.numel == 200
        text = detail_text(app)
        assert "min nan" not in text and "max nan" not in text, text
        assert "(finite values)" in text, text
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end")
    grad = torch.load(str(path) + ".grad")  # the gradient the sqrt sent on, as torch made it
    finite = grad[torch.isfinite(grad)]
    assert sent.finite_range == (finite.min().item(), finite.max().item())
    assert f"min {format_number(finite.min().item())}" in text and format_number(finite.max().item()) in text, text
    assert math.isnan(sent.min) and math.isnan(sent.max)
