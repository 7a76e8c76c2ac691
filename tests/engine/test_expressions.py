"""What `set`, `print` and `why` evaluate: a replacement torch's hook
check would refuse is refused first, with a message, and the pass goes on unharmed; whatever an
expression raises, BaseException included, is a refused command, never the end of the run, but
gradtui's own quit still ends it; and `g` is a copy, so `print g.mul_(0)` changes nothing."""

from __future__ import annotations

import threading

import pytest
import torch

from gradtui.engine import edits
from gradtui.engine.edits import EditError, ExpressionError
from gradtui.engine.session import GradtuiQuit
from gradtui.engine.stats.summary import describe
from gradtui.protocol import events as ev
from tests.helpers import run_headless, run_plain, script

pytestmark = pytest.mark.timeout(120)

CANDIDATES = [
    "g.to_sparse()",
    "g.to_sparse_csr()",
    "g.to_mkldnn()",
    "g.double()",
    "g.half()",
    "g.int()",
    "g.bool()",
    "g.reshape(1, 6)",
    "g.t()",
    "g[None]",
    "(g,)",
    "3.0",
    "torch.zeros(2, 3, device='meta')",
    "torch.zeros(2, 3, dtype=torch.complex64)",
    "torch.nested.nested_tensor([g, g])",
    # accepted by torch (and so by gradtui)
    "g.clone()",
    "g * 2",
    "g.t().contiguous().t()",
    "g.expand(4, 2, 3)[1]",
    "g.requires_grad_()",
    "torch.ones(2, 3, requires_grad=True) * 2",
    "g.to_sparse().to_dense()",
    "torch._efficientzerotensor(2, 3)",
    "g.conj()",
    "g.to(memory_format=torch.contiguous_format)",
]


def torch_accepts(expr: str) -> bool:
    """Does plain torch run a backward whose prehook returns `expr` of the gradient (2 x 3)?"""
    x = torch.ones(2, 3, requires_grad=True)
    y = x * 2
    loss = (y * y).sum()
    y.grad_fn.register_prehook(lambda go: (eval(expr, {"g": go[0].clone(), "torch": torch}),))
    try:
        loss.backward()
    except (RuntimeError, TypeError):
        return False
    return True


@pytest.mark.filterwarnings("ignore::UserWarning")  # nested tensors are a prototype
@pytest.mark.parametrize("expr", CANDIDATES)
def test_set_refuses_exactly_what_the_hook_check_refuses(expr):
    g = torch.full((2, 3), 4.0)
    try:
        (new,) = edits.replace((g,), expr)
    except EditError as exc:
        accepted, message = False, str(exc)
    else:
        accepted, message = True, ""
        assert new.shape == g.shape and new.dtype == g.dtype and new.layout == g.layout
        assert not new.requires_grad
    assert accepted == torch_accepts(expr), message
    assert accepted or message.startswith(repr(expr))
    assert torch.equal(g, torch.full((2, 3), 4.0))


def test_none_is_refused_though_torch_would_drop_the_gradient():
    """A prehook may return None for a gradient (torch then sends none on); `set None` is more
    likely a slip than a wish, and `zero` says it plainly."""
    assert torch_accepts("None")
    with pytest.raises(EditError, match="'None' gave NoneType, not a tensor"):
        edits.replace((torch.ones(3),), "None")


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("g.to_sparse()", "'g.to_sparse()' gave a tensor with layout torch.sparse_coo instead of torch.strided"),
        ("g.to_mkldnn()", "'g.to_mkldnn()' gave a tensor with layout torch._mkldnn instead of torch.strided"),
        ("torch.nested.nested_tensor([g])", "'torch.nested.nested_tensor([g])' gave a nested tensor"),
    ],
)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_layout_refusal_messages(expr, message):
    with pytest.raises(EditError) as info:
        edits.replace((torch.ones(3),), expr)
    assert str(info.value) == message


def test_a_value_where_the_node_receives_no_gradient_is_refused():
    with pytest.raises(EditError, match=r"gave a value at \[1\], where the node receives no gradient"):
        edits.replace((torch.ones(2), None), "(g[0], g[0])")


def test_a_fake_replacement_is_refused():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(3)
    with pytest.raises(EditError, match="gave a tensor with no values"):
        edits.replace((torch.ones(3),), "fake", {"fake": fake})


def test_refused_layout_edits_leave_the_pass_unharmed(tmp_path):
    plain = tmp_path / "plain.pt"
    run_plain(script("chain.py"), [str(plain)])
    commands = ["step", "set g.to_sparse()", "set g.to_mkldnn()", "set g.double()", "set g[None]", "continue"]
    run = run_headless(script("chain.py"), commands, [str(tmp_path / "debugged.pt")])
    assert run.status == 0, run.output
    assert [r.ok for r in run.results()] == [False] * 4
    assert "layout torch.sparse_coo instead of torch.strided" in run.results()[0].text
    assert "layout torch._mkldnn instead of torch.strided" in run.results()[1].text
    assert not run.of(ev.GradEdited)
    assert all(f.error is None for f in run.of(ev.PassFinished))
    assert torch.equal(torch.load(plain)["x"], torch.load(tmp_path / "debugged.pt")["x"])


# ---- whatever an expression raises --------------------------------------------------------

THROW = "(_ for _ in ()).throw({})"
RAISES = {
    "KeyboardInterrupt": THROW.format("KeyboardInterrupt"),
    "GeneratorExit": THROW.format("GeneratorExit"),
    "SystemExit": "exit(4)",
    "Stop": THROW.format("type('Stop', (BaseException,), {})"),  # a script's own BaseException
}


