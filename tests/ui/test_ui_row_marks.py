"""A node list row's flags (● a breakpoint, ⚠ non-finite) take cells of their own at the row's end:
a marked row keeps its op name whole and its labels in the column of every other row."""

from __future__ import annotations

import pytest
from rich.style import Style

from gradtui.cli.main import demo_path
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import parse_spec
from gradtui.protocol.nodes import node_info
from gradtui.ui.app import GradtuiApp
from gradtui.ui.state import UIState
from gradtui.ui.widgets.node_rows import RowPainter, Widths
from tests.helpers import row_text, settle, started, wait_for, wait_paused_at

MARKED = ("AccumulateGrad", "TanhBackward0")


@pytest.mark.asyncio
async def test_a_breakpoint_mark_takes_its_own_cell_not_the_op_names():
    app = GradtuiApp(demo_path(), commands=[f"break {op}" for op in MARKED])
    async with app.run_test(size=(80, 24)) as pilot:  # the 34-column list, where room is short
        await wait_paused_at(pilot, 0)
        view = app.state.view
        rows = {node: row_text(app, node) for node in view.order}
        names = {node: node_info(view.graph, node).name for node in view.order}
        marked = {node for node, name in names.items() if name in MARKED}
        assert marked and len(marked) < len(rows)
        assert {node for node, row in rows.items() if "●" in row} == marked, rows
        starts = {rows[node].find(f" {names[node]} ") + 1 for node in rows}
        assert starts == {5}, rows  # every op name whole, in one column, marked rows too
        label_columns = set()
        for node, row in rows.items():
            labels = " ".join(node_info(view.graph, node).tags)
            if labels:
                label_columns.add(row.index(labels[:3], 5 + len(names[node])))
        assert len(label_columns) == 1, rows  # the labels start in one column on every row
        for node in marked:
            assert rows[node].rstrip().endswith(" ●"), rows[node]


def test_snapshot_marked_rows_at_80x24(snap_compare):
    """The picture of it: the demo's first pause at 80x24 with its accumulators and its tanh marked."""

    async def run_before(pilot):
        await wait_paused_at(pilot, 0)
        await wait_for(pilot, lambda: len(pilot.app.state.breakpoints) == len(MARKED), what="the breakpoints")
        await settle(pilot)

    app = GradtuiApp(demo_path(), commands=[f"break {op}" for op in MARKED])
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_a_mark_is_drawn_beside_the_difference_column_and_the_names_keep_one_width():
    """Against a reference the rows end with the difference (`-` until it is known): a marked
    row's ● comes after it, a blank between, at every width (it was dropped), and its op name
    is as wide as an unmarked row's."""
    state = UIState("train.py")
    state.apply(started(0))
    state.apply(ev.BreakpointsChanged((ev.BreakpointInfo(1, parse_spec("AccumulateGrad")),)))
    view = state.view
    view.reference = "ref.db"
    painter = RowPainter(lambda name: Style())
    painter.widths = Widths.of(view)
    for width in (30, 34, 40, 60):
        rows = {
            node: "".join(s.text for s in painter.node_row(view, node, width, Style(), None, state.breakpoints))
            for node in view.order
        }
        for node, row in rows.items():
            assert len(row) <= width, (width, row)
            assert row.rstrip().endswith("- ●" if node_info(view.graph, node).name == "AccumulateGrad" else "-"), (
                width,
                row,
            )
        whole = set()
        for node, row in rows.items():
            name, shown = node_info(view.graph, node).name, row[4:].split()[0]
            whole.add(shown == name or (shown.endswith("…") and name.startswith(shown[:-1])))
        assert len(whole) == 1, (width, rows)  # every op name whole, or every one short: marks change nothing
