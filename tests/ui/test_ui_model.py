"""The UI's plain-Python parts, without Textual running: state model, text helpers."""

from __future__ import annotations

import io
import os

import torch

from gradtui.clients.headless import HeadlessDriver
from gradtui.engine.process.runner import ScriptRunner
from gradtui.engine.session import Session
from gradtui.engine.stats.summary import summarize
from gradtui.protocol import events as ev
from gradtui.ui import fmt
from gradtui.ui.state import UIState
from tests.helpers import example, script


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
    assert seen == ["paused at #0 PowBackward0 (z)", "paused at #1 MulBackward0 (y)", "paused at #2 AccumulateGrad (x)"]
    view = state.view
    assert view.order == [0, 1, 2] and view.row == {0: 0, 1: 1, 2: 2}
    assert view.ran == {0: 1, 1: 2, 2: 3}
    assert view.grad_outputs[1][0].values == (6.0,)  # 12 scaled by 0.5
    assert view.edits[1][0][0] == "scale 0.5" and view.edits[1][0][1][0].values == (12.0,)
    assert view.grad_outputs_hist[1][0].values == (6.0,)  # the edit sent the edited gradient's own histogram
    assert view.grad_inputs[1][0].values == (18.0,)
    assert view.leaf_grads[2].values == (18.0,)
    assert state.status == "finished" and state.exit_status == 0 and state.current is None
    assert state.status_text() == "finished · exit 0"


def test_state_marks_nonfinite_and_failures():
    state = fold(events_of(example("nan.py"), ["break nan", "continue"]))
    view = state.view
    sqrt = next(n for n in view.graph if view.graph.nodes[n]["info"].name == "SqrtBackward0")
    assert sqrt in view.nonfinite and view.grad_inputs_hist[sqrt][0].histogram is not None

    state = fold(events_of(script("ui/error_in_backward.py"), ["continue"]))
    view = state.view
    assert view.error == "ValueError: this backward explodes on purpose"
    assert view.graph.nodes[view.failed_node]["info"].kind == "custom"
    assert state.status == "failed" and state.exit_status == 1 and "Traceback" in state.traceback


def test_find_wraps_and_matches_ops_labels_and_ids():
    state = fold(events_of(example("mlp.py"), ["continue"]))
    view = state.view
    rows = [r for r in range(len(view.order)) if view.graph.nodes[view.order[r]]["info"].name == "AccumulateGrad"]
    first = view.find("accumulate", -1)
    assert first == rows[0]
    assert view.find("accumulate", first) == rows[1]
    assert view.find("accumulate", rows[-1]) == rows[0]  # wraps
    assert view.order[view.find("2.weight", 0)] in view.leaf_grads
    assert view.order[view.find("#3", 0)] == 3
    assert view.find("nothing-like-this", 0) is None


def _ran(i: int) -> ev.NodeRan:
    return ev.NodeRan(0, i, i + 1, (), ())


def test_sparkline_and_values_never_flood():
    assert fmt.sparkline((0, 1, 2, 4, 8)) == " ▁▂▄█"
    assert fmt.sparkline((0, 0)) == "  "
    big = summarize(torch.arange(1_000_000, dtype=torch.float32), histogram=True)
    text = fmt.values_text(big)
    assert text.count(",") <= fmt.PREVIEW_LIMIT and "999992 more" in text
    assert len(fmt.sparkline(big.histogram)) == len(big.histogram)
    assert fmt.values_text(summarize(torch.tensor([1.0, float("nan")]))) == "[1, nan]"


def test_user_traceback_folds_library_frames_and_shortens_paths():
    home = os.path.dirname(script("ui/error_in_backward.py"))
    torch_file = torch.autograd.__file__
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{home}/error_in_backward.py", line 22, in <module>\n'
        "    loss.backward()\n"
        f'  File "{fmt._GRADTUI_DIR}/engine/session.py", line 135, in tensor_backward\n'
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


def test_brackets_walk_a_recordings_passes_by_index_after_pass_N_showed_an_earlier_one():
    """The tmux walk (replay of a 3-pass run): `pass 0` from the passes view made pass 0 the
    last view kept, so `[` on pass 0 went to pass 2, and `]` from pass 2 came back to 0."""
    from tests.helpers import finished, started

    state = UIState("x.db")
    for index in range(3):
        state.apply(started(index, recorded=index == 0))
        state.apply(finished(index))
    state.apply(started(0))  # a recording's `pass 0`: told again, it replaces its view
    assert sorted(v.index for v in state.views) == [0, 1, 2]
    assert state.view.index == 0 and state.browse(-1) is None  # nothing older than pass 0
    assert state.browse(1) is not None and state.view.index == 1
    assert state.browse(1) is not None and state.view.index == 2
    assert state.browse(-1) is not None and state.view.index == 1
