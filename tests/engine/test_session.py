"""The stepping engine (gradtui.engine.session) driven through ScriptRunner: pauses, every break
spec, step/finish/continue across passes, edits that reach the leaves, `why`, and commands
submitted from the test's own thread while the script runs in the runner's thread."""

from __future__ import annotations

import threading

import pytest
import torch

from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import example, output_of, run_headless, script, torch_originals

pytestmark = pytest.mark.timeout(60)


def chain_grad(commands: list[str], tmp_path) -> tuple[torch.Tensor, object]:
    """x.grad after running tests/fixtures/chain.py (z = (3x)^2 at x = 2) with `commands`."""
    path = tmp_path / "grads.pt"
    run = run_headless(script("chain.py"), commands, [str(path)])
    assert run.status == 0, run.output
    return torch.load(path)["x"], run


# ---- pauses and stepping --------------------------------------------------------------


def test_first_pause_is_the_first_node_of_the_first_pass():
    run = run_headless(example("chain.py"), ["continue"])
    (pause,) = run.pauses
    assert (pause.pass_index, pause.node, pause.name, pause.phase) == (0, 0, "PowBackward0", "before")
    assert pause.reason == "step" and pause.done == 0 and pause.total == 3
    assert pause.grads[0].values == (1.0,)
    assert pause.grads[0].histogram is not None  # a pause carries histograms
    assert [type(e).__name__ for e in run.events if isinstance(e, (ev.Paused, ev.Resumed))] == ["Paused", "Resumed"]
    assert run.of(ev.Resumed)[0].mode == "continue"


def test_step_walks_the_nodes_in_engine_order_with_their_gradients():
    run = run_headless(example("chain.py"), ["step", "step"])
    assert run.where == [(0, 0), (0, 1), (0, 2)]
    assert [p.name for p in run.pauses] == ["PowBackward0", "MulBackward0", "AccumulateGrad"]
    assert [p.grads[0].values for p in run.pauses] == [(1.0,), (12.0,), (36.0,)]
    assert [p.done for p in run.pauses] == [0, 1, 2]
    assert "-- no more commands: running to the end" in run.output
    assert "x.grad = 36.0" in output_of(run.events)


def test_source_lines_are_recorded():
    run = run_headless(script("chain.py"), ["continue"])
    (started,) = run.of(ev.PassStarted)
    lines = open(script("chain.py"), encoding="utf-8").read().splitlines()
    assert started.graph.nodes[0]["info"].source == f"chain.py:{lines.index('z = y ** 2') + 1}"
    assert started.graph.nodes[1]["info"].source == f"chain.py:{lines.index('y = x * 3') + 1}"
    assert started.call_text == "z.backward()"
    assert started.call_site == f"chain.py:{lines.index('z.backward()') + 1}"


def test_step_crosses_into_the_next_pass():
    run = run_headless(script("loop.py"), ["step", "step", "step", "continue"], ["2"])
    assert run.where == [(0, 0), (0, 1), (0, 2), (1, 0)]


def test_later_passes_pause_only_at_breakpoints():
    run = run_headless(script("loop.py"), ["continue"], ["3"])
    assert run.where == [(0, 0)]
    assert len(run.of(ev.PassStarted)) == 3
    assert output_of(run.events).count("x.grad = 36.0") == 3


def test_finish_pauses_at_the_first_node_of_the_next_pass():
    run = run_headless(script("loop.py"), ["step", "finish", "continue"], ["3"])
    assert run.where == [(0, 0), (0, 1), (1, 0)]
    assert [e.mode for e in run.of(ev.Resumed)] == ["step", "finish", "continue"]


def test_finish_in_the_last_pass_runs_to_the_end():
    run = run_headless(example("chain.py"), ["finish"])
    assert run.where == [(0, 0)]
    assert run.finished.exit_status == 0


def test_node_ran_events_and_leaf_grads():
    run = run_headless(example("chain.py"), ["continue"])
    ran = run.of(ev.NodeRan)
    assert [(e.node, e.order) for e in ran] == [(0, 1), (1, 2), (2, 3)]
    assert [e.grad_outputs[0].values for e in ran] == [(1.0,), (12.0,), (36.0,)]
    assert [e.grad_inputs[0].values for e in ran[:2]] == [(12.0,), (36.0,)]
    (finished,) = run.of(ev.PassFinished)
    assert (finished.done, finished.total, finished.error) == (3, 3, None)
    ((node, stats),) = finished.leaf_grads
    assert node == 2 and stats.values == (36.0,)
    assert run.of(ev.Progress)  # at least one progress report


