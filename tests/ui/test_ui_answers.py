"""Pilot tests of whole answers, the command bar,
edits, the end of a run and the status line."""

from __future__ import annotations

import pytest
import torch
from textual.keys import _character_to_key

from gradtui.engine.stats.summary import summarize
from gradtui.protocol import events as ev
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.prompt import PromptScreen
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.graph_view import GraphPane
from tests.helpers import detail_text, example, output_lines, script, wait_for, wait_paused_at

SMALL = (80, 24)


def answer_line(app: GradtuiApp) -> str:
    return str(app.query_one(CommandBar).query_one("#answer").visual)


async def type_line(pilot, text: str, enter: bool = True) -> None:
    """`:` then `text` key by key, then enter."""
    await pilot.press("colon", *[_character_to_key(ch) for ch in text], *(["enter"] if enter else []))


async def answered(pilot, command: str) -> str:
    """Type `command` in the bar and wait for its answer; the answer's whole text."""
    app = pilot.app
    bar = app.query_one(CommandBar)
    bar.answer_text = ""
    await type_line(pilot, command)
    await wait_for(pilot, lambda: bar.answer_text, what=f"the answer to {command!r}")
    await pilot.pause()
    return bar.answer_text


@pytest.mark.asyncio
async def test_why_shows_its_whole_answer_in_the_output_pane_echoed_once():
    """At 80 columns `why y` ended `… it does` in the one-line bar and the output pane had
    only the echo; errors and multi-line answers were echoed twice."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        text = await answered(pilot, "why y")
        assert len(text) > 80  # too long for the bar at this width: the case at hand
        lines = output_lines(app)
        assert lines.count("(gradtui) why y") == 1
        at = lines.index("(gradtui) why y")
        assert lines[at + 1 : at + 1 + len(text.splitlines())] == text.splitlines()
        assert "whole answer in the output pane" in answer_line(app)

        error = await answered(pilot, "frobnicate")
        assert "unknown command" in error
        lines = output_lines(app)
        assert lines.count("(gradtui) frobnicate") == 1 and error.splitlines()[0] in lines

        printed = await answered(pilot, "print")  # its last value used to be cut at 80 columns
        lines = output_lines(app)
        at = lines.index("(gradtui) print")
        assert lines[at + 1 : at + 1 + len(printed.splitlines())] == printed.splitlines()

        await pilot.press("p")  # a key's command is echoed with its answer, once
        await wait_for(pilot, lambda: output_lines(app).count("(gradtui) print") == 2, what="p's answer")


@pytest.mark.asyncio
async def test_escape_clears_the_command_bar():
    """`:` `sca` Esc `:` `print` Enter answered `unknown command 'scaprint'`; so did ↑ Esc."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        bar = app.query_one(CommandBar)
        await type_line(pilot, "sca", enter=False)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.focused is not bar.input)
        assert bar.input.value == ""
        text = await answered(pilot, "print")
        assert "unknown" not in text and "[1] float32" in text

        await pilot.press("colon", "up")
        assert bar.input.value == "print"
        await pilot.press("escape", "colon")
        assert bar.input.value == ""
        await pilot.press(*"flow", "escape", "colon", *"help", "enter")
        await wait_for(pilot, lambda: "(gradtui) help" in output_lines(app), what="help's answer")
        assert not any("flowhelp" in line for line in output_lines(app))


