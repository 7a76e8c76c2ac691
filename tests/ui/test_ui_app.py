"""Pilot tests: press keys as a user would and read what the app shows."""

from __future__ import annotations

import re

import pytest
import torch

from gradtui.protocol.events import QUIT_STATUS
from gradtui.protocol.report import Report
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.screens.prompt import PromptScreen
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.header import GradHeader
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import OutputLog
from tests.helpers import (
    SIZE,
    answer_text,
    detail_text,
    example,
    graph_text,
    highlighted,
    output_lines,
    row_text,
    script,
    selected,
    type_text,
    wait_for,
    wait_paused_at,
)

ORIGINAL_BACKWARD = torch.Tensor.backward


async def answer_prompt(pilot, key: str, text: str) -> None:
    """Press `key`, wait for its prompt, type `text` and enter."""
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, PromptScreen), what=f"the prompt of {key}")
    await type_text(pilot, text)
    await pilot.press("enter")


@pytest.mark.asyncio
async def test_step_through_chain_shows_each_gradient():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        assert "PowBackward0" in detail_text(app)
        assert "values [1]" in detail_text(app)
        assert "paused at #0 PowBackward0 (z)" in app.query_one(GradHeader).status_text
        assert row_text(app, 0).startswith("▶ 0 PowBackward0")

        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        text = detail_text(app)
        assert "MulBackward0" in text and "grad of y" in text
        assert "values [12]" in text  # dz/dy = 2y = 12
        assert "y = x * 3" in text  # the source line, marked
        assert row_text(app, 0).startswith("✓ 0 PowBackward0")
        assert row_text(app, 1).startswith("▶ 1 MulBackward0")

        await pilot.press("s")
        await wait_paused_at(pilot, 2)
        text = detail_text(app)
        assert "AccumulateGrad" in text and "grad of x" in text
        assert "values [36]" in text  # dz/dx = 36
        # the node that ran shows what it sent on
        await pilot.press("k")
        await wait_for(pilot, lambda: selected(app) == 1)
        assert "outgoing gradients" in detail_text(app)
        assert "→ #2 AccumulateGrad (x)" in detail_text(app)

        await pilot.press("s")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the script's end")
        await pilot.pause()
        view = app.state.view
        assert view.leaf_grads[2].values == (36.0,)
        assert "x.grad" in detail_text(app) and "exit status 0" in detail_text(app)
        assert all(row_text(app, n).startswith("✓") for n in (0, 1, 2))
        assert "finished · exit 0" in app.query_one(GradHeader).status_text


@pytest.mark.asyncio
async def test_scale_key_changes_the_gradient_reaching_the_leaf():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        await answer_prompt(pilot, "x", "0.5")
        await wait_for(pilot, lambda: 1 in app.state.view.edits, what="the edit")
        await pilot.pause()
        assert "edited: scale 0.5" in detail_text(app)
        assert "values [6]" in detail_text(app)
        assert "gradient now" in answer_text(app)

        await pilot.press("s")
        await wait_paused_at(pilot, 2)
        assert "values [18]" in detail_text(app)  # 6 * 3 instead of 36

        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the script's end")
        assert app.state.view.leaf_grads[2].values == (18.0,)


@pytest.mark.asyncio
async def test_b_on_a_node_then_c_pauses_there_and_b_again_removes_it():
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        order = app.state.view.order
        target = order[5]
        for _ in range(5):
            await pilot.press("j")
        await wait_for(pilot, lambda: selected(app) == target)
        await pilot.press("b")
        await wait_for(
            pilot, lambda: any(b.spec.text == f"#{target}" for b in app.state.breakpoints), what="the breakpoint"
        )
        await pilot.pause()
        assert row_text(app, target).rstrip().endswith("●")

        await pilot.press("c")
        await wait_paused_at(pilot, target)
        assert app.state.paused.reason.startswith("breakpoint 1")
        assert app.state.view.done == 5

        await pilot.press("b")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 0, what="the breakpoint's removal")
        await pilot.pause()
        assert "●" not in row_text(app, target)