# ---- breakpoints ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ("MulBackward0", (0, 1)),
        ("torch::autograd::AccumulateGrad", (0, 2)),
        ("y", (0, 1)),
        ("x", (0, 2)),
        ("#2", (0, 2)),
        ("norm>10", (0, 1)),  # 12 arrives at y's node
        ("norm>20", (0, 2)),  # 36 arrives at x's accumulator
        ("pass 1", (1, 0)),
    ],
)
def test_each_break_spec_pauses_where_it_should(spec, where):
    # A CPU pass reads statistics back at every node with a value spec armed (norm>X), so it
    # stops exactly where one matches, before the node runs (an accelerator's pass reads every
    # CHECK_EVERY nodes: test_bulk_stats).
    run = run_headless(script("loop.py"), [f"break {spec}", "continue"], ["2"])
    assert run.where == [(0, 0), where]
    assert run.pauses[1].reason == f"breakpoint 1: {spec}"
    (hit,) = run.of(ev.BreakpointHit)
    assert (hit.number, hit.spec, hit.pass_index, hit.node) == (1, spec, *where)
    assert run.report.to_json()["breakpoint_hits"] == [
        {"breakpoint": 1, "spec": spec, "pass": where[0], "node": where[1]}
    ]


def test_break_on_a_parameter_of_a_sequential():
    run = run_headless(script("sequential.py"), ["break 0.weight", "continue", "continue"])
    assert len(run.pauses) == 2
    pause = run.pauses[1]
    (started,) = run.of(ev.PassStarted)
    assert pause.name == "AccumulateGrad"
    assert started.graph.nodes[pause.node]["info"].param == "0.weight"
    assert pause.grads[0].shape == (3, 2)


def test_a_breakpoint_hits_in_every_pass():
    run = run_headless(script("loop.py"), ["break y", "continue", "continue", "continue", "continue"], ["3"])
    assert run.where == [(0, 0), (0, 1), (1, 1), (2, 1)]


def test_nan_breakpoint_stops_after_the_node_that_made_it():
    run = run_headless(example("nan.py"), ["break nan", "continue", "print", "continue"])
    assert len(run.pauses) == 2
    pause = run.pauses[1]
    assert pause.name == "SqrtBackward0" and pause.phase == "after"
    assert "SqrtBackward0" in pause.reason and "non-finite" in pause.reason
    assert pause.grads[0].nonfinite == 1
    assert "paused after #" in run.output and "SqrtBackward0" in run.output
    assert "out[0]" in run.output  # `print` after a node shows what it sent
    assert len(run.of(ev.BreakpointHit)) == 1  # not again at every node downstream


def test_a_nan_found_after_continuing_from_a_step_pause_is_editable_at_its_culprit():
    # The pass starts stepping (every node hooked); `continue` hands the rest to the hook plan, which
    # stops in the culprit's posthook: an edit replaces what it sends on. (A pause read back late,
    # after later nodes ran, refuses edits: tests/engine/stats/test_bulk_stats.py.)
    run = run_headless(example("nan.py"), ["break nan", "continue", "zero", "continue"])
    assert [r.command for r in run.results() if not r.ok] == []
    assert run.pauses[1].name == "SqrtBackward0" and run.pauses[1].phase == "after"
    assert len(run.of(ev.GradEdited)) == 1
    assert "w.grad = [0.0, 0.0, 0.0]" in output_of(run.events)


def test_delete_and_list_breakpoints():
    run = run_headless(
        script("loop.py"),
        ["break y", "break nan", "breakpoints", "delete 1", "breakpoints", "delete 7", "continue"],
        ["2"],
    )
    assert run.where == [(0, 0)]
    texts = [(r.command, r.text, r.ok) for r in run.results()]
    assert texts == [
        ("break y", "breakpoint 1 at y", True),
        ("break nan", "breakpoint 2 at nan", True),
        ("breakpoints", "1: y  (never hit)\n2: nan  (never hit)", True),
        ("delete 1", "deleted 1", True),
        ("breakpoints", "2: nan  (never hit)", True),
        ("delete 7", "no breakpoint 7", False),
    ]


