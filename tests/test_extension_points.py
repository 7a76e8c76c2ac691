"""The extension points are tables, each read everywhere from one place: a breakpoint kind
registered once (a Kind subclass) is parsed, listed by `help`, on the help screen, in the CLI's
epilog and matched by the engine's breakpoint list; a command (a Command subclass with a verb) is
parsed and listed the same way. The throwaway kinds are taken out again after each test."""

from __future__ import annotations

from typing import Any

import pytest

from gradtui.protocol import breakpoints as bps
from gradtui.protocol import commands
from gradtui.protocol.nodes import NodeInfo

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def odd_kind():
    """A throwaway kind: `odd`, the nodes with an odd id."""

    class Odd(bps.Kind):
        name = "odd"
        form = "odd"

        @classmethod
        def parse(cls, text: str) -> Any:
            return None if text == "odd" else bps.NOT_MINE

        @classmethod
        def matches_node(cls, value: Any, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
            return node_id % 2 == 1

    yield Odd
    bps.unregister(Odd)


def test_a_registered_breakpoint_kind_is_parsed_listed_and_matched(odd_kind):
    from gradtui.cli.main import build_parser
    from gradtui.ui.screens.help import break_specs

    spec = bps.parse_spec("odd")
    assert bps.kind_of(spec) is odd_kind and spec.role is bps.Role.PLACE
    assert "odd" in commands.help_text() and "odd" in break_specs() and " odd " in build_parser().format_help()
    assert isinstance(commands.parse("break odd"), commands.Break)
    points = bps.Breakpoints()
    points.add(spec)
    info = NodeInfo("MulBackward0", "op", 0, (), (), None, None, None, None, None)
    assert points.find_place(info, 3, 0, False) is not None
    assert points.find_place(info, 2, 0, False) is None
    # labels stay the last resort: a name is still a label, and `odd` no longer is one
    assert bps.parse_spec("fc.weight").kind == "label"


def test_an_unregistered_kind_is_gone(odd_kind):
    bps.unregister(odd_kind)
    assert bps.parse_spec("odd").kind == "label"
    bps.register(odd_kind)  # the fixture takes it out again


def test_every_kind_is_in_help_and_every_command_parses_by_its_words():
    text = commands.help_text()
    for kind in bps.KINDS:
        assert kind.form in text
    for command in commands.COMMANDS:
        for word in (command.verb, *command.aliases):
            try:
                parsed = commands.parse(word)
            except commands.CommandError as exc:  # it needs an argument: it says which
                assert command.verb in str(exc) or "needs" in str(exc)
            else:
                assert parsed.verb == command.verb


def test_the_palette_lists_a_command_from_the_table():
    """The help screen's rows are the command table's (the palette opens the same help)."""
    from gradtui.ui.screens.help import command_rows

    usages = [usage for usage, _ in command_rows()]
    for command in commands.COMMANDS:
        if command.summary:
            assert command.help_usage() in usages


def test_a_registered_entry_point_is_patched_routed_and_restored(monkeypatch):
    """A throwaway entry point (a function on a namespace of our own) registered in the table alone
    is patched on install, its calls run as a hooked `backward` pass (the gradients equal plain
    torch's), and it is restored on uninstall."""
    import sys
    import types

    import torch

    from gradtui.engine import intercept
    from gradtui.engine.session import Session
    from gradtui.protocol import events as ev

    def run_backward(tensor: torch.Tensor) -> None:
        torch.autograd.backward(tensor)  # inside the routed call: handed over to torch, not a second pass

    namespace = types.SimpleNamespace(run_backward=run_backward)

    class Throwaway(intercept.EntryPoint):
        owner = namespace
        attribute = "run_backward"
        call = "backward"

        @classmethod
        def wrap(cls, original, route):
            def wrapped(tensor):
                return route(cls.call, sys._getframe(1), (tensor,), lambda: original(tensor))

            return wrapped

    monkeypatch.setattr(intercept, "ENTRY_POINTS", (*intercept.ENTRY_POINTS, Throwaway))
    events: list[ev.Event] = []
    torch.manual_seed(0)
    x = torch.randn(5, requires_grad=True)
    plain = x.detach().clone().requires_grad_()
    (plain.sin() * 3).sum().backward()
    session = Session(events.append, provenance=False)
    session.add_listener(
        lambda event: session.submit(commands.parse("continue")) if isinstance(event, ev.Paused) else None
    )
    with session:
        assert namespace.run_backward is not run_backward  # patched
        namespace.run_backward((x.sin() * 3).sum())
    assert namespace.run_backward is run_backward  # restored
    started = [e for e in events if isinstance(e, ev.PassStarted)]
    assert [e.call for e in started] == ["backward"]
    assert any(isinstance(e, ev.PassFinished) for e in events)
    assert torch.equal(x.grad, plain.grad)
