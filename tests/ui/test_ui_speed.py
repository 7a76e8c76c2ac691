"""The work of a step with a 10,002-node pass loaded: the node list renders only the rows
that changed (and a screenful when the cursor leaves the screen), never the whole pass.

The time from the `s` key to the next node drawn (target: <= 50 ms median, docs/performance.md) is measured
by `benchmarks/bench.py`, not asserted here: these machines are too noisy for timing bounds.
"""

from __future__ import annotations

import pytest

from gradtui.ui.app import GradtuiApp
from gradtui.ui.widgets.body import Body
from gradtui.ui.widgets.node_list import NodeList
from tests.helpers import script, wait_for, wait_paused_at

STEPS = 30


class CountingNodeList(NodeList):
    """Counts the rows it renders."""

    rendered = 0

    def render_line(self, y: int):
        CountingNodeList.rendered += 1
        return super().render_line(y)


class CountingBody(Body):
    """Counts the updates of the detail and graph panes' text, and the layouts they ask for."""

    updates = 0
    layouts = 0

    def update(self, content="", *, layout: bool = True) -> None:
        CountingBody.updates += 1
        CountingBody.layouts += layout
        super().update(content, layout=layout)


@pytest.mark.asyncio
async def test_a_step_renders_only_changed_rows_of_a_10000_node_pass(monkeypatch):
    """A step redraws the node list's changed rows only; the detail and graph panes once or
    twice (running, then the next pause), not once per event, and with no layout of the
    screen: their text is as high from one node of the chain to the next (a layout of the
    whole screen took ~70 ms here, more than a step's budget)."""
    monkeypatch.setattr("gradtui.ui.app.NodeList", CountingNodeList)
    monkeypatch.setattr("gradtui.ui.widgets.detail.Body", CountingBody)
    monkeypatch.setattr("gradtui.ui.widgets.graph_view.Body", CountingBody)
    app = GradtuiApp(script("ui/long_chain.py"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0, timeout=60)
        assert app.state.view.total == 10_002
        await pilot.press("s")  # the first step: the panes settle to a node in the middle of the chain
        await wait_paused_at(pilot, 1, timeout=10)
        await pilot.pause(0.2)
        CountingNodeList.rendered = CountingBody.updates = CountingBody.layouts = 0
        for step in range(2, STEPS + 2):
            await pilot.press("s")
            await wait_paused_at(pilot, step, timeout=10)
            await pilot.pause()
        rows = app.query_one(NodeList).size.height
        # two rows per step, plus a screenful each time the cursor leaves the screen
        assert CountingNodeList.rendered <= STEPS * 2 + rows * (1 + 2 * STEPS // rows), (
            "a step redrew more than the rows that changed"
        )
        assert CountingBody.updates <= 2 * 2 * STEPS, "a pane was redrawn more than twice a step"
        assert CountingBody.layouts == 0, "a step laid the screen out again"

        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", timeout=60, what="the end")
        await pilot.press("end")
        await wait_for(pilot, lambda: app.query_one(NodeList).cursor == 10_001)


class CountingTreeList(NodeList):
    """Counts the rows it renders, and the module rows among them."""

    rendered = 0

    def render_line(self, y: int):
        CountingTreeList.rendered += 1
        return super().render_line(y)


@pytest.mark.asyncio
async def test_the_module_view_of_a_3000_node_encoder_is_a_few_dozen_rows_drawn_lazily(monkeypatch):
    monkeypatch.setattr("gradtui.ui.app.NodeList", CountingTreeList)
    app = GradtuiApp(script("ui/encoder.py"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0, timeout=60)
        nodes = app.query_one(NodeList)
        assert app.state.view.total >= 2500
        await pilot.press("home")
        await pilot.press("m")
        await wait_for(pilot, lambda: nodes.by_module, what="the module view")
        await pilot.pause(0.2)
        tree = nodes.tree
        assert nodes.row_count <= 60, [r.module for r in tree.rows]
        assert tree.top[0] != "layers" and "layers" in tree.modules and "layers.47" in tree.modules  # under the root
        assert tree.stats("layers").count >= 2400

        CountingTreeList.rendered = 0
        for _ in range(10):
            await pilot.press("end", "home")
        await pilot.pause()
        for path in list(tree.modules):
            tree.set_expanded(path, True)  # everything open: about a row per node, still drawn lazily
        nodes._resize()
        nodes.refresh()
        await pilot.press("end")
        await wait_for(pilot, lambda: nodes.cursor == nodes.row_count - 1)
        await pilot.pause()
        assert nodes.row_count > app.state.view.total
        # a screenful per jump, never the whole tree
        assert CountingTreeList.rendered <= 25 * nodes.size.height

        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", timeout=60, what="the end")