def test_delete_all_and_hit_counts():
    run = run_headless(
        script("loop.py"),
        ["break y", "break x", "continue", "breakpoints", "delete all", "breakpoints", "continue"],
        ["2"],
    )
    assert run.where == [(0, 0), (0, 1)]
    texts = [r.text for r in run.results()]
    assert "1: y  (hit once)\n2: x  (never hit)" in texts
    assert "deleted 1, 2" in texts and "no breakpoints" in texts


def test_bad_commands_are_reported_and_skipped():
    run = run_headless(example("chain.py"), ["frobnicate", "break a b", "scale x", "continue"])
    assert run.where == [(0, 0)]
    assert "error: unknown command 'frobnicate'" in run.output
    assert "error: bad break spec 'a b'" in run.output
    assert "error: scale: 'x' is not a number" in run.output
    assert run.finished.exit_status == 0


# ---- edits reach the leaf ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (["step", "step", "scale 0.5", "continue"], 18.0),
        (["step", "scale 0.5", "continue"], 18.0),  # at y's node: 12 -> 6, times 3
        (["scale -1", "continue"], -36.0),  # at the first node
        (["step", "step", "zero", "continue"], 0.0),
        (["step", "zero", "continue"], 0.0),
        (["step", "step", "set g * 3", "continue"], 108.0),
        (["step", "set g + 1", "continue"], 39.0),
        (["step", "step", "scale 2", "scale 2", "continue"], 144.0),  # edits compose
    ],
)
def test_edits_reach_the_leaf(commands, expected, tmp_path):
    grad, run = chain_grad(commands, tmp_path)
    assert torch.equal(grad, torch.tensor([expected]))
    assert run.report.to_json()["edits"]


def test_clip_reaches_the_leaf(tmp_path):
    grad, _ = chain_grad(["step", "step", "clip 10", "continue"], tmp_path)
    assert 10 * (1 - 1e-5) < grad.item() <= 10.0
    grad, _ = chain_grad(["step", "clip 6", "continue"], tmp_path)  # 12 -> 6 at y's node
    assert 18 * (1 - 1e-5) < grad.item() <= 18.0
    grad, _ = chain_grad(["step", "step", "clip 100", "continue"], tmp_path)  # under the limit
    assert torch.equal(grad, torch.tensor([36.0]))


def test_edit_events_and_report(tmp_path):
    _, run = chain_grad(["step", "step", "scale 0.5", "continue"], tmp_path)
    (edit,) = run.of(ev.GradEdited)
    assert (edit.pass_index, edit.node, edit.command) == (0, 2, "scale 0.5")
    assert edit.before[0].values == (36.0,) and edit.after[0].values == (18.0,)
    (result,) = [r for r in run.results() if r.command == "scale 0.5"]
    assert result.ok and result.text.startswith("gradient now [1] float32 cpu  norm 18")
    report = run.report.to_json()
    assert report["edits"] == [
        {
            "pass": 0,
            "node": 2,
            "command": "scale 0.5",
            "before": [edit.before[0].to_json()],
            "after": [edit.after[0].to_json()],
        }
    ]
    x = report["passes"][0]["nodes"][2]
    assert x["grad_outputs"][0]["values"] == [18.0]  # after the edit


@pytest.mark.parametrize(
    "bad",
    [
        "set torch.zeros(2)",
        "set g.double()",
        "set torch.zeros(1, device='meta')",
        "set 3",
        "set nope",
    ],
)
def test_refused_edit_leaves_the_gradient_and_the_pause(bad, tmp_path):
    grad, run = chain_grad(["step", "step", bad, "print", "continue"], tmp_path)
    assert torch.equal(grad, torch.tensor([36.0]))
    (refused,) = [r for r in run.results() if not r.ok]
    assert refused.command == bad
    (printed,) = [r for r in run.results() if r.command == "print"]
    assert printed.ok and printed.text.startswith("in[0] [1] float32 cpu  norm 36")
    assert not run.of(ev.GradEdited)
    assert run.where == [(0, 0), (0, 1), (0, 2)]


