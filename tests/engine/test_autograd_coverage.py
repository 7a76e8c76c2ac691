"""Every autograd entry point and every kind of node, run through the
session headless. Each case is one script of tests/fixtures/cov_*.py, run once plainly and once
under gradtui with commands that pause inside the pass that matters; every leaf gradient the
script saves must be bit-identical (torch.equal) to the plain run's.

Item 6 (coexistence with the user's own hooks and retain_grad) is at the end of this file."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.modules.module as nn_module

from gradtui.protocol import events as ev
from tests.helpers import Run, run_headless, run_plain, script, torch_originals

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Case:
    script: str
    commands: tuple[str, ...]
    pause_in: tuple[int, ...] = (0,)
    """Passes that must pause at least once while in flight."""
    at: str | None = None
    """An op one of the pauses in those passes must be at (a node of that kind was paused at)."""
    args: tuple[str, ...] = ()
    nested: int = 0
    """NestedPass events the run must emit: backward calls made while a pass was in flight."""


# Item 3: every autograd entry point.
ENTRY_POINTS = {
    "backward_gradient": Case("cov_backward_gradient.py", ("step", "step", "continue"), at="MvBackward0"),
    "backward_retain_graph_twice": Case(
        "cov_retained_twice.py", ("break pass 1", "continue", "step", "continue"), pause_in=(0, 1), at="PowBackward0"
    ),
    "backward_create_graph": Case(
        "cov_create_graph.py", ("step", "break pass 1", "continue", "step", "continue"), pause_in=(0, 1)
    ),
    "backward_inputs": Case(
        "cov_inputs.py",
        ("break w", "continue", "break pass 1", "continue", "step", "continue"),
        pause_in=(0, 1),
        at="AccumulateGrad",
    ),
    "autograd_backward_several_roots": Case("cov_several_roots.py", ("step", "step", "continue")),
    "autograd_grad_allow_unused": Case(
        "cov_grad_allow_unused.py", ("break MulBackward0", "continue", "continue"), at="MulBackward0"
    ),
    "autograd_grad_is_grads_batched": Case("cov_grad_batched.py", ("step", "continue"), at="MulBackward0"),
    "higher_order": Case(
        "cov_higher_order.py",
        ("break TanhBackwardBackward0", "continue", "step", "continue"),
        pause_in=(0, 1),
        at="TanhBackwardBackward0",
    ),
    "nested_pass_in_a_hook": Case("cov_nested_hook.py", ("step",) * 4 + ("continue",), at="AccumulateGrad", nested=1),
    "backward_in_a_user_thread": Case("cov_thread.py", ("step", "step", "continue"), at="PowBackward0"),
    "backward_in_a_user_thread_while_a_pass_runs": Case(
        "cov_thread_in_hook.py", ("step",) * 4 + ("continue",), at="AccumulateGrad", nested=1
    ),
}

# Item 4: every kind of node.
NODE_KINDS = {
    "custom_function": Case(
        "cov_custom_function.py", ("break ScaledCubeBackward", "continue", "step", "continue"), at="ScaledCubeBackward"
    ),
    "in_place": Case("cov_inplace.py", ("step", "step", "step", "continue"), at="CopySlices"),
    "views": Case("cov_views.py", ("break UnbindBackward0", "continue", "continue"), at="UnbindBackward0"),
    "checkpoint_reentrant": Case(
        "cov_checkpoint.py",
        ("break CheckpointFunctionBackward", "continue", "step", "continue"),
        args=("reentrant",),
        nested=1,
    ),
    "checkpoint_non_reentrant": Case(
        "cov_checkpoint.py", ("break TanhBackward0", "continue", "step", "continue"), args=("plain",), at="MmBackward0"
    ),
    "sparse_embedding": Case(
        "cov_sparse_embedding.py", ("break EmbeddingBackward0", "continue", "step", "continue"), at="AccumulateGrad"
    ),
    "autocast_bfloat16": Case("cov_autocast.py", ("break AddmmBackward0", "continue", "continue"), at="AddmmBackward0"),
    "torch_compile": Case(
        "cov_compiled.py",
        ("break CompiledFunctionBackward", "continue", "step", "continue"),
        args=("aot_eager",),
        at="AccumulateGrad",
    ),
    "complex": Case("cov_complex.py", ("break PolarBackward0", "continue", "continue"), at="PolarBackward0"),
    "int_and_bool_inputs": Case(
        "cov_int_bool.py", ("break WhereBackward0", "continue", "step", "continue"), at="IndexBackward0"
    ),
    "unused_branch": Case(
        "cov_unused_branch.py", ("break SplitBackward0", "continue", "continue"), at="SplitBackward0"
    ),
}


# ---- helpers ------------------------------------------------------------------------------


def assert_same_gradients(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]) -> None:
    """Same names; every tensor present, of the same layout and dtype, and bit-identical.
    Sparse gradients are compared coalesced (indices and values)."""
    assert sorted(expected) == sorted(actual)
    for name, want in expected.items():
        got = actual[name]
        assert want is not None and got is not None, name
        assert (got.layout, got.dtype, got.shape) == (want.layout, want.dtype, want.shape), name
        if want.is_sparse:
            want, got = want.coalesce(), got.coalesce()
            assert torch.equal(want.indices(), got.indices()), name
            assert torch.equal(want.values(), got.values()), name
        else:
            assert torch.equal(want, got), f"{name}: {want} != {got}"


def pauses_inside(run: Run, index: int) -> list[ev.Paused]:
    """The pauses that happened while pass `index` was in flight: after its PassStarted and
    before its PassFinished, at a node of its own graph."""
    inside, graph, found = False, None, []
    for event in run.events:
        if isinstance(event, ev.PassStarted) and event.pass_index == index:
            inside, graph = True, event.graph
        elif isinstance(event, ev.PassFinished) and event.pass_index == index:
            assert inside, f"pass {index} finished before it started"
            return found
        elif inside and isinstance(event, ev.Paused) and event.pass_index == index:
            assert event.node in graph and event.total == graph.number_of_nodes()
            assert event.done < event.total or event.phase == "after"
            found.append(event)
    pytest.fail(f"pass {index} never {'finished' if inside else 'started'}; output:\n{run.output}")


def run_both(case: Case, tmp_path) -> tuple[dict, dict, Run]:
    """The script's saved gradients from a plain run and from a run under gradtui, and that run."""
    plain, debugged = tmp_path / "plain.pt", tmp_path / "debugged.pt"
    run_plain(script(case.script), [str(plain), *case.args])
    run = run_headless(script(case.script), list(case.commands), [str(debugged), *case.args])
    assert run.status == 0, run.output
    return torch.load(plain), torch.load(debugged), run