@pytest.mark.asyncio
async def test_e_starts_empty_so_typing_an_expression_replaces_the_gradient():
    """The prompt was pre-filled with `g`, the cursor after it: `torch.ones(1)` became `gtorch.ones(1)`."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), what="the edit prompt")
        field = app.screen.query_one("#prompt-input")
        assert field.value == "" and "g" in field.placeholder
        await pilot.press(*[_character_to_key(ch) for ch in "torch.ones(1) * 5"], "enter")
        await wait_for(pilot, lambda: 1 in app.state.view.edits, what="the edit")
        await pilot.pause()
        assert app.state.view.edits[1][0][0] == "set torch.ones(1) * 5"
        assert "values [5]" in detail_text(app)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the end")
        assert app.state.view.leaf_grads[2].values == (15.0,)  # 5 * dy/dx


@pytest.mark.asyncio
async def test_an_edit_of_a_big_gradient_keeps_its_preview_and_histogram():
    """`scale` on a [64, 16] gradient wiped the histogram and left `values [… 1024 more]`."""
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0)
        for _ in range(12):
            grads = app.state.view.grad_outputs.get(app.state.current, ())
            if grads and grads[0] is not None and grads[0].shape == (64, 16):
                break
            paused = app.state.paused
            await pilot.press("s")
            await wait_for(pilot, lambda: app.state.paused is not None and app.state.paused is not paused)
        node = app.state.current
        await wait_paused_at(pilot, node)
        before = detail_text(app)
        assert "values [" in before and "max" in before
        await type_line(pilot, "scale 0.5")
        await wait_for(pilot, lambda: node in app.state.view.edits, what="the edit")
        await pilot.pause()
        incoming = detail_text(app).split("incoming gradient")[1].split("outgoing")[0]
        assert "edited: scale 0.5" in incoming
        assert "values [… " not in incoming  # values known, not `[… 1024 more]`
        assert "values [" in incoming
        bars = [line for line in incoming.splitlines() if any(ch in line for ch in "▁▂▃▄▅▆▇█")]
        assert bars, incoming  # a histogram is still drawn
        if app.state.view.grad_outputs_hist.get(node) is None:  # the edit's summary had none
            assert "as it arrived, before the edit" in incoming

        # An edit whose summary has a histogram (what the session should send) replaces it.
        after = summarize(torch.full((64, 16), 0.25), histogram=True)
        app.apply_batch(
            [ev.GradEdited(app.state.view.index, node, "set g * 0 + 0.25", app.state.view.grad_outputs[node], (after,))]
        )
        await wait_for(pilot, lambda: len(app.state.view.edits[node]) == 2, what="the second edit")
        await pilot.pause()
        text = detail_text(app).split("incoming gradient")[1]
        assert "values [0.25, 0.25" in text and "as it arrived" not in text


@pytest.mark.asyncio
async def test_the_end_of_a_run_tells_its_story_with_the_leaf_gradients():
    """After `c` on mlp.py the last screen said `ran unhooked: no node data` and `w shows its
    gradient flow once it ends` although it had ended."""
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        await type_line(pilot, "scale 2")
        await wait_for(pilot, lambda: "gradient now" in answer_line(app), what="the edit's answer")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the end")
        await pilot.pause()
        text = detail_text(app)
        assert "once it ends" not in text
        assert "exit status 0" in text and "3 passes run" in text
        assert app.state.live.loss_text() in text  # the last pass's loss
        flow = app.state.live.flow
        assert flow
        for row in flow:  # every leaf's gradient, by name
            assert f"{row.name}.grad" in text
        assert "pass 0 has per-node statistics" in text
        # the status line no longer says what an edit did in a pass long over
        assert "gradient now" not in answer_line(app) and "exited with status 0" in answer_line(app)
        await pilot.press("left_square_bracket", "left_square_bracket")
        await wait_for(pilot, lambda: app.state.view.index == 0, what="pass 0")
        await pilot.pause()
        assert app.state.view.leaf_grads
        for leaf in app.state.view.leaf_grads:
            name = app.state.view.graph.nodes[leaf]["info"].param
            assert f"{name}.grad" in detail_text(app)


@pytest.mark.asyncio
async def test_a_script_without_backward_says_so_everywhere():
    """The graph said `no pass yet` after a script that never called backward; `[` said
    `no older pass kept (the last 0 are)`."""
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, lambda: app.state.script_over, what="the script's end")
        await pilot.pause()
        graph = str(app.query_one(GraphPane).query_one("#graph-body").visual)
        assert "never called backward" in graph
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: "no pass yet" in answer_line(app), what="the answer to [")
        assert "the last 0" not in answer_line(app)


@pytest.mark.asyncio
async def test_a_colon_typed_in_the_bar_or_a_prompt_is_text():
    """`:` is a priority key (the bar takes the keys typed right after it); inside the bar, a
    prompt or the palette it is still a character."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SMALL) as pilot:
        await wait_paused_at(pilot, 0)
        text = await answered(pilot, "break chain.py:6")
        assert "breakpoint 1 at chain.py:6" in text
        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), what="the edit prompt")
        await pilot.press(*[_character_to_key(ch) for ch in "g[:1] * 2"], "enter")
        await wait_for(pilot, lambda: 1 in app.state.view.edits, what="the edit")
        assert app.state.view.edits[1][0][0] == "set g[:1] * 2"