def test_edit_matches_the_scripts_own_hook(tmp_path):
    """`break AddBackward0` + `scale 2` = `z.register_hook(lambda g: 2 * g)`, bit for bit."""
    hooked, debugged = tmp_path / "hooked.pt", tmp_path / "debugged.pt"
    plain = run_headless(script("add_matmul.py"), [], [str(hooked), "hook"])
    assert plain.status == 0
    run = run_headless(
        script("add_matmul.py"), ["break AddBackward0", "continue", "scale 2", "continue"], [str(debugged)]
    )
    assert [p.name for p in run.pauses] == ["DotBackward0", "AddBackward0"]
    expected, actual = torch.load(hooked), torch.load(debugged)
    for name in ("x", "y", "w"):
        assert torch.equal(expected[name], actual[name]), name
    assert not torch.equal(actual["x"], actual["x"] / 2)


def test_print_expressions(tmp_path):
    _, run = chain_grad(["step", "print g * 2", "print y", "print g.shape", "print 1/0", "continue"], tmp_path)
    texts = {r.command: (r.ok, r.text) for r in run.results()}
    assert texts["print g * 2"] == (True, "[1] float32 cpu  norm 24  min 24  max 24  mean 24  values [24]")
    assert texts["print y"][0] and "values [6]" in texts["print y"][1]  # the script's own variable
    assert texts["print g.shape"] == (True, "torch.Size([1])")
    assert texts["print 1/0"][0] is False and "ZeroDivisionError" in texts["print 1/0"][1]


def test_help_while_paused():
    run = run_headless(example("chain.py"), ["help", "continue"])
    (result,) = run.results()
    assert result.ok and "step (s)" in result.text and "quit (q)" in result.text


# ---- why -------------------------------------------------------------------------------


def test_why_messages():
    names = ["x", "h", "frozen", "detached", "unused", "other", "count", "nope"]
    run = run_headless(script("why.py"), [f"why {n}" for n in names] + ["continue"])
    texts = {r.command.removeprefix("why "): r.text for r in run.results()}
    assert all(r.ok for r in run.results())
    assert texts["x"].startswith("yes: x is a leaf on this graph, accumulated at #")
    assert "AccumulateGrad (x)" in texts["x"]
    assert texts["h"].startswith("yes: h is made by #") and "MulBackward0 (h)" in texts["h"]
    assert "h.retain_grad()" in texts["h"]
    off = "{0} is not on this pass's graph, so {0}.grad stays None: "
    assert texts["frozen"].startswith(off.format("frozen") + "it does not require grad")
    assert "requires_grad=True" in texts["frozen"]
    assert texts["detached"].startswith(off.format("detached") + "it does not require grad")
    assert ".detach()" in texts["detached"] and "torch.no_grad()" in texts["detached"]
    assert texts["unused"].startswith(
        off.format("unused") + "it requires grad but this pass's output does not depend on it"
    )
    assert texts["other"].startswith(off.format("other") + "it was made by")
    assert texts["count"] == "count is an int, not a tensor"
    assert texts["nope"] == "nope is not defined where backward was called (<module>)"


def test_why_names_the_node_the_gradient_arrives_at():
    run = run_headless(script("why.py"), ["why h", "continue"])
    (started,) = run.of(ev.PassStarted)
    (result,) = run.results()
    (h_node,) = [n for n, info in started.graph.nodes(data="info") if "h" in info.labels]
    assert f"its gradient arrives at #{h_node}" in result.text


# ---- driven from the test's thread -------------------------------------------------------


def test_submit_from_another_thread(driven):
    run = driven(script("chain.py"))
    first = run.next(ev.Paused)
    assert (first.pass_index, first.node) == (0, 0)
    assert run.session.paused
    run.submit("step")
    second = run.next(ev.Paused)
    assert (second.node, second.grads[0].values) == (1, (12.0,))
    run.submit("step")
    third = run.next(ev.Paused)
    assert third.name == "AccumulateGrad"
    run.submit("scale 0.5")
    result = run.result()
    assert result.ok and "norm 18" in result.text
    run.submit("continue")
    finished = run.join()
    assert (finished.exit_status, finished.quit, finished.passes) == (0, False, 1)
    output = "".join(e.text for e in run.events if isinstance(e, ev.Output))
    assert "x.grad = 18.0" in output
    assert not run.session.paused