def started(run: Run, index: int = 0) -> ev.PassStarted:
    (event,) = [e for e in run.of(ev.PassStarted) if e.pass_index == index]
    return event


def names(graph) -> list[str]:
    return [data.name for _, data in graph.nodes(data="info")]


# ---- one test per item of 3 and 4 ------------------------------------------------------------


def check_case(case: Case, tmp_path) -> Run:
    expected, actual, run = run_both(case, tmp_path)
    assert_same_gradients(expected, actual)
    for finished in run.of(ev.PassFinished):
        assert finished.error is None, finished
    for index in case.pause_in:
        assert pauses_inside(run, index), f"no pause inside pass {index}; output:\n{run.output}"
    if case.at is not None:
        assert case.at in [p.name for i in case.pause_in for p in pauses_inside(run, i)], run.output
    nested = run.of(ev.NestedPass)
    assert len(nested) == case.nested, nested
    return run


@pytest.mark.parametrize("case", ENTRY_POINTS.values(), ids=ENTRY_POINTS.keys())
def test_entry_point_gradients_equal_a_plain_run_and_the_pass_pauses(case, tmp_path):
    check_case(case, tmp_path)


@pytest.mark.parametrize("case", NODE_KINDS.values(), ids=NODE_KINDS.keys())
def test_node_kind_gradients_equal_a_plain_run_and_the_pass_pauses(case, tmp_path):
    check_case(case, tmp_path)


# ---- what each case shows, beyond equal gradients ----------------------------------------------


