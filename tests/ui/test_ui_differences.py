"""The UI's difference view against a reference recording: a difference
column in the node list and the module tree, `A` sorting the list by it, and a `differs`
column in the passes view; the data reaches the UI as one PassDifferences event per pass.
tests/fixtures/diff_model.py is recorded once as the reference; the UI runs its `tanh` variant
(one gelu changed) against it; the snapshots, at 80x24 and 160x45, run its `backward` variant (regenerate with
`--snapshot-update` and look at every SVG)."""

from __future__ import annotations

import os

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.options import RunOptions
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.state import UIState
from gradtui.ui.widgets.node_list import NodeList
from gradtui.wire.child import ChildTarget
from tests.helpers import footer_of_the_modal, row_text, script, settle, started, wait_for, wait_paused_at
from tests.processes import record_with_fingerprints

pytestmark = pytest.mark.timeout(240)

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
SNAPSHOT_VARIANT = "backward"
"""The snapshots' run: its custom backward sends 3g for 2g, so a node's difference is exactly none
before it and a clean ratio after it. The `tanh` variant's differences sit within 5e-8 of where
two digits round (fc2's 2.84951e-04 here, 2.85e-04 or more on an AVX-512 host): its picture would
hang on which CPU kernels the host's torch picks."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """diff_model.py recorded with fingerprints, every pass per node."""
    return record_with_fingerprints(str(tmp_path_factory.mktemp("uidiff") / "ref.db"), script("diff_model.py"))


def _app(reference: str, variant: str = "tanh") -> GradtuiApp:
    """The UI on one of diff_model.py's variants against `reference`."""
    options = RunOptions(os.path.abspath(script("diff_model.py")), [variant], against=reference)
    return GradtuiApp(script("diff_model.py"), target=ChildTarget(options))


async def _pass_0_compared(pilot) -> None:
    """Finish pass 0 (its differences come at its end), then browse back to it."""
    app = pilot.app
    await wait_paused_at(pilot, 0)
    await pilot.press("f")
    await wait_for(
        pilot,
        lambda: app.state.paused is not None and app.state.paused.pass_index == 1,
        what="the first pause of pass 1",
    )
    await pilot.press("left_square_bracket")
    await wait_for(pilot, lambda: app.state.view.index == 0 and app.state.view.differences, what="pass 0's differences")


def test_differences_are_a_column_a_sort_and_a_passes_column(reference):
    """Pass 0 against the reference: each matched row shows its difference, `A` puts the
    largest first (the changed gelu's neighbourhood, over 1e-4) and the unmatched/unknown
    last, again restores engine order; the module tree shows each module's largest; the
    passes view's `differs` is the pass's largest."""
    import asyncio

    async def run() -> None:
        app = _app(reference)
        async with app.run_test(size=(160, 45)) as pilot:
            await _pass_0_compared(pilot)
            view = app.state.view
            nodes = app.query_one(NodeList)
            largest = max(view.difference(n) or 0.0 for n in view.order)
            assert largest > 1e-4 and view.largest_difference == largest
            top = max(view.order, key=lambda n: view.difference(n) or 0.0)
            assert f"{largest:.1e}" in row_text(app, top)
            await pilot.press("A")
            await wait_for(pilot, lambda: nodes.by_difference, what="sorted by difference")
            ranked = [view.difference(nodes.node_at(r)) for r in range(nodes.row_count)]
            known = [d for d in ranked if d is not None]
            assert ranked[0] == largest and known == sorted(known, reverse=True)
            assert ranked[len(known) :] == [None] * (len(ranked) - len(known))
            assert "by difference" in str(nodes.border_title)
            await pilot.press("A")
            await wait_for(pilot, lambda: not nodes.by_difference, what="engine order again")
            assert [nodes.node_at(r) for r in range(nodes.row_count)] == view.order
            await pilot.press("m")
            await wait_for(pilot, lambda: nodes.tree is not None, what="the module tree")
            tree = nodes.tree
            for path in ("fc1", "fc2", "out"):
                own = [view.difference(n) for n, p in tree.member.items() if p == path]
                assert tree.difference(path) == max(d for d in own if d is not None), path
            assert tree.difference("fc2") > 1e-4
            await pilot.press("P")
            await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes view")
            table = app.screen.query_one("#passes-table")
            labels = [str(c.label) for c in table.columns.values()]
            assert "differs" in labels
            first = table.get_row_at(0)
            assert str(first[labels.index("differs")]) == f"{largest:.1e}"
            await pilot.press("q")
            await pilot.press("q")

    asyncio.run(run())


def test_the_state_keeps_the_difference_column_for_the_next_pass():
    """Model: a PassDifferences fills the pass's differences and its summary; the next pass's
    view keeps the column (its rows `-` until its own differences come)."""
    state = UIState("train.py")
    state.apply(started(0))
    changes = state.apply(
        ev.PassDifferences(0, "ref.db", (ev.NodeDifference(1, 0.5, 0.25), ev.NodeDifference(3, None, 0.0)), 0.5)
    )
    view = state.view
    assert view.difference(1) == 0.5 and view.difference(3) == 0.0 and view.difference(2) is None
    assert changes.rows == {1, 3} and state.summaries[-1].difference == 0.5 and state.summaries[-1].against
    state.apply(started(1))
    assert state.view.reference == "ref.db" and state.view.difference(1) is None


@SIZES
def test_snapshot_sorted_by_difference(snap_compare, reference, size):
    async def run_before(pilot):
        await _pass_0_compared(pilot)
        await pilot.press("A")
        await wait_for(pilot, lambda: pilot.app.query_one(NodeList).by_difference, what="sorted by difference")
        await settle(pilot)

    assert snap_compare(_app(reference, SNAPSHOT_VARIANT), terminal_size=size, run_before=run_before)


@SIZES
def test_snapshot_passes_view_with_differences(snap_compare, reference, size):
    async def run_before(pilot):
        await _pass_0_compared(pilot)
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, PassesScreen), what="the passes view")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    assert snap_compare(_app(reference, SNAPSHOT_VARIANT), terminal_size=size, run_before=run_before)
