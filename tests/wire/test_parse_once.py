"""A typed line is parsed once, where it enters (the client), and travels as its command.

Through a whole exchange in this process (an agent built as every mode builds one, serving a
session over a socketpair; the headless client that `gradtui attach --headless` runs driving it)
every call of the parser, wherever it was imported, is counted: each line is parsed exactly
once, a `break`'s spec too (by the client, with its line: the breakpoint is made of the parsed
spec, not of its text parsed again), and a line that does not parse is answered by the client in the parser's words and never
reaches the agent or the engine. A frame whose command is not one of the table's ends the
connection before anything reaches the engine. The UI reading the breakpoints back (its state, the
node list's markers) parses no spec again: each arrives parsed, in the event."""

from __future__ import annotations

import asyncio
import io
import secrets
import socket
import sys
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import msgspec
import pytest
import torch
from rich.style import Style

from gradtui.agent.build import Transport, build_agent
from gradtui.cli.options import drive_headless
from gradtui.protocol import breakpoints, commands
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Break, Command, Print, Step, Typed
from gradtui.protocol.nodes import node_info
from gradtui.protocol.options import RunOptions
from gradtui.ui.state import UIState
from gradtui.ui.widgets.node_rows import RowPainter, Widths
from gradtui.wire import frames, protocol
from gradtui.wire.client import RemoteTarget

pytestmark = pytest.mark.timeout(60)

WAIT = 20.0
"""Seconds the script's thread may take (a backward of three nodes, and the client's turns)."""


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every call of the command parser from now on, by line: the parser is replaced in every
    gradtui module that holds it (each imported it by name)."""
    return _count(monkeypatch, "parse", commands.parse)


def _count_spec_parses(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every call of the breakpoint spec parser from now on, by spec, wherever it was imported."""
    return _count(monkeypatch, "parse_spec", breakpoints.parse_spec)


def _count(monkeypatch: pytest.MonkeyPatch, name: str, original: Callable[[str], Any]) -> Counter[str]:
    """Every call of `original` (held as `name` by gradtui modules) from now on, by its text."""
    counts: Counter[str] = Counter()

    def counting(text: str) -> Any:
        counts[text] += 1
        return original(text)

    held = [module for key, module in list(sys.modules.items()) if key.startswith("gradtui")]
    held = [module for module in held if getattr(module, name, None) is original]
    assert held  # the parser is where this test looks for it
    for module in held:
        monkeypatch.setattr(module, name, counting)
    return counts


def _served_agent(monkeypatch: pytest.MonkeyPatch, token: str):
    """An agent as every mode builds one (its server, its command path), the commands that reach
    its session noted, and the client's end of its connection."""
    agent = build_agent(RunOptions("s.py"), Transport(token), lambda: None)
    reached: list[Command] = []
    submit = agent.session.submit

    def noting(command: Command, request: int | None = None) -> None:
        reached.append(command)
        submit(command, request)

    monkeypatch.setattr(agent.session, "submit", noting)
    ours, theirs = socket.socketpair()
    assert agent.server is not None
    agent.server.start()
    agent.server.serve_connection(theirs)
    return agent, reached, ours


def _backward(agent, grads: list[torch.Tensor]) -> threading.Thread:
    """z = (3x)^2 at x = 2, backward under the agent's session, on a thread of its own."""

    def run() -> None:
        with agent.session:
            x = torch.tensor([2.0], requires_grad=True)
            ((x * 3) ** 2).backward()
            grads.append(x.grad.clone())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_every_line_is_parsed_once_by_the_client_and_a_bad_one_never_reaches_the_engine(monkeypatch):
    counts = _count_parses(monkeypatch)
    spec_counts = _count_spec_parses(monkeypatch)
    token = secrets.token_urlsafe(16)
    agent, reached, ours = _served_agent(monkeypatch, token)
    grads: list[torch.Tensor] = []
    thread = _backward(agent, grads)
    lines = ["frobnicate", "print", "break nan", "break model.py:9", "step", "print"]
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            status = asyncio.run(
                asyncio.wait_for(drive_headless(RemoteTarget(token, sock=ours), lines, prog="test"), WAIT)
            )
        thread.join(WAIT)
        assert not thread.is_alive(), "the script did not run on once its client detached"
    finally:
        agent.server.close(timeout=1.0)
        agent.outputs.close()
    said = out.getvalue()
    assert status == 0, said
    assert counts == Counter(lines), counts  # once each, the bad line too: by the client
    assert spec_counts == Counter(["nan", "model.py:9"]), spec_counts  # each spec once, with its line
    assert [type(c) for c in reached] == [Print, Break, Break, Step, Print], reached
    made = [bp.spec for bp in agent.session.breakpoints]  # the engine's breakpoints: the specs as parsed
    assert made == [breakpoints.parse_spec("nan"), breakpoints.parse_spec("model.py:9")]
    assert [c.text for c in reached] == lines[1:]  # each keeps its text, for the echo and the answer
    with pytest.raises(commands.CommandError) as refused:
        commands.parse("frobnicate")
    assert f"error: {refused.value}" in said  # answered where it was typed, in the parser's words
    x = torch.tensor([2.0], requires_grad=True)
    ((x * 3) ** 2).backward()
    assert len(grads) == 1 and torch.equal(grads[0], x.grad)  # the run itself as plain torch's