def test_several_roots_are_one_pass_with_both_roots_and_the_loss_value(tmp_path):
    expected, _, run = run_both(ENTRY_POINTS["autograd_backward_several_roots"], tmp_path)
    (only,) = run.of(ev.PassStarted)
    assert only.call == "backward" and len(only.roots) == 2
    assert [only.graph.nodes[r]["info"].labels for r in only.roots] == [("first",), ("second",)]
    assert only.losses == (expected["first"].item(), None)  # `second` has three elements: no loss value


def test_retained_graph_second_pass_runs_every_node_again(tmp_path):
    _, _, run = run_both(ENTRY_POINTS["backward_retain_graph_twice"], tmp_path)
    first, second = run.of(ev.PassFinished)
    assert (first.done, second.done) == (first.total, second.total)
    assert names(started(run, 0).graph) == names(started(run, 1).graph)


def test_create_graph_second_pass_goes_through_the_first_pass_backward_nodes(tmp_path):
    _, _, run = run_both(ENTRY_POINTS["backward_create_graph"], tmp_path)
    assert started(run, 0).call_text == "loss.backward(create_graph=True)"
    assert started(run, 1).call_text == "penalty.backward()"
    # x.grad = 3 x^2 w was made by the first pass's backward formulas: their nodes are new here
    first, second = started(run, 0).graph, started(run, 1).graph
    assert set(names(second)) - set(names(first))
    assert second.number_of_nodes() > first.number_of_nodes()


def test_higher_order_pass_contains_backward_of_backward_nodes(tmp_path):
    _, _, run = run_both(ENTRY_POINTS["higher_order"], tmp_path)
    assert started(run, 0).call == "grad"
    second = started(run, 1)
    assert "TanhBackwardBackward0" in names(second.graph)
    pause = [p for p in pauses_inside(run, 1) if p.name == "TanhBackwardBackward0"][0]
    assert pause.reason == "breakpoint 1: TanhBackwardBackward0"


def test_allow_unused_leaves_the_unused_input_out_of_the_graph(tmp_path):
    _, _, run = run_both(ENTRY_POINTS["autograd_grad_allow_unused"], tmp_path)
    graph = started(run).graph
    leaves = sorted(label for _, d in graph.nodes(data="info") if d.kind == "accumulate" for label in d.labels)
    assert leaves == ["w", "x"]


def test_is_grads_batched_runs_untouched_beside_a_debugged_grad(tmp_path):
    """A batched call's gradients are vmapped wrappers with no values to read: gradtui lets it run
    (not as a pass), and the script's plain grad right after is debugged as usual."""
    _, _, run = run_both(ENTRY_POINTS["autograd_grad_is_grads_batched"], tmp_path)
    (only,) = run.of(ev.PassStarted)
    assert only.call_text == "(gx,) = torch.autograd.grad(y.sum(), x)"


def test_a_backward_in_a_hook_is_shown_as_a_nested_pass_and_every_outer_node_pauses(tmp_path):
    _, _, run = run_both(ENTRY_POINTS["nested_pass_in_a_hook"], tmp_path)
    (outer,) = run.of(ev.PassStarted)
    assert outer.call_text == "loss.backward()"
    assert len(pauses_inside(run, 0)) == outer.graph.number_of_nodes()  # stepped through all, none missed
    (nested,) = run.of(ev.NestedPass)
    assert nested.pass_index == 0 and nested.call == "grad" and nested.nodes >= 2
    assert nested.thread == "gradtui-script"
    assert nested.call_site.startswith("cov_nested_hook.py:")


def test_a_backward_in_a_thread_of_the_script_is_debugged(tmp_path):
    _, _, run = run_both(ENTRY_POINTS["backward_in_a_user_thread"], tmp_path)
    (only,) = run.of(ev.PassStarted)
    assert only.call_text == "loss.backward()" and only.call_site.startswith("cov_thread.py:")
    assert run.where[:3] == [(0, 0), (0, 1), (0, 2)]


def test_nodes_made_in_a_thread_of_the_script_have_their_source_line(tmp_path):
    """Like on the script's own thread, a pause in the worker's pass shows where each node was made."""
    _, _, run = run_both(ENTRY_POINTS["backward_in_a_user_thread"], tmp_path)
    graph = started(run).graph
    lines = open(script("cov_thread.py"), encoding="utf-8").read().splitlines()
    made = f"cov_thread.py:{lines.index('    loss = (x * w).tanh().pow(2).sum()') + 1}"
    assert [d.source for _, d in graph.nodes(data="info") if d.kind == "op"] == [made] * 4


