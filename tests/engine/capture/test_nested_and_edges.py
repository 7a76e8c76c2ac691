"""GradientEdge roots work as in plain torch; the parameters a reentrant
checkpoint updates in its nested pass are in their pass's flow, and `break module` on a module
inside the checkpoint says it cannot stop there."""

from __future__ import annotations

import pytest
import torch
from torch.autograd.graph import get_gradient_edge

from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import run_headless, run_plain, script

pytestmark = pytest.mark.timeout(120)


def _answer(session: Session, command: str):
    return lambda e: isinstance(e, ev.Paused) and session.submit(parse(command))


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    return x, w


def _calls():
    """(name, fn(x, w) -> gradients) for every root type torch accepts that is not a tensor."""

    def one_edge(x, w):
        z = (x * w).sin()
        return torch.autograd.grad(get_gradient_edge(z), x, grad_outputs=torch.ones(3))

    def edges_in_a_list(x, w):
        a, b = (x * w).sin(), (x + w).cos()
        return torch.autograd.grad(
            [get_gradient_edge(a), get_gradient_edge(b)], [x, w], grad_outputs=[torch.ones(3), torch.full((3,), 2.0)]
        )

    def edge_and_tensor(x, w):
        a, b = (x * w).exp(), (x - w).sum()
        return torch.autograd.grad((get_gradient_edge(a), b), (x,), grad_outputs=(torch.ones(3), None))

    def backward_of_an_edge(x, w):
        z = (x * w).tanh()
        torch.autograd.backward(get_gradient_edge(z), grad_tensors=torch.ones(3))
        return x.grad.clone(), w.grad.clone()

    def edge_as_input(x, w):  # not a root, but torch takes it: the gradient at an intermediate
        h = x * w
        return torch.autograd.grad((h.exp() * 2).sum(), get_gradient_edge(h))

    return [
        ("one_edge", one_edge),
        ("edge_as_input", edge_as_input),
        ("edges_in_a_list", edges_in_a_list),
        ("edge_and_tensor", edge_and_tensor),
        ("backward_of_an_edge", backward_of_an_edge),
    ]


@pytest.mark.parametrize("mode", ["step", "continue"])
@pytest.mark.parametrize(("name", "call"), _calls(), ids=[n for n, _ in _calls()])
def test_gradient_edge_roots_give_plain_torchs_gradients(name, call, mode):
    expected = call(*_inputs())
    session = Session(provenance=False)
    pauses: list[ev.Paused] = []
    session.add_listener(lambda e: isinstance(e, ev.Paused) and (pauses.append(e), session.submit(parse(mode))))
    with session:
        got = call(*_inputs())
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert torch.equal(g, e), (g, e)
    assert session.passes == 1 and pauses  # it was the session's own pass, and paused
    assert (len(pauses) > 1) == (mode == "step")


def _norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t.detach().double()))


@pytest.mark.parametrize("hooked", [True, False])
def test_a_reentrant_checkpoints_parameters_are_in_their_pass_flow(tmp_path, hooked):
    """`hooked=False`: later passes run unhooked (headless without a report); their flow has the
    checkpointed parameters too, named as the first, recorded pass named them."""
    plain = tmp_path / "plain.pt"
    run_plain(script("ckpt_model.py"), [str(plain), "3"])
    expected = torch.load(plain)
    debugged = tmp_path / "debugged.pt"
    run = run_headless(script("ckpt_model.py"), ["continue"], [str(debugged), "3"], hook_all_passes=hooked)
    assert run.status == 0, run.output
    got = torch.load(debugged)
    assert expected.keys() == got.keys() and all(torch.equal(got[k], expected[k]) for k in expected)
    finished = run.of(ev.PassFinished)
    assert len(finished) == 3
    assert [p.recorded for p in run.of(ev.PassStarted)] == [True, hooked, hooked]
    for event in finished:
        rows = {row.name: row for row in event.flow}
        assert set(rows) == set(expected), sorted(rows)  # block.lin1.*, block.lin2.* too, each once
        assert len(event.flow) == len(expected)
    last = {row.name: row for row in finished[-1].flow}
    for name, grad in expected.items():
        assert last[name].grad_norm == pytest.approx(_norm(grad), rel=1e-6)
    inside = [name for name in expected if name.startswith("block.")]
    if hooked:  # not on the pass's graph: updated in the nested pass
        assert all(last[name].node is None for name in inside)
        assert all(last[name].node is not None for name in expected if name not in inside)


def test_break_module_inside_a_reentrant_checkpoint_says_it_cannot_stop(tmp_path):
    run = run_headless(
        script("ckpt_model.py"),
        ["break module block.lin1", "break module out", "continue", "continue", "continue"],
        [str(tmp_path / "g.pt")],
    )
    assert run.status == 0, run.output
    nested = run.of(ev.NestedPass)
    assert len(nested) == 2 and all(n.missed == ("module block.lin1",) for n in nested)
    hits = run.of(ev.BreakpointHit)
    assert [h.spec for h in hits] == ["module out", "module out"]  # the one outside stops, once a pass
    results: list[ev.Event] = []  # after the passes, a module known to run inside one is named
    run.session.add_listener(results.append)
    run.session.submit(parse("break module block.lin2"))
    (result,) = [r for r in results if isinstance(r, ev.CommandResult)]
    assert result.ok and "reentrant checkpoint in pass 0" in result.text and "cannot stop there" in result.text
    results.clear()
    run.session.submit(parse("break module inp"))
    (result,) = [r for r in results if isinstance(r, ev.CommandResult)]
    assert result.ok and "reentrant" not in result.text