@pytest.mark.parametrize("name", sorted(RAISES))
def test_safe_eval_turns_any_base_exception_into_a_refusal(name):
    with pytest.raises(ExpressionError) as info:
        edits.safe_eval(RAISES[name], {})
    assert info.value.error.__name__ == name
    assert f"failed: {name}" in str(info.value) and info.value.detail.startswith(name)
    with pytest.raises(ExpressionError):
        edits.evaluate(RAISES[name], (torch.ones(1),))
    with pytest.raises(ExpressionError):
        edits.replace((torch.ones(1),), RAISES[name])


def test_gradtuis_own_quit_still_propagates():
    def quit_now():
        raise GradtuiQuit()

    assert not edits.raised_by_user(GradtuiQuit())
    with pytest.raises(GradtuiQuit):
        edits.safe_eval("quit_now()", {"quit_now": quit_now})
    with pytest.raises(GradtuiQuit):
        describe(type("R", (), {"__repr__": lambda self: quit_now()})())


def test_a_repr_that_raises_a_base_exception_is_shown_as_such():
    value = type("R", (), {"__repr__": lambda self: (_ for _ in ()).throw(KeyboardInterrupt)})()
    assert describe(value) == "<a R that cannot be shown: KeyboardInterrupt>"


def test_base_exceptions_in_print_set_and_why_are_refusals_and_the_run_goes_on(tmp_path):
    commands = []
    for expr in RAISES.values():
        commands += [f"print {expr}", f"set {expr}", f"why {expr}"]
    bad_repr = "type('R', (), {'__repr__': lambda s: (_ for _ in ()).throw(KeyboardInterrupt)})()"
    commands += [f"print {bad_repr}", "step", "continue"]
    run = run_headless(script("chain.py"), commands, [str(tmp_path / "g.pt")])
    assert run.status == 0, run.output
    assert run.where == [(0, 0), (0, 1)]
    results = run.results()
    assert len(results) == 3 * len(RAISES) + 1
    for i, name in enumerate(RAISES):
        printed, setted, why = results[3 * i : 3 * i + 3]
        assert not printed.ok and f"failed: {name}" in printed.text
        assert not setted.ok and f"failed: {name}" in setted.text
        assert why.ok and f"failed: {name}" in why.text  # why answers: it says what went wrong
    assert results[-1].text == "<a R that cannot be shown: KeyboardInterrupt>"
    assert not run.of(ev.GradEdited)
    assert torch.equal(torch.load(tmp_path / "g.pt")["x"], torch.tensor([36.0]))


def test_a_quit_during_a_long_expression_ends_the_run(driven, stash):
    stash["spinning"] = threading.Event()
    run = driven(script("shared_grad.py"))
    run.next(ev.Paused)
    run.submit("print spin()")
    assert stash["spinning"].wait(10.0), "the expression never started"
    assert run.runner.stop(10.0)  # the quit arrives in the middle of spin(), as an async GradtuiQuit
    finished = run.join()
    assert finished.quit
    assert not [e for e in run.events if isinstance(e, ev.CommandResult) and "GradtuiQuit" in e.text]
    assert "x.grad" not in "".join(e.text for e in run.events if isinstance(e, ev.Output))


# ---- g is a copy ---------------------------------------------------------------------------


def _x_grad(run, path) -> torch.Tensor:
    assert run.status == 0, run.output
    return torch.load(path)["x"]


@pytest.mark.parametrize(
    "expr",
    [
        "g.mul_(0)",
        "g.zero_()",
        "g.data.fill_(7)",
        "g.numpy().fill(3)",
        "g.__setitem__(0, 9)",
        "torch.nn.init.zeros_(g)",
    ],
)
def test_print_cannot_change_the_gradient(expr, tmp_path):
    """At a's node, whose gradient tensor also goes to b's: neither branch changes."""
    path = tmp_path / "g.pt"
    run = run_headless(
        script("shared_grad.py"), ["break a", "continue", f"print {expr}", "print", "continue"], [str(path)]
    )
    assert torch.equal(_x_grad(run, path), torch.full((2,), 5.0))
    assert run.results()[-1].text.endswith("values [1, 1]")  # the gradient still reads ones after it
    assert not run.of(ev.GradEdited)
    assert run.report.to_json()["edits"] == []


def test_set_with_an_in_place_change_edits_only_its_own_node(tmp_path):
    """`set g.mul_(2)` at a's node doubles a's share only (b receives the same tensor)."""
    path = tmp_path / "g.pt"
    run = run_headless(script("shared_grad.py"), ["break a", "continue", "set g.mul_(2)", "continue"], [str(path)])
    assert torch.equal(_x_grad(run, path), torch.full((2,), 3.0 + 2 * 2.0))
    (edit,) = run.of(ev.GradEdited)
    assert edit.before[0].values == (1.0, 1.0) and edit.after[0].values == (2.0, 2.0)


def test_set_g_hands_back_the_gradient_itself():
    g = torch.ones(3)
    assert edits.replace((g,), "g")[0] is g
    assert edits.replace((g, None), "(g[0], None)")[0] is g
    doubled = edits.replace((g,), "g.mul_(2)")[0]
    assert doubled is not g and torch.equal(doubled, torch.full((3,), 2.0)) and torch.equal(g, torch.ones(3))


def test_print_of_a_script_variable_is_the_scripts_own(tmp_path):
    """Only `g` is a copy: the script's own tensors are the script's, as in pdb (a copy made
    under no_grad would not require grad)."""
    path = tmp_path / "g.pt"
    run = run_headless(
        script("shared_grad.py"), ["break a", "continue", "print x.requires_grad", "continue"], [str(path)]
    )
    assert run.results()[1].text == "True"
    assert torch.equal(_x_grad(run, path), torch.full((2,), 5.0))