def test_a_backward_from_a_thread_while_a_pass_runs_is_announced_not_paused(tmp_path):
    """The worker's backward runs while the script's pass is in flight (its hook waits for the
    worker): it runs unhooked and is announced as a nested pass from its thread, never a deadlock."""
    _, _, run = run_both(ENTRY_POINTS["backward_in_a_user_thread_while_a_pass_runs"], tmp_path)
    (outer,) = run.of(ev.PassStarted)
    assert outer.call_text == "loss.backward()"
    assert len(pauses_inside(run, 0)) == outer.graph.number_of_nodes()
    (nested,) = run.of(ev.NestedPass)
    assert nested.pass_index == 0 and nested.thread == "user-worker" and nested.call == "backward"


def test_backward_inputs_a_non_leaf_gets_its_grad(tmp_path):
    expected, _, run = run_both(ENTRY_POINTS["backward_inputs"], tmp_path)
    assert expected["hidden"] is not None
    first, second = run.of(ev.PassFinished)
    assert first.done < first.total and second.done < second.total  # x's accumulator, w's: never run


def test_custom_function_node_pauses_with_its_two_incoming_slots(tmp_path):
    _, _, run = run_both(NODE_KINDS["custom_function"], tmp_path)
    (pause,) = [p for p in run.pauses if p.name == "ScaledCubeBackward"]
    assert started(run).graph.nodes[pause.node]["info"].kind == "custom"
    assert len(pause.grads) == 2  # the differentiable output, and the argmax index
    assert pause.grads[0] is not None and pause.grads[0].shape == (5,)


def test_reentrant_checkpoint_recomputation_is_a_nested_pass(tmp_path):
    _, _, run = run_both(NODE_KINDS["checkpoint_reentrant"], tmp_path)
    (pause,) = [p for p in run.pauses if p.name == "CheckpointFunctionBackward"]
    assert started(run).graph.nodes[pause.node]["info"].kind == "custom"
    (nested,) = run.of(ev.NestedPass)
    assert nested.pass_index == 0 and nested.call == "backward"
    (finished,) = run.of(ev.PassFinished)
    assert finished.done == finished.total  # w's accumulator, shared with the nested pass, counted once


def test_sparse_embedding_gradient_is_summarised(tmp_path):
    expected, _, run = run_both(NODE_KINDS["sparse_embedding"], tmp_path)
    graph = started(run).graph
    (acc,) = [i for i, d in graph.nodes(data="info") if d.param == "emb.weight"]
    pause = [p for p in run.pauses if p.node == acc][0]  # stepped to it after EmbeddingBackward0
    dense = expected["emb.weight"].to_dense()
    assert pause.grads[0].shape == (10, 3)
    assert pause.grads[0].norm == pytest.approx(torch.linalg.vector_norm(dense).item(), rel=1e-6)
    node = run.report.to_json()["passes"][0]["nodes"][acc]
    assert torch.equal(torch.tensor(node["grad_outputs"][0]["values"]), dense.flatten())


def test_in_place_nodes_can_be_broken_on_by_the_name_shown(tmp_path):
    """The node list shows an in-place write into a slice as `CopySlices` (and a copy_ as
    `CopyBackwards`): `break` with that name must stop there, as with any op name."""
    run = run_headless(script("cov_inplace.py"), ["break CopySlices", "continue", "continue"], [str(tmp_path / "g.pt")])
    assert run.status == 0, run.output
    assert "CopySlices" in [p.name for p in pauses_inside(run, 0)], run.output


def test_autocast_gradients_arrive_in_bfloat16(tmp_path):
    _, _, run = run_both(NODE_KINDS["autocast_bfloat16"], tmp_path)
    pauses = [p for p in run.pauses if p.name == "AddmmBackward0"]
    assert pauses and all(p.grads[0].dtype == "bfloat16" for p in pauses)


