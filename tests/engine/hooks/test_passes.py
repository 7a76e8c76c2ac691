"""Many passes. Passes that nothing can stop in run unhooked at plain speed (headless
without a report), `break pass N` and loss breakpoints stop where they say, every pass ends with
its gradient flow, nested and threaded backward calls are announced, never deadlock."""

from __future__ import annotations

import math

import pytest
import torch

from gradtui.protocol import events as ev
from tests.helpers import assert_grads_identical, run_headless, run_plain, script

pytestmark = pytest.mark.timeout(120)


def test_break_pass_400_of_500_with_the_earlier_passes_unhooked(tmp_path):
    plain, debugged = tmp_path / "plain.pt", tmp_path / "debugged.pt"
    run_plain(script("train_loop.py"), ["500", str(plain)])
    run = run_headless(
        script("train_loop.py"),
        ["break pass 400", "continue", "continue"],
        ["500", str(debugged)],
        hook_all_passes=False,
    )
    assert run.status == 0, run.output
    assert run.where == [(0, 0), (400, 0)]
    started = run.of(ev.PassStarted)
    assert len(started) == 500
    assert [s.pass_index for s in started if s.recorded] == [0, 400]
    assert all(s.graph.number_of_nodes() == 0 for s in started if not s.recorded)
    assert not [e for e in run.of(ev.NodeRan) if e.pass_index not in (0, 400)]
    assert "passes 1-399 ran unhooked at plain speed" in run.output
    assert "passes 401-499 ran unhooked at plain speed" in run.output
    assert_grads_identical(torch.load(plain), torch.load(debugged))


def test_every_pass_reports_its_loss_and_gradient_flow(tmp_path):
    path = tmp_path / "g.pt"
    run = run_headless(script("train_loop.py"), ["continue"], ["3", str(path)], hook_all_passes=False)
    grads = torch.load(path)
    started, finished = run.of(ev.PassStarted), run.of(ev.PassFinished)
    assert [s.recorded for s in started] == [True, False, False]
    assert all(len(s.losses) == 1 and s.losses[0] > 0 for s in started)
    assert run.output.splitlines()[-3:-1] == [
        "passes 1-2 ran unhooked at plain speed: nothing could stop in them",
        f"final loss {started[-1].losses[0]:.6f}",
    ]
    for done in finished:
        assert sorted(r.name for r in done.flow) == sorted(grads)
    last = {r.name: r for r in finished[-1].flow}
    for name, grad in grads.items():  # the flow of the last pass is that of the saved .grad
        assert last[name].grad_norm == pytest.approx(grad.norm().item(), rel=1e-6)
        assert last[name].shape == tuple(grad.shape) and last[name].nonfinite == 0
    ratios = [r.ratio for r in finished[-1].flow]
    assert ratios == sorted(ratios)
    assert [r.node is not None for r in finished[0].flow] == [True] * 4  # recorded: node ids known
    assert [r.node for r in finished[1].flow] == [None] * 4


def test_loss_breakpoints_stop_at_the_first_node_of_the_pass():
    run = run_headless(
        script("train_loop.py"),
        ["break loss nan", "continue", "print", "continue"],
        ["10", "", "nan"],
        hook_all_passes=False,
    )
    assert run.where == [(0, 0), (7, 0), (8, 0)]  # the NaN loss made every weight NaN
    assert run.pauses[1].reason.startswith("breakpoint 1: loss nan (loss nan")
    assert run.of(ev.PassStarted)[7].recorded and math.isnan(run.of(ev.PassStarted)[7].losses[0])
    losses = [s.losses[0] for s in run_headless(script("train_loop.py"), ["continue"], ["10"]).of(ev.PassStarted)]
    assert losses == sorted(losses, reverse=True)  # training: the loss falls
    limit = (losses[2] + losses[3]) / 2
    run = run_headless(
        script("train_loop.py"),
        [f"break loss>{limit}", "continue", "continue", "continue"],
        ["10"],
        hook_all_passes=False,
    )
    assert run.where == [(0, 0), (1, 0), (2, 0)]
    assert run.pauses[1].reason == f"breakpoint 1: loss>{limit} (loss {losses[1]:.6g})"
    assert [s.recorded for s in run.of(ev.PassStarted)][:4] == [True, True, True, False]