@pytest.mark.asyncio
async def test_break_nan_in_the_command_bar_stops_at_the_first_nonfinite_node():
    app = GradtuiApp(example("nan.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("colon")
        await type_text(pilot, "break nan")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 1, what="break nan")
        await wait_for(pilot, lambda: "breakpoint 1 at nan" in answer_text(app))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.query_one(NodeList).has_focus)

        await pilot.press("c")
        await wait_for(
            pilot, lambda: app.state.paused is not None and app.state.paused.phase == "after", what="the NaN stop"
        )
        node = app.state.current
        await wait_paused_at(pilot, node)
        view = app.state.view
        assert view.graph.nodes[node]["info"].name == "SqrtBackward0"
        assert node in view.nonfinite
        row = row_text(app, node)
        assert row.startswith("▶") and "⚠" in row
        text = detail_text(app)
        assert "paused after it ran" in text and "non-finite 1" in text
        assert "paused after #2 SqrtBackward0 (root)" in app.query_one(GradHeader).status_text
        assert "made a non-finite gradient" in text


@pytest.mark.asyncio
async def test_q_mid_pass_ends_the_agent_process_and_the_ui_never_patches_torch():
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        assert torch.Tensor.backward is ORIGINAL_BACKWARD  # the session lives in the agent, not here
        process = app.target.process
        assert process is not None and process.returncode is None
        await pilot.press("q")
        await wait_for(
            pilot,
            lambda: process.returncode is not None and app.return_value is not None,
            timeout=5,
            what="the agent to end and the app to exit",
        )
    assert app.return_value == QUIT_STATUS and app.exit_status == QUIT_STATUS


@pytest.mark.asyncio
async def test_an_error_in_a_backward_is_shown_beside_its_node():
    app = GradtuiApp(script("ui/error_in_backward.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "failed", what="the failure")
        view = app.state.view
        failed = view.failed_node
        assert view.graph.nodes[failed]["info"].kind == "custom"
        await wait_for(pilot, lambda: selected(app) == failed)
        await pilot.pause()
        assert row_text(app, failed).startswith("✗")
        text = detail_text(app)
        assert "the backward failed here: ValueError: this backward explodes on purpose" in text
        assert 'File "error_in_backward.py", line 15, in backward' in text
        trace = text.split("Traceback")[1].split("ValueError:")[0]
        assert re.findall(r'File "([^"]+)"', trace) == ["error_in_backward.py"] * 2  # short paths; torch's folded
        assert app.exit_status == 1
        await pilot.press("j")  # the app is alive and usable
        await pilot.press("q")


@pytest.mark.asyncio
async def test_bad_commands_are_answered_in_the_bar_never_crash():
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        for line, expected in (
            ("frobnicate", "unknown command"),
            ("scale abc", "not a number"),
            ("set g[", "syntax error"),
            ("set g.sum()", ""),
        ):
            await pilot.press("colon")
            await type_text(pilot, line)
            await pilot.press("enter")
            await wait_for(
                pilot,
                lambda: answer_text(app).startswith("✗") and expected in answer_text(app),
                what=f"the answer to {line!r}",
            )
            app.query_one(CommandBar).answer("")
        # history: up brings the last line back
        await pilot.press("colon", "up")
        assert app.query_one(CommandBar).input.value == "set g.sum()"
        await pilot.press("escape")
        # on a finished script the z key is gone (the footer shows what can be done now); typed, zero is answered
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished")
        await pilot.press("z")
        await pilot.press("colon", *"zero", "enter")
        await wait_for(pilot, lambda: "has ended" in answer_text(app))
        assert app.is_running


@pytest.mark.asyncio
async def test_help_find_goto_and_palette():
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        sent: list[str] = []
        send = app.send
        app.send = lambda text: (sent.append(text), send(text))[1]  # every command the app sends
        await pilot.press("s")  # engine keys are off under the help screen
        await pilot.press("escape")  # handled after `s`: once the help is gone, `s` has been too
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))
        assert sent == [] and app.state.current == 0
        app.send = send

        from textual.command import CommandPalette

        await pilot.press("slash")  # the palette with the node provider alone
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the find palette")
        await type_text(pilot, "Accumulate")
        await wait_for(
            pilot,
            lambda: (
                len(app.screen.query("CommandList Option")) > 0 or app.screen.query_one("CommandList").option_count > 0
            ),
            what="the matches",
        )
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, CommandPalette), what="the palette to close")
        await wait_for(pilot, lambda: app.state.view.graph.nodes[selected(app)]["info"].name == "AccumulateGrad")
        first = selected(app)
        await pilot.press("N")  # the next match of the same search
        await wait_for(pilot, lambda: selected(app) != first)
        assert app.state.view.graph.nodes[selected(app)]["info"].name == "AccumulateGrad"
        await pilot.press("g")
        await wait_for(pilot, lambda: selected(app) == 0)

        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Step", "Continue", "Finish", "Quit"):
            assert title in titles
        assert "whole pass" in graph_text(app)