def test_commands_while_running_from_another_thread(driven, stash):
    """Edits are refused while the script runs; breakpoints can be added any time."""
    stash["waiting"], stash["go"] = threading.Event(), threading.Event()
    run = driven(script("gated.py"))
    run.next(ev.Paused)
    run.submit("continue")
    assert stash["waiting"].wait(10)  # the script runs, between its two passes
    assert not run.session.paused
    run.submit("zero")
    refused = run.result()
    assert (refused.command, refused.ok, refused.text) == ("zero", False, "not paused: the script is running")
    run.submit("break pass 1")
    added = run.result()
    assert added.ok and added.text == "breakpoint 1 at pass 1"
    stash["go"].set()
    pause = run.next(ev.Paused)
    assert (pause.pass_index, pause.node, pause.reason) == (1, 0, "breakpoint 1: pass 1")
    run.submit("continue")
    assert run.join().exit_status == 0


def test_backward_on_another_thread_is_not_intercepted(driven, stash):
    """The session only debugs the script's threads (its own and those it starts): the test's
    own backward runs untouched, even while the script is paused in a hook."""
    stash["waiting"], stash["go"] = threading.Event(), threading.Event()
    run = driven(script("gated.py"))
    run.next(ev.Paused)
    assert run.session.paused
    a = torch.ones(3, requires_grad=True)
    (a * 4).sum().backward()  # would deadlock or pause if intercepted
    assert torch.equal(a.grad, torch.full((3,), 4.0))
    run.submit("continue")
    assert stash["waiting"].wait(10)
    b = torch.ones(2, requires_grad=True)
    (grad,) = torch.autograd.grad((b * 5).sum(), [b])
    assert torch.equal(grad, torch.full((2,), 5.0))
    stash["go"].set()
    assert run.join().exit_status == 0
    assert len([e for e in run.events if isinstance(e, ev.PassStarted)]) == 2  # the script's own two


def test_retained_graph_is_hooked_afresh_each_pass(tmp_path):
    path = tmp_path / "g.pt"
    run = run_headless(script("autograd_features.py"), ["break pass 5", "continue", "step", "continue"], [str(path)])
    assert run.status == 0, run.output
    started = run.of(ev.PassStarted)
    assert started[4].call_text == "loss.backward(retain_graph=True)"
    assert started[5].call_text == "loss.backward()"
    assert started[4].graph.number_of_nodes() == started[5].graph.number_of_nodes()
    assert run.where[1:] == [(5, 0), (5, 1)]
    ran = [e for e in run.of(ev.NodeRan) if e.pass_index in (4, 5)]
    assert len(ran) == 2 * started[5].graph.number_of_nodes()  # no hook of pass 4 fired again


def test_originals_are_restored_after_a_run():
    before = torch_originals()
    run = run_headless(example("chain.py"), ["continue"])
    assert run.finished.exit_status == 0
    assert torch_originals() == before


def test_light_stats_between_pauses_keep_norms_and_full_stats_while_stepping():
    """full_stats=False (the UI without a report): nodes run in `continue` record norms only,
    the same norms a full run records; nodes run while stepping keep every statistic."""
    full = run_headless(example("mlp.py"), ["step", "continue"])
    light = run_headless(example("mlp.py"), ["step", "continue"], full_stats=False)

    def ran(run):
        return [e for e in run.events if isinstance(e, ev.NodeRan)]

    assert [(e.pass_index, e.node) for e in ran(full)] == [(e.pass_index, e.node) for e in ran(light)]
    big_light = 0
    for f, lt in zip(ran(full), ran(light)):
        for fs, ls in zip(f.grad_outputs + f.grad_inputs, lt.grad_outputs + lt.grad_inputs):
            assert (fs is None) == (ls is None)
            if fs is None:
                continue
            assert ls.norm == pytest.approx(fs.norm, rel=1e-6)
            if f.pass_index == 0 and f.order == 1:
                assert ls == fs  # run while stepping: full stats
            elif ls.numel > 64:
                assert ls.min is None and ls.mean is None
                big_light += 1
    assert big_light > 0


