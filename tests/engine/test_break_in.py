"""`pause` (Ctrl-C in the UI): break in to a script that runs. The engine pauses at the next
backward node: inside the pass in flight when one is (every-node hooks, a planned pass's Python
and compiled posthooks), else at the first node of the next pass, which a break-in makes hooked
even where passes in `continue` run unhooked. Torch is the oracle of the gradients: a pass that
was broken into and continued gives what it gives without gradtui."""

from __future__ import annotations

import pytest
import torch

from gradtui.engine.session import Session
from gradtui.engine.stepper import BREAK_IN
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import compiled_hooked, compiled_off

pytestmark = pytest.mark.timeout(120)

PASSES = 12
ASK_IN = 5
"""The pass whose backward asks for the break-in, from a hook of the script's (mid-pass)."""


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(6, 6) for _ in range(6)))


def _train(model: torch.nn.Module, ask: object = None, *, in_forward: bool = False) -> list[torch.Tensor]:
    """PASSES backward passes of `model`; in pass ASK_IN the hook of the middle activation calls
    `ask()`, so the request arrives while that pass's backward is in flight (`in_forward`: before
    that pass's forward, between two passes)."""
    grads = []
    torch.manual_seed(1)
    for i in range(PASSES):
        model.zero_grad()
        if ask is not None and in_forward and i == ASK_IN:
            ask()
        x = torch.randn(4, 6)
        middle = model[:3](x)
        if ask is not None and not in_forward and i == ASK_IN:
            middle.register_hook(lambda g: ask())
        model[3:](middle).pow(2).mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).clone())
    return grads


def _driven(session: Session, events: list[ev.Event]) -> None:
    """Answer every pause with `continue` (the listener runs on the script's thread; the command
    waits in the queue for the paused hook)."""

    def on(event: ev.Event) -> None:
        events.append(event)
        if isinstance(event, ev.Paused):
            session.submit(parse("continue"))

    session.add_listener(on)


@pytest.mark.parametrize("kind", ["every node", "planned, Python hooks", "planned, compiled hooks"])
def test_a_break_in_during_a_pass_pauses_in_it(monkeypatch, kind):
    if kind == "planned, Python hooks":
        compiled_off(monkeypatch, "this test runs the Python posthooks")
    hooked = compiled_hooked(monkeypatch)
    # the UI's session: every pass hooked, light statistics; a CPU pass in continue runs on the plan
    session = Session(
        provenance=False,
        full_stats=kind == "every node",
        hook_all_passes=True,
        check_every=1 if kind == "every node" else None,
    )
    events: list[ev.Event] = []
    _driven(session, events)
    answers: list[ev.CommandResult] = []
    session.add_listener(lambda e: answers.append(e) if isinstance(e, ev.CommandResult) else None)
    with session:
        got = _train(_model(), ask=lambda: session.submit(parse("pause")))
    expected = _train(_model())
    for a, b in zip(got, expected):
        assert torch.equal(a, b)  # broken into, continued: the gradients are torch's
    pauses = [e for e in events if isinstance(e, ev.Paused)]
    assert [(p.pass_index, p.reason) for p in pauses] == [(0, "step"), (ASK_IN, BREAK_IN)]
    stop = pauses[1]
    assert 0 < stop.done < stop.total  # in the pass, after the hook's node and before its end
    assert [a.text for a in answers if a.command == "pause"] == [
        "pausing at the next node of the backward pass in flight"
    ]
    if kind == "planned, compiled hooks":
        assert hooked and all(hooked)  # the compiled posthooks ran that pass: their Python fallback stopped it


@pytest.mark.parametrize("in_forward", [True, False], ids=["in the forward", "in an unhooked pass"])
def test_a_break_in_outside_a_hooked_pass_pauses_at_the_next_pass_s_first_node(in_forward):
    """Headless passes in continue run unhooked; the next one after a `pause` is hooked and
    stops at its first node: the pass the forward makes, or the one after the unhooked pass."""
    session = Session(provenance=False, hook_all_passes=False)
    events: list[ev.Event] = []
    _driven(session, events)
    answers: list[str] = []
    session.add_listener(lambda e: answers.append(e.text) if isinstance(e, ev.CommandResult) else None)
    with session:
        got = _train(_model(), ask=lambda: session.submit(parse("pause")), in_forward=in_forward)
    for a, b in zip(got, _train(_model())):
        assert torch.equal(a, b)
    started = {e.pass_index: e.recorded for e in events if isinstance(e, ev.PassStarted)}
    assert not any(started[i] for i in range(1, ASK_IN))  # ran unhooked, at plain speed
    stop = ASK_IN if in_forward else ASK_IN + 1
    pauses = [e for e in events if isinstance(e, ev.Paused)]
    assert [(p.pass_index, p.reason, p.done) for p in pauses] == [(0, "step", 0), (stop, BREAK_IN, 0)]
    assert answers == [
        "running forward; pausing at the next backward"
        if in_forward
        else "a backward pass runs unhooked at plain speed: pausing at the first node of the next"
    ]


def test_without_a_break_in_the_planned_hooks_never_look():
    """The break-in costs a pass nothing until asked for: the planned hooks read one flag, which
    stays off (the compiled posthooks call no Python for it)."""
    session = Session(provenance=False, full_stats=False, hook_all_passes=True)
    events: list[ev.Event] = []
    _driven(session, events)
    with session:
        _train(_model())
    assert session.run_quit.flag[0] == 0 and not session.run_quit.attend
    assert [e.reason for e in events if isinstance(e, ev.Paused)] == ["step"]


def test_pause_at_a_pause_and_after_the_end():
    session = Session(provenance=False)
    results: list[ev.CommandResult] = []
    session.add_listener(lambda e: results.append(e) if isinstance(e, ev.CommandResult) else None)

    def on(event: ev.Event) -> None:
        if isinstance(event, ev.Paused):
            session.submit(parse("pause"))
            session.submit(parse("continue"))

    session.add_listener(on)
    with session:
        _train(_model())
    session.submit(parse("pause"))
    assert [(r.text, r.ok) for r in results] == [("already paused", True), ("not running: the script has ended", False)]
    assert session.run_quit.flag[0] == 0


def test_a_session_that_detaches_stops_looking_for_a_break_in():
    """Detached (headless commands ran out), the session never pauses again: a break-in that
    waited would make every planned hook call Python for the rest of the run."""
    session = Session(provenance=False, full_stats=False, hook_all_passes=True)
    session.install()
    try:
        session.submit(parse("pause"))
        assert session.run_quit.attend and session.run_quit.flag[0] == 1
        session.detach()
        assert not session.run_quit.attend and session.run_quit.flag[0] == 0
    finally:
        session.uninstall()


def test_a_break_in_before_the_script_runs_waits_for_its_first_backward():
    """A client's Ctrl-C as the script starts (its start is announced before the session is
    installed) is taken, not refused: the first pass pauses with it."""
    session = Session(provenance=False, hook_all_passes=False)
    session.run_on()  # as a run armed with breakpoints starts: in continue
    events: list[ev.Event] = []
    _driven(session, events)
    answers: list[str] = []
    session.add_listener(lambda e: answers.append(e.text) if isinstance(e, ev.CommandResult) else None)
    session.submit(parse("pause"))
    with session:
        _train(_model())
    assert answers[0] == "running forward; pausing at the next backward"
    assert [(p.pass_index, p.reason) for p in events if isinstance(p, ev.Paused)] == [(0, BREAK_IN)]
