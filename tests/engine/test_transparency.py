"""gradtui only observes unless told to edit: a script run through it with `continue` leaves every
leaf gradient bit-identical to a plain run, and the intermediate gradients it reports are the
ones `retain_grad()` gives."""

from __future__ import annotations

import pytest
import torch

from gradtui.protocol import events as ev
from tests.helpers import assert_grads_identical, example, output_of, run_headless, run_plain, script

pytestmark = pytest.mark.timeout(120)

MODELS = [
    "chain.py",
    "mlp.py",
    "conv_bn.py",
    "lstm.py",
    "transformer.py",
    "custom_fn.py",
    "user_hook.py",
    "autograd_grad.py",
    "autograd_features.py",
]


@pytest.mark.parametrize("name", MODELS)
def test_gradients_are_bit_identical_to_a_plain_run(name, tmp_path):
    plain, debugged = tmp_path / "plain.pt", tmp_path / "debugged.pt"
    run_plain(script(name), [str(plain)])
    run = run_headless(script(name), ["continue"], [str(debugged)])
    assert run.status == 0, run.output
    assert len(run.pauses) == 1  # the first node of the first pass, then `continue`
    for started, finished in zip(run.of(ev.PassStarted), run.of(ev.PassFinished), strict=True):
        assert finished.error is None
        if started.call == "backward" and "inputs=" not in started.call_text:
            assert finished.done == finished.total
    assert_grads_identical(torch.load(plain), torch.load(debugged))


def test_autograd_grad_is_a_pass_of_kind_grad(tmp_path):
    run = run_headless(script("autograd_grad.py"), ["continue"], [str(tmp_path / "g.pt")])
    (started,) = run.of(ev.PassStarted)
    assert started.call == "grad"
    assert run.report.to_json()["passes"][0]["call"] == "grad"


def test_custom_function_node_is_reported_as_custom(tmp_path):
    run = run_headless(script("custom_fn.py"), ["continue"], [str(tmp_path / "g.pt")])
    (started,) = run.of(ev.PassStarted)
    kinds = {data.name: data.kind for _, data in started.graph.nodes(data="info")}
    assert kinds["CubeBackward"] == "custom"


def test_user_hook_runs_before_the_node_prehook(tmp_path):
    """The script's own hook doubles h's gradient; gradtui sees the doubled value arrive."""
    path = tmp_path / "g.pt"
    run = run_headless(script("user_hook.py"), ["continue"], [str(path)])
    nodes = run.report.to_json()["passes"][0]["nodes"]
    (sin,) = [n for n in nodes if n["labels"] == ["h"]]
    (pow_,) = [n for n in nodes if n["name"] == "PowBackward0"]
    sent = torch.tensor(pow_["grad_inputs"][0]["values"])
    arrived = torch.tensor(sin["grad_outputs"][0]["values"])
    assert torch.equal(arrived, 2 * sent)


def _node(report: dict, label: str) -> dict:
    (node,) = [n for n in report["passes"][0]["nodes"] if label in n["labels"]]
    return node


def test_chain_intermediate_gradient_is_12():
    run = run_headless(example("chain.py"), ["continue"])
    report = run.report.to_json()
    y = _node(report, "y")
    assert y["id"] == 1 and y["name"] == "MulBackward0"
    assert y["grad_outputs"][0]["values"] == [12.0]
    assert y["grad_inputs"][0]["values"] == [36.0]
    assert _node(report, "x")["grad_outputs"][0]["values"] == [36.0]
    assert "x.grad = 36.0" in output_of(run.events)


def test_mlp_hidden_gradients_equal_retain_grad(tmp_path):
    plain = tmp_path / "plain.pt"
    run_plain(script("mlp.py"), [str(plain), "retain"])
    expected = torch.load(plain)
    run = run_headless(script("mlp.py"), ["continue"], [str(tmp_path / "debugged.pt")])
    report = run.report.to_json()

    h = _node(report, "h")["grad_outputs"][0]
    assert h["shape"] == [4, 8] and len(h["values"]) == 32
    assert torch.equal(torch.tensor(h["values"]), expected["h"].flatten())

    h2 = _node(report, "h2")["grad_outputs"][0]
    assert h2["shape"] == [4, 32] and "values" not in h2  # 128 values: statistics only
    assert h2["norm"] == pytest.approx(torch.linalg.vector_norm(expected["h2"]).item(), rel=1e-6)
    assert h2["min"] == expected["h2"].min().item()
    assert h2["max"] == expected["h2"].max().item()
    assert h2["mean"] == pytest.approx(expected["h2"].double().mean().item(), rel=1e-5, abs=1e-9)
    assert h2["nonfinite"] == 0


def test_every_node_reports_what_it_received_and_sent(tmp_path):
    """Each edge's gradient: what a node sends on arrives at its single consumer unchanged.
    (mlp.py uses no tensor twice in one op, so each edge carries exactly one slot.)"""
    run = run_headless(script("mlp.py"), ["continue"], [str(tmp_path / "g.pt")])
    (started,) = run.of(ev.PassStarted)
    graph = started.graph
    nodes = {n["id"]: n for n in run.report.to_json()["passes"][0]["nodes"]}
    assert all(n["order"] is not None for n in nodes.values())
    assert sorted(n["order"] for n in nodes.values()) == list(range(1, len(nodes) + 1))
    checked = 0
    for sender, target, slot in graph.edges(data="slot"):
        assert target in nodes[sender]["next"]
        if graph.in_degree(target) == 1 and len(nodes[target]["grad_outputs"]) == 1:
            assert nodes[sender]["grad_inputs"][slot] == nodes[target]["grad_outputs"][0]
            checked += 1
    assert checked >= 5