@pytest.mark.parametrize("change", ["g.mul_(10)", "g.data.mul_(10)"])
def test_stats_of_a_gradient_a_tensor_hook_changed_in_place(tmp_path, change):
    """A receiver's stats are not its sender's when a tensor hook modified the very tensor in
    place in between (returning None): the report, and `norm>X`, see what really arrived."""
    path = tmp_path / "inplace_hook.py"
    path.write_text(
        "import torch\n"
        "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
        "y = x * 3\n"
        "z = y * 2\n"
        f"y.register_hook(lambda g: {change})\n"
        "z.sum().backward()\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["break norm>20", "continue", "continue"])
    assert run.status == 0, run.output
    nodes = run.report.to_json()["passes"][0]["nodes"]
    (y,) = [n for n in nodes if n["labels"] == ["y"]]
    assert y["grad_outputs"][0]["values"] == [20.0, 20.0]
    assert run.where[:2] == [(0, 0), (0, y["id"])]  # norm 28.3 > 20 where y's gradient arrives


def test_light_stats_sent_while_running_are_not_reused_while_stepping(tmp_path):
    """full_stats=False: AddBackward0 runs in `continue` (light stats) and sends to both
    multiplications; after a breakpoint at one of them the user steps, so the other, reached
    by stepping, must record full stats, not the light ones its sender took."""
    path = tmp_path / "fork.py"
    path.write_text(
        "import torch\n"
        "w = torch.randn(100, requires_grad=True)\n"
        "v = torch.randn(100, requires_grad=True)\n"
        "a = w * 2\n"
        "b = v * 3\n"
        "(a + b).sum().backward()\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["break b", "continue", "step", "step", "continue"], full_stats=False)
    assert run.status == 0, run.output
    (started,) = run.of(ev.PassStarted)
    (a,) = [n for n, data in started.graph.nodes(data="info") if data.labels == ("a",)]
    assert run.where[-1] == (0, a)  # reached by stepping
    (ran,) = [e for e in run.of(ev.NodeRan) if e.node == a]
    assert ran.grad_outputs[0].mean is not None


def test_backward_and_grad_of_a_generator(tmp_path):
    """torch.autograd.backward / grad accept any iterable of tensors, a generator too: gradtui
    must not use it up before torch reads it (the pass then silently did nothing)."""
    path = tmp_path / "generator.py"
    path.write_text(
        "import torch\n"
        "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
        "losses = [(x * 2).sum(), (x ** 2).sum()]\n"
        "torch.autograd.backward(loss for loss in losses)\n"
        "print('x.grad', x.grad.tolist())\n"
        "(g,) = torch.autograd.grad((y for y in [(x * 3).sum()]), x)\n"
        "print('g', g.tolist())\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["continue"])
    assert run.status == 0, run.output
    assert output_of(run.events) == "x.grad [4.0, 6.0]\ng [3.0, 3.0]\n"
    assert [(e.done, e.total) for e in run.of(ev.PassFinished)] == [(5, 5), (2, 3)]


def test_g_is_the_gradient_even_when_the_script_has_a_variable_g(tmp_path):
    path = tmp_path / "has_g.py"
    path.write_text(
        "import torch\n"
        "g = torch.tensor([100.0])\n"
        "x = torch.tensor([2.0], requires_grad=True)\n"
        "z = (x * 3) ** 2\n"
        "z.backward()\n"
        "print(x.grad.item())\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["print g", "set g * 2", "print g + 0 * x", "continue"])
    assert run.status == 0, run.output
    assert [r.text.split("values ")[-1] for r in run.results()[::2]] == ["[1]", "[2]"]
    assert output_of(run.events) == "72.0\n"  # 36 doubled, not 36 * 200


def test_an_expression_calling_exit_is_refused_not_the_end_of_the_script():
    run = run_headless(
        example("chain.py"), ["print exit(3)", "set quit()", "why exit(2)", "why x[5]", "step", "continue"]
    )
    assert run.status == 0, run.output
    assert "x.grad = 36.0" in output_of(run.events)
    texts = [(r.text, r.ok) for r in run.results()]
    assert texts == [
        ("'exit(3)' failed: SystemExit: 3", False),
        ("'quit()' failed: SystemExit: None", False),
        ("exit(2) failed: SystemExit: 2", True),
        ("x[5] failed: IndexError: index 5 is out of bounds for dimension 0 with size 1", True),
    ]
    assert run.where == [(0, 0), (0, 1)]


def test_commands_after_the_script_ended_do_not_claim_it_is_running():
    run = run_headless(example("chain.py"), ["continue"])
    assert run.status == 0
    results: list[ev.Event] = []
    run.session.add_listener(results.append)
    run.session.submit(parse("step"))
    run.session.submit(parse("break nan"))
    assert [(r.ok, r.text) for r in results if isinstance(r, ev.CommandResult)] == [
        (False, "not paused: the script is not running (it has ended or not started)"),
        (True, "breakpoint 1 at nan"),
    ]


def test_a_breakpoint_no_node_of_the_pass_matches_says_so():
    """`break Addmm` (a label, since it lacks `Backward0`) or a typo would silently never hit."""
    run = run_headless(
        example("chain.py"),
        ["break Addmm", "break MulBackward", "break #9", "break y", "break MulBackward0", "break nan", "continue"],
    )
    texts = [r.text for r in run.results()]
    note = " (no node of this pass matches it)"
    assert texts == [
        f"breakpoint 1 at Addmm{note}",
        f"breakpoint 2 at MulBackward{note}",
        f"breakpoint 3 at #9{note}",
        "breakpoint 4 at y",
        "breakpoint 5 at MulBackward0",
        "breakpoint 6 at nan",
    ]


@pytest.mark.parametrize("hooked", ["b", "loss"])
def test_a_backward_nested_in_a_hook_does_not_pause_or_count(tmp_path, hooked):
    """A user's tensor hook that calls torch.autograd.grad through nodes of the graph being
    debugged: those nodes run for the inner call too, but only the outer pass pauses and counts
    them (before, the inner call paused, counted 5 of 4 nodes and could take an edit)."""
    path = tmp_path / "nested.py"
    path.write_text(
        "import torch\n"
        "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
        "a = x * 3\n"
        "b = a ** 2\n"
        "loss = b.sum()\n"
        "def hook(g):\n"
        "    with torch.enable_grad():\n"
        "        (inner,) = torch.autograd.grad(a.sum(), x, retain_graph=True)\n"
        "    print('inner', inner.tolist())\n"
        f"{hooked}.register_hook(hook)\n"
        "loss.backward()\n"
        "print('x.grad', x.grad.tolist())\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["step"] * 4 + ["continue"])
    assert run.status == 0, run.output
    (started,) = run.of(ev.PassStarted)
    names = [started.graph.nodes[p.node]["info"].name for p in run.pauses]
    assert names == ["SumBackward0", "PowBackward0", "MulBackward0", "AccumulateGrad"]
    assert [p.done for p in run.pauses] == [0, 1, 2, 3]
    assert [p.grads[0].values for p in run.pauses][1:] == [(1.0, 1.0), (6.0, 12.0), (18.0, 36.0)]
    (finished,) = run.of(ev.PassFinished)
    assert (finished.done, finished.total, finished.error) == (4, 4, None)
    assert len(run.of(ev.NodeRan)) == 4
    assert output_of(run.events) == "inner [3.0, 3.0]\nx.grad [18.0, 36.0]\n"


def test_an_edit_torch_cannot_do_is_refused_not_the_end_of_the_script(monkeypatch):
    """Any error of a command (here: an op torch lacks for this gradient's layout) is an answer;
    before, it escaped the paused hook and aborted the script's backward."""
    from gradtui.engine import edits

    def clip(grads, max_norm):
        raise NotImplementedError("Could not run 'aten::linalg_vector_norm' on 'SparseCPU'\nbackends: ...")

    monkeypatch.setattr(edits, "clip", clip)
    run = run_headless(example("chain.py"), ["clip 1", "step", "continue"])
    assert run.status == 0, run.output
    (result,) = run.results()
    assert (result.ok, result.text) == (
        False,
        "'clip 1' failed: NotImplementedError: Could not run 'aten::linalg_vector_norm' on 'SparseCPU'",
    )
    assert "x.grad = 36.0" in output_of(run.events)


def test_an_edit_typed_ahead_of_a_resume_never_lands_on_another_node(driven):
    """`c` then `z` typed quickly while paused: the engine resumes on `c`, and `z` was meant
    for the node the user was looking at. It must not zero whatever node pauses next (here
    the first node of the next pass, at a breakpoint)."""
    run = driven(script("loop.py"), ["2"])
    run.next(ev.Paused)
    run.submit("break pass 1")
    assert run.result().ok
    run.submit("continue")
    run.submit("zero")
    pause = run.next(ev.Paused)
    assert (pause.pass_index, pause.node) == (1, 0)
    run.submit("continue")
    finished = run.join()
    assert finished.exit_status == 0
    assert not [e for e in run.events if isinstance(e, ev.GradEdited)]
    (refused,) = [e for e in run.events if isinstance(e, ev.CommandResult) and e.command == "zero"]
    assert not refused.ok
    output = "".join(e.text for e in run.events if isinstance(e, ev.Output))
    assert output == "pass 0 x.grad = 36.0\npass 1 x.grad = 36.0\n"


def test_vmapped_gradients_are_left_alone():
    """torch.func.grad under vmap, jacobian(vectorize=True) and is_grads_batched=True call
    torch.autograd.grad with batched tensors whose statistics cannot be read: each killed the
    script. They now run untouched; the script's own backward is still debugged."""
    run = run_headless(script("vmapped.py"), ["continue"])
    assert run.status == 0, run.output
    assert output_of(run.events) == (
        "vmap grad [[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]\n"
        "jacobian [[2.0, 0.0], [0.0, 4.0]]\n"
        "is_grads_batched [[2.0, 0.0], [0.0, 4.0]]\n"
        "x.grad [2.0, 4.0]\n"
    )
    (started,) = run.of(ev.PassStarted)
    assert started.call_text == "loss.backward()"
    assert run.where == [(0, 0)]


def test_a_backward_on_the_meta_device_is_left_alone(tmp_path):
    """Meta tensors have shapes but no values: reading their statistics killed the script."""
    path = tmp_path / "meta.py"
    path.write_text(
        "import torch\nx = torch.empty(3, device='meta', requires_grad=True)\n"
        "(x * 2).sum().backward()\nprint(x.grad.shape)\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["continue"])
    assert run.status == 0, run.output
    assert output_of(run.events) == "torch.Size([3])\n"
    assert run.finished.passes == 0


def test_a_pass_torch_starts_for_the_script_is_shown_at_the_scripts_line(tmp_path):
    """jacobian() calls torch.autograd.grad from inside torch: the pass used to say it was
    called at `functional.py:...` with torch's source line, and `set`/`why` saw torch's locals."""
    path = tmp_path / "jac.py"
    path.write_text(
        "import torch\nscale = torch.tensor(3.0)\n"
        "J = torch.autograd.functional.jacobian(lambda v: v * scale, torch.ones(2))\n",
        encoding="utf-8",
    )
    run = run_headless(str(path), ["why scale", "continue"])
    assert run.status == 0, run.output
    first = run.of(ev.PassStarted)[0]
    assert first.call_site == "jac.py:3" and first.call_text.startswith("J = torch.autograd.functional.jacobian(")
    assert run.results()[0].text.startswith(
        "scale is not on this pass's graph, so scale.grad stays None: it does not require grad"
    )


def test_module_and_place_specs_that_match_no_node_are_accepted_with_a_warning():
    """`break module no.such` and `break nosuch.py:3` were accepted silently."""
    run = run_headless(example("chain.py"), ["break module no.such", "break nosuch.py:3", "continue"])
    answers = [r.text for r in run.results() if r.text.startswith("breakpoint ")]
    assert len(answers) == 2 and all(r.ok for r in run.results())
    assert all("(" in text and "no node" in text for text in answers), answers


def test_a_live_run_answers_pass_n_and_flow_n_from_the_one_grammar():
    """`pass N` and `flow N` parse everywhere; a live session keeps only the pass in flight and
    its last flow, and says so (the UI browses its own kept passes; a recording has them all)."""
    run = run_headless(script("loop.py"), ["pass 0", "pass 7", "flow 0", "continue"], ["2"])
    answers = {r.command: (r.ok, r.text) for r in run.results()}
    assert answers["pass 0"] == (False, "pass 0 is the pass in flight: it is the one shown")
    assert answers["pass 7"][0] is False and answers["pass 7"][1].startswith("pass 7 is not kept")
    assert answers["flow 0"][0] is False and "a recording (--record) keeps every pass's" in answers["flow 0"][1]
    assert run.status == 0
