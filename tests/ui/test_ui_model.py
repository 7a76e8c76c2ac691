"""The UI's plain-Python parts, without Textual running: state model, bridge, text helpers."""

from __future__ import annotations

import io
import os
import threading
import time

import torch

from gradtui.core import events as ev
from gradtui.core.runner import ScriptRunner
from gradtui.core.session import Session
from gradtui.core.summary import summarize
from gradtui.headless import HeadlessDriver
from gradtui.ui import fmt
from gradtui.ui.bridge import Bridge
from gradtui.ui.state import UIState
from ui_helpers import example, ui_script


def events_of(path: str, commands: list[str]) -> list[ev.Event]:
    """Every event of a headless run of `path` answering the pauses with `commands`."""
    session = Session()
    events: list[ev.Event] = []
    session.add_listener(events.append)
    session.add_listener(HeadlessDriver(session, commands, io.StringIO()))
    thread = ScriptRunner(path, [], session).start()
    thread.join(60)
    assert not thread.is_alive(), "the script did not end"
    return events


def fold(events: list[ev.Event]) -> UIState:
    state = UIState("x.py")
    for event in events:
        state.apply(event)
    return state


def test_state_follows_a_stepped_chain():
    events = events_of(example("chain.py"), ["step", "scale 0.5", "step"])
    state = UIState("chain.py")
    seen = []
    for event in events:
        change = state.apply(event)
        if isinstance(event, ev.Paused):
            assert change.paused and state.current == event.node and event.node in change.rows
            seen.append(state.status_text())
    assert seen == ["paused at #0 PowBackward0 (z)", "paused at #1 MulBackward0 (y)",
                    "paused at #2 AccumulateGrad (x)"]
    view = state.view
    assert view.order == [0, 1, 2] and view.row == {0: 0, 1: 1, 2: 2}
    assert view.ran == {0: 1, 1: 2, 2: 3}
    assert view.incoming[1][0].values == (6.0,)  # 12 scaled by 0.5
    assert view.edits[1][0][0] == "scale 0.5" and view.edits[1][0][1][0].values == (12.0,)
    assert 1 not in view.incoming_hist  # the histogram was of the gradient before the edit
    assert view.outgoing[1][0].values == (18.0,)
    assert view.leaf_grads[2].values == (18.0,)
    assert state.status == "finished" and state.exit_status == 0 and state.current is None
    assert state.status_text() == "finished · exit 0"


def test_state_marks_nonfinite_and_failures():
    state = fold(events_of(example("nan.py"), ["break nan", "continue"]))
    view = state.view
    sqrt = next(n for n in view.graph if view.graph.nodes[n]["name"] == "SqrtBackward0")
    assert sqrt in view.nonfinite and view.outgoing_hist[sqrt][0].histogram is not None

    state = fold(events_of(ui_script("error_in_backward.py"), ["continue"]))
    view = state.view
    assert view.error == "ValueError: this backward explodes on purpose"
    assert view.graph.nodes[view.failed_node]["kind"] == "custom"
    assert state.status == "failed" and state.exit_status == 1 and "Traceback" in state.traceback


def test_find_wraps_and_matches_ops_labels_and_ids():
    state = fold(events_of(example("mlp.py"), ["continue"]))
    view = state.view
    rows = [r for r in range(len(view.order)) if view.graph.nodes[view.order[r]]["name"] == "AccumulateGrad"]
    first = view.find("accumulate", -1)
    assert first == rows[0]
    assert view.find("accumulate", first) == rows[1]
    assert view.find("accumulate", rows[-1]) == rows[0]  # wraps
    assert view.order[view.find("2.weight", 0)] in view.leaf_grads
    assert view.order[view.find("#3", 0)] == 3
    assert view.find("nothing-like-this", 0) is None


def _ran(i: int) -> ev.NodeRan:
    return ev.NodeRan(0, i, i + 1, (), ())


def test_bridge_batches_node_ran_and_keeps_order():
    posted = []
    bridge = Bridge(posted.append, interval=0.05)
    started = time.monotonic()
    for i in range(10_000):
        bridge(_ran(i))
    bridge(ev.Paused(0, 10_000, "X", "before", "step", (), 10_000, 10_001))
    elapsed = time.monotonic() - started
    batches = [m for m in posted if isinstance(m, Bridge.NodesRan)]
    assert len(batches) <= 2 + elapsed / 0.05  # one per interval, not one per node
    assert [e.node for m in batches for e in m.events] == list(range(10_000))
    assert isinstance(posted[-1], Bridge.EngineEvent) and isinstance(posted[-1].event, ev.Paused)