def test_a_nan_in_the_flow_sorts_last_and_counts_its_elements():
    run = run_headless(script("train_loop.py"), ["continue"], ["8", "", "nan"], hook_all_passes=False)
    flow = run.of(ev.PassFinished)[7].flow
    assert flow[-1].nonfinite > 0 and not math.isfinite(flow[-1].grad_norm)
    assert run.of(ev.PassFinished)[6].flow[-1].nonfinite == 0


def test_flow_command_and_report_fields(tmp_path):
    run = run_headless(script("train_loop.py"), ["flow", "break pass 1", "continue", "flow", "continue"], ["2"])
    results = [r.text for r in run.results()]
    assert results[0] == "no gradient flow yet: no backward pass has finished"
    table = results[2].splitlines()
    assert table.pop(0) == "gradient flow after pass 0:"
    assert table[0].split() == ["param", "grad", "norm", "weight", "norm", "ratio", "nonfinite"]
    assert sorted(line.split()[0] for line in table[1:]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    report = run.report.to_json()["passes"]
    assert [p["recorded"] for p in report] == [True, True]  # hook_all_passes by default
    assert report[0]["losses"] == [run.of(ev.PassStarted)[0].losses[0]]
    assert {r["name"] for r in report[1]["flow"]} == {"0.bias", "0.weight", "2.bias", "2.weight"}
    assert all(isinstance(r["grad_norm"], float) and r["node"] is not None for r in report[1]["flow"])


@pytest.mark.parametrize("mode", ["reentrant", "non-reentrant"])
def test_checkpoint_recomputation_is_a_nested_pass_or_none(tmp_path, mode):
    run = run_headless(script("cov_checkpoint.py"), ["step", "continue"], [str(tmp_path / "g.pt"), mode])
    assert run.status == 0, run.output
    nested = run.of(ev.NestedPass)
    if mode == "reentrant":
        assert len(nested) == 1 and nested[0].pass_index == 0 and nested[0].call == "backward"
        assert "nested backward() at cov_checkpoint.py" in run.output
    else:
        assert nested == []


def test_backward_in_a_users_hook_is_announced_and_runs():
    run = run_headless(script("cov_nested_hook.py"), ["continue"], ["/dev/null"])
    assert run.status == 0, run.output
    (nested,) = run.of(ev.NestedPass)
    assert nested.call == "grad" and nested.nodes > 0 and nested.thread == "gradtui-script"


def test_without_a_flow_command_headless_skips_the_flow_of_unhooked_passes(tmp_path, monkeypatch):
    import gradtui.engine.session as session_module
    from gradtui.cli.main import main

    out = tmp_path / "g.pt"
    original = session_module.Session.emit
    for commands, flows in ((["-c", "continue"], False), (["-c", "continue", "-c", "flow"], True)):
        events: list[ev.Event] = []
        monkeypatch.setattr(session_module.Session, "emit", lambda self, e: (events.append(e), original(self, e)))
        assert main(["--headless", *commands, script("train_loop.py"), "3", str(out)]) == 0
        finished = [e for e in events if isinstance(e, ev.PassFinished)]
        # the hooked first pass too: the headless printer reads a flow only for a `flow` command
        assert len(finished) == 3 and all(bool(e.flow) == flows for e in finished)


def test_one_unhooked_pass_is_told_in_the_singular(tmp_path):
    """The line "pass 6 ran unhooked at plain speed: nothing could stop in them", said of one pass: "it", not "them"."""
    run = run_headless(script("train_loop.py"), ["continue"], ["2", str(tmp_path / "g.pt")], hook_all_passes=False)
    assert "pass 1 ran unhooked at plain speed: nothing could stop in it" in run.output.splitlines()