@pytest.mark.asyncio
async def test_commands_given_up_front_run_at_the_pauses_and_the_report_is_kept():
    report = Report()
    app = GradtuiApp(example("chain.py"), commands=["step", "break AccumulateGrad", "continue"], report=report)
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 2)
        assert app.state.paused.reason.startswith("breakpoint")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished")
    data = report.to_json()
    assert data["exit_status"] == 0 and len(data["passes"]) == 1
    assert torch.Tensor.backward is ORIGINAL_BACKWARD


@pytest.mark.asyncio
async def test_progress_and_output_while_running_many_passes():
    app = GradtuiApp(example("mlp.py"), record_all=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished")
        await pilot.pause()
        assert app.state.view.index == 2
        log = "\n".join(output_lines(app))
        assert "epoch 2 loss" in log and "exited with status 0" in log
        assert app.query_one(GradHeader).progress == "10/10 ran"


@pytest.mark.asyncio
async def test_passes_nothing_can_stop_in_run_unhooked_by_default():
    app = GradtuiApp(example("mlp.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished")
        await pilot.pause()
        assert app.state.view.index == 2 and not app.state.view.recorded
        assert "unhooked" in str(app.query_one(GradHeader).render())
        assert app.state.view.flow  # the flow of an unhooked pass is still measured


@pytest.mark.asyncio
async def test_control_codes_in_the_output_become_styles_not_garbage():
    app = GradtuiApp(script("ui/control_codes.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.status == "finished")
        # stdout and stderr come through pipes of their own, and the output pane draws its
        # batches after the status line: wait until both streams' last lines are drawn.
        await wait_for(
            pilot,
            lambda: {"bold ✓ 日本", "step 2 red"} <= set(output_lines(app)),
            what="the last line of stdout and of stderr",
        )
        await pilot.pause()
        lines = output_lines(app)
        # the `\r` updates overwrite one line, as a terminal shows them, across writes too
        assert [line for line in lines if line.startswith("step")] == ["step 2 red"]
        assert "bold ✓ 日本" in lines
        assert all(ch.isprintable() for line in lines for ch in line)
        red = app.query_one(OutputLog).styled_line(lines.index("step 2 red"))
        assert any(segment.text == "red" and segment.style.color is not None for segment in red.render(app.console))


@pytest.mark.asyncio
async def test_layout_follows_the_terminal_when_it_is_resized():
    """The layout used to follow the size before the last resize (one resize behind)."""
    from textual.widgets import Footer

    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_paused_at(pilot, 0)
        main, footer = app.query_one("#main"), app.query_one(Footer)
        assert main.has_class("wide") and not footer.compact
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not main.has_class("wide") and footer.compact and not footer.show_command_palette
        await pilot.resize_terminal(200, 50)
        await pilot.pause()
        assert main.has_class("wide") and not footer.compact and footer.show_command_palette


@pytest.mark.asyncio
async def test_a_flood_of_output_is_written_in_batches(monkeypatch):
    """Styling every line as it came made a script printing 50,000 lines take 25 s instead of
    1: only the lines drawn are styled, a few screenfuls whatever the flood."""
    app = GradtuiApp(script("ui/chatty.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.status == "finished", timeout=30)
        await pilot.pause()
        lines = output_lines(app)
        assert [line for line in lines if line.startswith("line ")] == [f"line {i}" for i in range(3000)]
        assert app.query_one(OutputLog).renders < 300


@pytest.mark.asyncio
async def test_q_while_the_script_runs_outside_backward_still_ends_it():
    app = GradtuiApp(script("ui/busy_after_backward.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: "looping" in "\n".join(output_lines(app)), what="the script's loop")
        assert not app.link.finished.is_set()
        process = app.target.process
        await pilot.press("q")
        await wait_for(
            pilot,
            lambda: process.returncode is not None and app.return_value is not None,
            timeout=5,
            what="the agent to end and the app to exit",
        )
    assert app.exit_status == QUIT_STATUS


@pytest.mark.asyncio
async def test_a_script_without_backward_shows_its_exit_status():
    app = GradtuiApp(script("ui/no_backward.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.script_over, what="the script's end")
        await pilot.pause()
        text = detail_text(app)
        assert "never called backward()" in text and "exit status 3" in text
        assert "failed · exit 3" in app.query_one(GradHeader).status_text
        # the footer shows what can be done now: no s c f b e once the script has ended
        from textual.widgets._footer import FooterKey

        await wait_for(
            pilot,
            lambda: (
                {k.action for k in app.query(FooterKey)}
                and not {k.action for k in app.query(FooterKey)} & {"step", "cont", "finish", "toggle_break", "edit"}
            ),
            what="the footer without the keys that drive the script",
        )
        assert {"passes", "help", "quit"} <= {k.action for k in app.query(FooterKey)}
        await pilot.press("s")  # nothing to step: no crash, the words of the end stay
        await pilot.pause()
        assert "exited with status 3" in answer_text(app)
    assert app.exit_status == 3


@pytest.mark.asyncio
async def test_tab_cycles_the_panes_skipping_the_command_bar_and_colon_focuses_it():
    """tab never lands in the command bar, where keys would become text."""
    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        seen = []
        for _ in range(5):
            seen.append(app.focused.id)
            await pilot.press("tab")
        assert seen == ["nodes", "output", "detail", "graph", "nodes"]
        await pilot.press("shift+tab", "shift+tab")  # from the output pane, back past the node list
        assert app.focused.id == "graph"
        await pilot.press("colon")
        assert app.focused.id == "command-input"
        await pilot.press("tab")
        assert app.focused.id == "nodes"
        await pilot.press("colon")
        await pilot.press("escape")
        assert app.focused.id == "nodes"


@pytest.mark.asyncio
async def test_e_replaces_the_gradient_by_an_expression_and_the_palette_runs_actions():
    from textual.command import CommandPalette

    app = GradtuiApp(example("chain.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        await answer_prompt(pilot, "e", "g * 0 + 1")  # the prompt starts empty
        await wait_for(pilot, lambda: 1 in app.state.view.edits, what="the edit")
        await pilot.pause()
        assert "edited: set g * 0 + 1" in detail_text(app) and "values [1]" in detail_text(app)

        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the command palette")
        await type_text(pilot, "continue")
        await wait_for(pilot, lambda: highlighted(app.screen) == "Continue", what="Continue found in the palette")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.state.status == "finished", what="continue from the palette")
        assert app.state.view.leaf_grads[2].values == (3.0,)  # 1 * dy/dx


@pytest.mark.asyncio
async def test_nodes_run_in_continue_show_norms_and_say_what_is_missing():
    """Without --report the UI records only norms between pauses; the detail pane says so,
    and a report run keeps every statistic."""
    for report, expect_light in ((None, True), (Report(), False)):
        app = GradtuiApp(example("mlp.py"), report=report, record_all=True)
        async with app.run_test(size=SIZE) as pilot:
            await wait_paused_at(pilot, 0)
            await pilot.press("c")
            await wait_for(pilot, lambda: app.state.status == "finished", timeout=20, what="the end")
            app.query_one(NodeList).select_node(5)  # AddmmBackward0 of the first layer: [64, 16] in
            await wait_for(pilot, lambda: "AddmmBackward0  ✓ ran 7" in detail_text(app), what="#5 shown")
            incoming = detail_text(app).split("incoming gradient")[1].split("outgoing")[0]
            assert "[64, 16] float32" in incoming and "norm " in incoming
            assert ("recorded when stepping or with --report" in incoming) == expect_light
            assert ("  mean " in incoming) != expect_light