def test_bridge_flushes_before_every_other_event_and_survives_a_closed_loop():
    posted = []
    bridge = Bridge(posted.append, interval=3600)
    bridge(_ran(0))  # first one is due at once (nothing posted yet for an hour)
    bridge(_ran(1))
    bridge(_ran(2))
    bridge(ev.PassFinished(0, 3, 3))
    kinds = [type(m).__name__ for m in posted]
    assert kinds == ["NodesRan", "NodesRan", "EngineEvent"]
    assert [e.node for e in posted[1].events] == [1, 2]

    def closed(message):
        raise RuntimeError("Event loop is closed")

    Bridge(closed)(ev.Output("stdout", "late\n"))  # no exception


def test_bridge_batches_output_with_node_ran_in_order():
    posted = []
    bridge = Bridge(posted.append, interval=3600)
    bridge(ev.Output("stdout", "first\n"))  # due at once
    for i in range(1000):
        bridge(ev.Output("stdout", f"line {i}\n"))
    bridge(_ran(0))
    bridge(ev.Output("stderr", "after\n"))
    assert [type(m).__name__ for m in posted] == ["Printed"]
    bridge.flush()  # the app's timer
    assert [type(m).__name__ for m in posted] == ["Printed", "Printed", "NodesRan", "Printed"]
    assert len(posted[1].events) == 1000 and posted[3].events == [ev.Output("stderr", "after\n")]
    bridge.flush()
    assert len(posted) == 4  # nothing pending, nothing posted


def test_sparkline_and_values_never_flood():
    assert fmt.sparkline((0, 1, 2, 4, 8)) == " ▁▂▄█"
    assert fmt.sparkline((0, 0)) == "  "
    big = summarize(torch.arange(1_000_000, dtype=torch.float32), histogram=True)
    text = fmt.values_text(big)
    assert text.count(",") <= fmt.PREVIEW_LIMIT and "999992 more" in text
    assert len(fmt.sparkline(big.histogram)) == len(big.histogram)
    assert fmt.values_text(summarize(torch.tensor([1.0, float("nan")]))) == "[1, nan]"


def test_user_traceback_folds_library_frames_and_shortens_paths():
    home = os.path.dirname(ui_script("error_in_backward.py"))
    torch_file = torch.autograd.__file__
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{home}/error_in_backward.py", line 22, in <module>\n'
        "    loss.backward()\n"
        f'  File "{fmt._GRADTUI_DIR}/core/session.py", line 135, in tensor_backward\n'
        "    return self._run_pass(\n"
        "           ^^^^^^^^^^^^^^^\n"
        f'  File "{torch_file}", line 395, in backward\n'
        "    _engine_run_backward(\n"
        f'  File "{home}/error_in_backward.py", line 15, in backward\n'
        '    raise ValueError("boom")\n'
        "ValueError: boom\n"
    )
    assert fmt.user_traceback(text, home) == (
        "Traceback (most recent call last):\n"
        '  File "error_in_backward.py", line 22, in <module>\n'
        "    loss.backward()\n"
        "  … 2 frames in gradtui, torch\n"
        '  File "error_in_backward.py", line 15, in backward\n'
        '    raise ValueError("boom")\n'
        "ValueError: boom\n"
    )


def test_script_host_waits_once_for_a_script_stuck_in_a_c_call(tmp_path):
    """`q` stops the script (waiting up to a second), then the app's unmount stops it again:
    that second wait doubled the time to leave while the script sat in time.sleep."""
    import asyncio

    from gradtui.ui.script import ScriptHost

    path = tmp_path / "naps.py"
    path.write_text("import time\nprint('napping', flush=True)\ntime.sleep(2)\n", encoding="utf-8")
    napping = threading.Event()
    session = Session(lambda e: isinstance(e, ev.Output) and napping.set(), provenance=False)
    runner = ScriptRunner(str(path), [], session)
    thread = runner.start()
    host = ScriptHost(runner)
    assert napping.wait(10)
    assert asyncio.run(host.stop(0.5)) is False
    assert asyncio.run(asyncio.wait_for(host.stop(0.5), 10)) is False  # a second stop neither hangs nor raises
    thread.join(10)
    assert host.done.is_set()
    assert asyncio.run(host.stop(0.5)) is True
