"""The source view, v: the node's whole file, its line
marked, every line that made nodes of the pass marked with their count; enter on such a line
selects its nodes in turn; b on a line sets `break FILE:LINE`."""

from __future__ import annotations

import pytest
from textual.widgets import OptionList, Static

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.screens.source import SourceScreen
from tests.helpers import SIZE, highlighted, script, selected, wait_for, wait_paused_at


async def _open(pilot) -> OptionList:
    await pilot.press("v")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SourceScreen), what="the source view")
    await pilot.pause()
    return pilot.app.screen.query_one(OptionList)


def _row(lines: OptionList, number: int) -> str:
    return str(lines.get_option_at_index(number - 1).prompt)


@pytest.mark.asyncio
async def test_the_source_view_marks_the_lines_that_made_nodes_and_enter_cycles_through_them():
    app = GradtuiApp(script("train_loop.py"), args=["1"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        view = app.state.view
        path = view.graph.nodes[0]["info"].path
        made: dict[int, list[int]] = {}
        for node in view.order:  # the oracle: the pass's own graph
            if view.graph.nodes[node]["info"].path == path:
                made.setdefault(view.graph.nodes[node]["info"].line, []).append(node)
        line, nodes = max(made.items(), key=lambda item: len(item[1]))
        assert len(nodes) >= 3, made  # ((model(batch) - y) ** 2).mean(): mean, pow, sub at least
        await pilot.press("home")
        app.query_one("#nodes").select_node(nodes[0])
        await wait_for(pilot, lambda: selected(app) == nodes[0], what="the line's first node")

        lines = await _open(pilot)
        text = open(path).read().splitlines()
        assert lines.option_count == len(text)
        assert lines.highlighted == line - 1
        assert _row(lines, line).startswith("▶") and f"{len(nodes)}×" in _row(lines, line)
        assert text[line - 1].strip() in _row(lines, line)
        for other, its in made.items():
            if other != line:
                assert f"{len(its)}×" in _row(lines, other) and not _row(lines, other).startswith("▶")
        unmarked = next(n for n in range(1, len(text) + 1) if n not in made)
        assert "×" not in _row(lines, unmarked)
        note = str(app.screen.query_one("#source-note", Static).visual)
        assert f"line {line} made {len(nodes)}" in note and f"#{nodes[1]}" in note
        assert f"#{nodes[0]} #{nodes[0]}" not in note  # each node named once (the walk saw `#0 #0 MeanBackward0`)

        await pilot.press("enter")  # the next node of that line
        await wait_for(pilot, lambda: selected(app) == nodes[1], what="the line's second node")
        for expected in (*nodes[2:], nodes[0]):  # v, enter again: on through them, round to the first
            await _open(pilot)
            await pilot.press("enter")
            await wait_for(pilot, lambda: selected(app) == expected, what=f"#{expected}")

        lines = await _open(pilot)  # enter on a line that made nothing: the view stays, says so
        lines.highlighted = unmarked - 1
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SourceScreen)
        assert "made no node" in str(app.screen.query_one("#source-note", Static).visual)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SourceScreen), what="the view closed")
        assert selected(app) == nodes[0]
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end")


@pytest.mark.asyncio
async def test_b_in_the_source_view_breaks_at_the_cursors_line_and_the_next_pass_stops_there():
    app = GradtuiApp(script("loop.py"))  # y = x * 3 (line 11), z = y ** 2 (line 12), three passes
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        view = app.state.view
        pow_node = next(n for n in view.order if view.graph.nodes[n]["info"].line == 12)
        await pilot.press("question_mark")  # the help screen has it
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        keys = [str(s.visual) for s in app.screen.query(".help-key")]
        texts = [str(s.visual) for s in app.screen.query(".help-text")]
        assert texts[keys.index("v")].startswith("source view: the node's whole file")
        await pilot.press("escape")
        await pilot.press("ctrl+p", *"source view")  # so has the palette: enter there opens it
        await wait_for(pilot, lambda: (highlighted(app.screen) or "") == "Source view", what="the palette's entry")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SourceScreen), what="the view from the palette")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SourceScreen), what="the view closed")
        lines = await _open(pilot)
        counts = {n: sum(view.graph.nodes[o]["info"].line == n for o in view.order) for n in (11, 12)}
        assert counts[11] >= 1 and counts[12] >= 1
        assert _row(lines, 12).startswith("▶") and f"{counts[12]}×" in _row(lines, 12)  # the paused node's line
        assert _row(lines, 11).startswith(" ") and f"{counts[11]}×" in _row(lines, 11)  # MulBackward0's, unselected
        lines.highlighted = 12 - 1
        await pilot.pause()
        await pilot.press("b")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 1, what="the breakpoint")
        path = script("loop.py")  # its whole path; its name where the path has a space (a spec is one word)
        assert app.state.breakpoints[0].spec.text == f"{path if ' ' not in path else 'loop.py'}:12"
        assert isinstance(app.screen, SourceScreen) and _row(lines, 12)[1] == "●"
        await pilot.press("b")  # again: it is there already, no second one
        await pilot.pause()
        assert "already" in str(app.screen.query_one("#source-note", Static).visual)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SourceScreen), what="the view closed")
        for index in (1, 2):  # pass 0 is paused at line 12's node already: the hits are the next passes'
            await pilot.press("c")
            await wait_for(
                pilot,
                lambda: (
                    app.state.paused is not None
                    and app.state.paused.pass_index == index
                    and app.state.paused.node == pow_node
                ),
                what=f"the hit at line 12 in pass {index}",
            )
        assert app.state.breakpoints[0].hits == 2
        lines = await _open(pilot)  # opened again: the breakpoint is marked from the target's list
        assert _row(lines, 12)[1] == "●" and _row(lines, 11)[1] == " "
        await pilot.press("escape")
        await pilot.press("colon", *"delete 1", "enter")
        await wait_for(pilot, lambda: not app.state.breakpoints, what="the delete")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end")
        await _open(pilot)  # ended: b has nothing to stop, and says so
        await pilot.press("b")
        await pilot.pause()
        assert "has ended" in str(app.screen.query_one("#source-note", Static).visual) and not app.state.breakpoints