def test_compiled_function_is_one_opaque_node_the_user_steps_past(tmp_path):
    _, _, run = run_both(NODE_KINDS["torch_compile"], tmp_path)
    graph = started(run).graph
    names_ = [p.name for p in run.pauses]
    assert names_[1:] == ["CompiledFunctionBackward", "AccumulateGrad"]
    assert graph.nodes[run.pauses[1].node]["info"].kind == "opaque"


def test_complex_gradients_are_summarised(tmp_path):
    _, _, run = run_both(NODE_KINDS["complex"], tmp_path)
    report = run.report.to_json()["passes"][0]["nodes"]
    dtypes = {s["dtype"] for n in report for s in (n["grad_outputs"] or []) if s is not None}
    assert "complex64" in dtypes


def test_clip_of_a_complex_gradient_clips_its_complex_norm(tmp_path):
    """`clip N` at a complex gradient must bring its norm (of the complex values) down to N."""
    run = run_headless(
        script("cov_complex.py"), ["break PolarBackward0", "continue", "clip 0.1", "continue"], [str(tmp_path / "g.pt")]
    )
    assert run.status == 0, run.output
    (edit,) = run.of(ev.GradEdited)
    assert edit.before[0].dtype == "complex64" and edit.before[0].norm > 1
    assert edit.after[0].norm == pytest.approx(0.1, rel=1e-4)


def test_unused_branch_gradient_is_shown_as_none(tmp_path):
    _, _, run = run_both(NODE_KINDS["unused_branch"], tmp_path)
    (pause,) = [p for p in run.pauses if p.name == "SplitBackward0"]
    assert pause.grads[0] is not None and pause.grads[1] is None
    node = run.report.to_json()["passes"][0]["nodes"][pause.node]
    assert node["grad_outputs"][1] is None
    assert "in[1] None" in run.output


def test_plain_backward_calls_are_not_nested_passes(tmp_path):
    """Tensor.backward calls torch.autograd.backward inside torch: that is the same pass, not a
    backward nested in it."""
    _, _, run = run_both(ENTRY_POINTS["backward_gradient"], tmp_path)
    assert run.of(ev.NestedPass) == []


# ---- item 6: the user's own hooks and retain_grad coexist -------------------------------------


def global_backward_hooks() -> int:
    return (
        len(nn_module._global_backward_hooks)
        + len(nn_module._global_backward_pre_hooks)
        + len(nn_module._global_forward_hooks)
        + len(nn_module._global_forward_pre_hooks)
    )


def test_user_hooks_and_retain_grad_see_what_they_see_without_gradtui(tmp_path, stash):
    """A tensor hook, a full module backward hook (and a backward pre-hook), a node hook of the
    script's own and retain_grad() record the same values under gradtui, with a pause inside
    the pass and an edit-free step through the hooked nodes; none of gradtui's hooks is left on
    the graph, the module or the tensors afterwards."""
    before = torch_originals(), global_backward_hooks()
    plain, debugged = tmp_path / "plain.pt", tmp_path / "debugged.pt"
    run_plain(script("cov_user_hooks.py"), [str(plain)])
    stash.clear()
    run = run_headless(
        script("cov_user_hooks.py"), ["break h", "continue", "step", "step", "continue"], [str(debugged)]
    )
    assert run.status == 0, run.output
    assert pauses_inside(run, 0) and pauses_inside(run, 1)
    expected, actual = torch.load(plain), torch.load(debugged)
    assert_same_gradients(expected, actual)
    assert (torch_originals(), global_backward_hooks()) == before

    # What the script left behind holds only the script's own hooks.
    model, h, loss = stash["model"], stash["h"], stash["loss"]
    assert len(model._backward_hooks) == 1 and len(model._backward_pre_hooks) == 1
    assert len(model._forward_hooks) == 0 and len(model._forward_pre_hooks) == 0
    assert h.retains_grad and len(h._backward_hooks) == 1
    events = len(run.events)
    calls = len(stash["tensor_hook"])
    loss.backward()  # the first step's retained graph again, gradtui gone: no event, nothing stale
    assert len(run.events) == events
    assert len(stash["tensor_hook"]) == calls + 1
    assert torch.equal(stash["tensor_hook"][-1], expected["tensor_hook.0"])
    assert torch.equal(h.grad, expected["h.grad.0"] * 2)  # retain_grad accumulates
