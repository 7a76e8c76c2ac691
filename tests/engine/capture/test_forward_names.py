"""Parameter names come from the modules the forward ran, not only from the variables of the
frame that called backward: under the HF Trainer backward runs inside accelerate, where no
variable holds the model, and `flow` listed `#5`, `#8` instead of `0.weight`, `2.bias`."""

from __future__ import annotations

import gc

import pytest
import torch

from gradtui.protocol import events as ev
from tests.helpers import run_headless, run_plain, script

pytestmark = pytest.mark.timeout(120)


def _fresh_roots() -> None:
    """The forward's roots as a fresh process has them: none. A model an earlier test in this
    worker keeps alive (a module-scoped fixture) would otherwise be a second root, and with two
    roots every name is led by its model's name, as it should be in a script that runs two."""
    from gradtui.engine.provenance import modulecalls

    gc.collect()
    modulecalls.forward_roots.clear()


def test_parameters_are_named_from_the_forward_when_no_variable_holds_the_model(tmp_path):
    _fresh_roots()
    expected = run_plain(script("hidden_model.py"))["grads"]
    run = run_headless(script("hidden_model.py"), ["continue"], args=[str(tmp_path / "grads.pt")])
    assert run.status == 0, run.output
    (started,), (finished,) = run.of(ev.PassStarted), run.of(ev.PassFinished)
    params = {d.param for _, d in started.graph.nodes(data="info") if d.kind == "accumulate"}
    assert params == set(expected)  # 0.weight, 0.bias, 2.weight, 2.bias: torch's own names
    assert {row.name for row in finished.flow} == set(expected)
    got = torch.load(tmp_path / "grads.pt")
    for name, grad in expected.items():  # observing changed nothing
        assert torch.equal(got[name], grad), name
    for row in finished.flow:
        assert row.grad_norm == pytest.approx(expected[row.name].norm().item())


def test_why_takes_the_names_flow_prints_when_no_variable_holds_the_model():
    _fresh_roots()
    run = run_headless(script("hidden_model.py"), ["why 0.weight", "why Sequential.2.bias", "why 5.weight", "continue"])
    assert run.status == 0, run.output
    answers = {r.command: r for r in run.results()}
    assert answers["why 0.weight"].ok
    assert answers["why 0.weight"].text.startswith("yes: 0.weight is a leaf on this graph, accumulated at #")
    assert answers["why Sequential.2.bias"].text.startswith("yes: Sequential.2.bias is a leaf on this graph")
    assert answers["why 5.weight"].text.startswith("5.weight is no variable where backward was called (run_backward)")
