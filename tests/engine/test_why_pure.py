"""`why` as a pure function of (name, scope, graph, nodes): no session needed."""

from __future__ import annotations

import pytest
import torch

from gradtui.engine.capture.graph import Names, capture
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.why import explain


def _pass(scope: dict):
    loss = scope["loss"]
    cap = capture([loss.grad_fn], Names.from_scopes(scope))
    return cap.graph, cap.nodes


def test_explain_tells_every_kind_of_variable_apart():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    scope = {
        "x": x,
        "h": h,
        "frozen": torch.ones(1),
        "unused": torch.ones(1, requires_grad=True),
        "other": x * 7,
        "count": 3,
        "loss": (h * h).sum(),
    }
    graph, nodes = _pass(scope)
    assert explain("x", scope, graph, nodes).startswith("yes: x is a leaf on this graph, accumulated at")
    assert explain("h", scope, graph, nodes).startswith(
        "yes: h is made by #2 MulBackward0 (h); its gradient arrives at #2"
    )
    assert "does not require grad" in explain("frozen", scope, graph, nodes)
    assert "does not depend on it" in explain("unused", scope, graph, nodes)
    assert "it was made by MulBackward0, but the output" in explain("other", scope, graph, nodes)
    assert explain("count", scope, graph, nodes) == "count is an int, not a tensor"
    assert explain("nope", scope, graph, nodes, "train") == "nope is not defined where backward was called (train)"


@pytest.mark.parametrize(
    ("expr", "kind"),
    [
        ("(_ for _ in ()).throw(KeyboardInterrupt)", "KeyboardInterrupt"),
        ("(_ for _ in ()).throw(GeneratorExit)", "GeneratorExit"),
        ("exit(3)", "SystemExit"),
    ],
)
def test_an_expression_raising_a_base_exception_is_an_answer_not_the_end(expr, kind):
    """`why`: a BaseException from the expression is a refusal."""
    x = torch.ones(2, requires_grad=True)
    scope = {"x": x, "loss": (x * 2).sum()}
    graph, nodes = _pass(scope)
    assert explain(expr, scope, graph, nodes).startswith(f"{expr} failed: {kind}")


def test_a_quit_while_the_expression_runs_still_quits():
    x = torch.ones(2, requires_grad=True)

    def quitting():
        raise GradtuiQuit()

    scope = {"x": x, "loss": (x * 2).sum(), "quitting": quitting}
    graph, nodes = _pass(scope)
    with pytest.raises(GradtuiQuit):
        explain("quitting()", scope, graph, nodes)


@pytest.mark.parametrize(
    "command",
    [
        "print (_ for _ in ()).throw(KeyboardInterrupt)",
        "set (_ for _ in ()).throw(GeneratorExit)",
        "why (_ for _ in ()).throw(KeyboardInterrupt)",
    ],
)
def test_a_base_exception_from_a_commands_expression_is_a_refusal(command):
    """`why` at the session: whatever the expression raises, the run goes on."""
    from tests.helpers import example, output_of, run_headless

    run = run_headless(example("chain.py"), [command, "continue"])
    assert run.status == 0, run.output
    (result,) = run.results()
    assert ("KeyboardInterrupt" in result.text) or ("GeneratorExit" in result.text)
    assert not result.ok or command.startswith("why")  # why answers with the failure as its text
    assert output_of(run.events) == "x.grad = 36.0\n"  # the pass ran on, its gradient untouched


def test_explain_answers_for_the_parameter_names_gradtui_prints():
    """`why 1.weight`: a parameter's name in its model is no Python; `why` finds the parameter as
    `break` does, on this pass's graph or in a model in scope (frozen, or not used this pass)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1), torch.nn.Linear(1, 1))
    model[2].bias.requires_grad_(False)
    x = torch.randn(4, 2)
    scope = {"model": model, "x": x, "loss": model[:3](x).sum()}  # model[3] is not used
    graph, nodes = _pass(scope)
    assert explain("0.weight", scope, graph, nodes).startswith("yes: 0.weight is a leaf on this graph, accumulated at")
    assert explain("model.2.weight", scope, graph, nodes).startswith("yes: model.2.weight is a leaf on this graph")
    assert "does not require grad" in explain("2.bias", scope, graph, nodes)
    assert "this pass's output does not depend on it" in explain("3.weight", scope, graph, nodes)
    assert explain("9.weight", scope, graph, nodes, "train").startswith(
        "9.weight is no variable where backward was called (train)"
    )


def test_explain_finds_a_parameter_of_a_model_only_the_forward_ran():
    """Under a trainer, no variable at backward() holds the model: `why` looks in the roots whose
    forward ran (provenance's forward_roots), by the names their module paths have."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 1))
    scope = {"loss": model(torch.ones(1, 2)).sum()}
    graph, nodes = _pass(scope)
    assert explain("0.weight", scope, graph, nodes, roots={model: "model"}).startswith("yes: 0.weight is a leaf")
    model.requires_grad_(False)
    assert "does not require grad" in explain("model.0.bias", {}, graph, [], roots={model: "model"})