def test_a_frame_whose_command_is_not_one_of_the_tables_ends_the_connection_and_reaches_nothing(monkeypatch):
    token = secrets.token_urlsafe(16)
    agent, reached, ours = _served_agent(monkeypatch, token)
    heard: list[ev.Event] = []
    agent.session.add_listener(heard.append)
    try:
        ours.settimeout(WAIT)
        protocol.check_hello(protocol.read_frame(ours))
        ours.sendall(protocol.encode({"auth": token, "version": protocol.VERSION}))
        assert "welcome" in (protocol.read_frame(ours) or {})
        unknown = msgspec.msgpack.encode({"type": "Frobnicate", "text": "frobnicate"})
        ours.sendall(frames.encode(frames.Submit(msgspec.Raw(unknown), 1)))
        while protocol.read_frame(ours) is not None:  # the agent closes this connection
            pass
    finally:
        agent.server.close(timeout=1.0)
        agent.outputs.close()
        ours.close()
    assert reached == [] and not [e for e in heard if isinstance(e, ev.CommandResult)]


def test_the_ui_reads_the_breakpoints_as_the_client_parsed_them_and_parses_none_again(monkeypatch):
    """The UI's state applies the agent's BreakpointsChanged and the node list paints its markers
    from the specs in the event: the only parses are the client's, one per typed line."""
    spec_counts = _count_spec_parses(monkeypatch)
    token = secrets.token_urlsafe(16)
    agent, reached, ours = _served_agent(monkeypatch, token)
    grads: list[torch.Tensor] = []
    thread = _backward(agent, grads)
    specs = ["MulBackward0", "nan", "s.py:9"]
    state = UIState("s.py")
    armed: list[tuple[ev.BreakpointInfo, ...]] = []

    async def exchange() -> None:
        target = RemoteTarget(token, sock=ours)
        await target.start()
        for spec in specs:
            command = Typed.of(f"break {spec}").command
            assert command is not None
            target.submit(command)
        async for batch in target.batches():
            for event in batch:
                state.apply(event)
            if not armed and len(state.breakpoints) == len(specs) and state.paused is not None:
                armed.append(state.breakpoints)
                for line in ("delete all", "continue"):  # the script runs to its end once we leave
                    command = Typed.of(line).command
                    assert command is not None
                    target.submit(command)
            elif armed and not state.breakpoints:
                break
        await target.detach()

    try:
        asyncio.run(asyncio.wait_for(exchange(), WAIT))
        thread.join(WAIT)
        assert not thread.is_alive(), "the script did not run on once its client detached"
    finally:
        agent.server.close(timeout=1.0)
        agent.outputs.close()
    (shown,) = armed
    assert [b.spec for b in shown] == [breakpoints.parse_spec(s) for s in specs]
    view = state.view
    assert view is not None
    painter = RowPainter(lambda name: Style())
    painter.widths = Widths.of(view)
    rows = {
        node: "".join(s.text for s in painter.node_row(view, node, 60, Style(), None, shown)) for node in view.order
    }
    marked = {node for node, row in rows.items() if row.rstrip().endswith("●")}
    assert marked and marked == {n for n in view.order if node_info(view.graph, n).name == "MulBackward0"}
    spec_counts.subtract(specs)  # the oracle's own parses above
    assert +spec_counts == Counter(specs), spec_counts  # each spec once: by the client, with its line
