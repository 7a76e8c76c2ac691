"""SVG snapshots of the app at 120x36 on tiny seeded scripts (pytest-textual-snapshot).

The 80x24 ones are the layout a laptop split or an SSH session gets. Each `run_before` waits (with a timeout) for the state it pictures, then lets rendering
settle. Nothing in the picture depends on the machine: no clock, no absolute path, no
timing. Regenerate with `pytest tests/ui --snapshot-update` and look at every SVG.
"""

from __future__ import annotations

from gradtui.cli.main import demo_path
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.widgets.node_list import NodeList
from tests.helpers import example, footer_of_the_modal, script, settle, wait_for, wait_paused_at

SIZE = (120, 36)


def test_first_pause_on_chain(snap_compare):
    async def run_before(pilot):
        await wait_paused_at(pilot, 0)
        await settle(pilot)

    assert snap_compare(GradtuiApp(example("chain.py")), terminal_size=SIZE, run_before=run_before)


def test_histogram_of_a_hidden_layer_gradient_on_mlp(snap_compare):
    """Step to the first layer's AddmmBackward0: its incoming gradient is [64, 16]."""

    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        for _ in range(12):
            paused = app.state.paused
            grads = app.state.view.grad_outputs.get(paused.node, ())
            if paused.name == "AddmmBackward0" and grads and grads[0].shape == (64, 16):
                break
            await pilot.press("s")
            await wait_for(
                pilot, lambda: app.state.paused is not None and app.state.paused is not paused, what="the next pause"
            )
        assert app.state.paused.name == "AddmmBackward0"
        await wait_paused_at(pilot, app.state.paused.node)
        await settle(pilot)

    assert snap_compare(GradtuiApp(example("mlp.py")), terminal_size=SIZE, run_before=run_before)


def test_nan_stop(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        await pilot.press("colon", *"break", "space", *"nan", "enter")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 1, what="break nan")
        await wait_for(pilot, lambda: app.query_one(NodeList).has_focus)
        await pilot.press("c")
        await wait_for(
            pilot, lambda: app.state.paused is not None and app.state.paused.phase == "after", what="the NaN stop"
        )
        await wait_paused_at(pilot, app.state.paused.node)
        await settle(pilot)

    assert snap_compare(GradtuiApp(example("nan.py")), terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare):
    async def run_before(pilot):
        await wait_paused_at(pilot, 0)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), what="the help screen")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    assert snap_compare(GradtuiApp(example("chain.py")), terminal_size=SIZE, run_before=run_before)


def test_error_in_a_custom_backward(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "failed", what="the failure")
        await wait_for(pilot, lambda: app.query_one(NodeList).selected == app.state.view.failed_node)
        await settle(pilot)

    assert snap_compare(GradtuiApp(script("ui/error_in_backward.py")), terminal_size=SIZE, run_before=run_before)


def test_small_terminal_80x24(snap_compare):
    """Readable at 80x24: the gradient is above the fold and every footer key fits."""

    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        for node in app.state.view.order[1:3]:
            await pilot.press("s")
            await wait_paused_at(pilot, node)
        await settle(pilot)

    assert snap_compare(GradtuiApp(example("mlp.py")), terminal_size=(80, 24), run_before=run_before)


def test_module_view_on_mlp(snap_compare):
    """m on the MLP, three steps in: modules with their node counts and the gradient leaving them."""

    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        await pilot.press("m")
        await wait_for(pilot, lambda: app.query_one(NodeList).by_module, what="the module view")
        for node in app.state.view.order[1:4]:
            await pilot.press("s")
            await wait_paused_at(pilot, node)
        await settle(pilot)

    assert snap_compare(GradtuiApp(example("mlp.py")), terminal_size=SIZE, run_before=run_before)


def test_flow_view_with_vanishing_exploding_and_nan(snap_compare):
    """w after a pass with a saturated first layer, a tiny last layer and a NaN gradient."""

    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the end")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    assert snap_compare(GradtuiApp(script("ui/flow_extremes.py")), terminal_size=SIZE, run_before=run_before)


def test_first_pause_on_lstm_at_80x24(snap_compare):
    """80x24: the labels `h outputs[3]` whole (op names shortened), the header's `0/70 ran`,
    the paused node's source line and incoming gradient above the fold."""

    async def run_before(pilot):
        await wait_paused_at(pilot, 0)
        await settle(pilot)

    assert snap_compare(GradtuiApp(example("lstm.py")), terminal_size=(80, 24), run_before=run_before)


def test_demo_paused_mid_pass_at_80x24(snap_compare):
    """80x24, the demo three steps in: node, labels, source line and incoming gradient
    statistics (norm, mean, min, max, histogram) without scrolling."""

    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        for node in app.state.view.order[1:4]:
            await pilot.press("s")
            await wait_paused_at(pilot, node)
        await settle(pilot)

    assert snap_compare(GradtuiApp(demo_path()), terminal_size=(80, 24), run_before=run_before)


def test_passes_screen_after_a_loop(snap_compare):
    """P after mlp.py ran on: pass 0 recorded, 1 hit by `break pass 1`, 2 unhooked."""

    async def run_before(pilot):
        app = pilot.app
        await wait_for(
            pilot, lambda: app.state.paused is not None and app.state.paused.pass_index == 1, what="the pause in pass 1"
        )
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", what="the end")
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    app = GradtuiApp(example("mlp.py"), commands=["break pass 1", "continue"])
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def _plots_recording(tmp_path) -> str:
    """plots_loop.py recorded with `--record-every 1`: 12 passes, pass 8's gradient not finite."""
    import subprocess
    import sys

    from tests.helpers import REPO

    db = tmp_path / "run.db"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--headless",
            "--record",
            str(db),
            "--record-every",
            "1",
            "-c",
            "continue",
            script("ui/plots_loop.py"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return str(db)


def _replay_app(db: str) -> GradtuiApp:
    from gradtui.record.replay import ReplayTarget

    return GradtuiApp(target=ReplayTarget(db), passes_first=True)  # as `gradtui replay DB` makes it


async def _replay_paused_in_pass_11(pilot) -> None:
    app = pilot.app
    await wait_for(
        pilot,
        lambda: app.state.paused is not None and app.state.paused.pass_index == 11,
        what="the replay's pause in pass 11",
    )
    await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen), what="the passes screen")


def test_replay_passes_view_with_its_plots(snap_compare, tmp_path):
    """`gradtui replay` of plots_loop.py opens on its passes view: loss, gradient norm (pass
    8's is not finite: a red line), non-finite count and per-module norm over passes; the
    cursor on pass 11, where the replay pauses under it."""

    async def run_before(pilot):
        await _replay_paused_in_pass_11(pilot)
        await footer_of_the_modal(pilot)
        await settle(pilot)

    assert snap_compare(_replay_app(_plots_recording(tmp_path)), terminal_size=(120, 40), run_before=run_before)


def test_replay_debugger_after_the_passes_view(snap_compare, tmp_path):
    """Escape from the replay's passes view: the debugger, first drawn now, at its panes'
    widths (its first events were applied before it was ever laid out)."""

    async def run_before(pilot):
        await _replay_paused_in_pass_11(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(pilot.app.screen, PassesScreen), what="the debugger")
        await wait_for(pilot, lambda: pilot.app.query_one(NodeList).selected is not None, what="the selected node")
        await settle(pilot)

    assert snap_compare(_replay_app(_plots_recording(tmp_path)), terminal_size=(120, 40), run_before=run_before)
