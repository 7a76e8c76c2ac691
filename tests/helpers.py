"""Helpers the tests share: run a script plainly or under gradtui, collect its events, drive a
run from the test's thread. Imported one way, `from tests.helpers import ...` (the repository's
root is on the path: pyproject's pytest `pythonpath`); the fixtures are in tests/conftest.py.

Every wait has a timeout, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import inspect
import io
import os
import queue
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from gradtui.clients.headless import HeadlessDriver
from gradtui.engine.process.runner import ScriptRunner
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Typed, parse
from gradtui.protocol.report import Report

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "fixtures"
EXAMPLES = REPO / "benchmarks" / "examples"
RUN_TIMEOUT = 60.0
"""Seconds a script run may take before the test fails (the tiny scripts take well under 5)."""
EVENT_TIMEOUT = 10.0
"""Seconds to wait for the next event of a script driven from the test's thread."""


def compiled_off(monkeypatch, why: str) -> None:
    """gradtui's compiled library off for the rest of the test (`why`: the reason `native.load`
    gives): every read and hook goes through torch's Python calls, as on an accelerator."""
    from gradtui.engine.hooks import native

    monkeypatch.setattr(native, "load", lambda: native.Native(None, why))


def count_calls(monkeypatch, owner: Any, name: str) -> list[int]:
    """Count the calls of `owner.name` (a module's function or a class's method) for the rest of
    the test: a one-element list the count is kept in, the call still made."""
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def compiled_hooked(monkeypatch) -> list[int]:
    """For the rest of the test, per planned pass that put compiled posthooks on its nodes
    (gradtui.engine.hooks.compiled), how many nodes they hooked (each is called once per pass)."""
    from gradtui.engine.hooks.compiled import CompiledHooks

    counts: list[int] = []
    register = CompiledHooks.register

    def counted(self: Any, nodes: list[Any], ids: list[int]) -> list[int]:
        left = register(self, nodes, ids)
        counts.append(self.hooked())
        return left

    monkeypatch.setattr(CompiledHooks, "register", counted)
    return counts


def count_reads(monkeypatch, owner: type, name: str) -> list[int]:
    """Count the reads of property `owner.name` (torch.Tensor.is_meta) for the rest of the test,
    as `count_calls` counts a method's calls: each read still gets the real value."""
    reads = [0]
    descriptor = inspect.getattr_static(owner, name)

    def read(obj: Any) -> Any:
        reads[0] += 1
        return descriptor.__get__(obj, type(obj))

    monkeypatch.setattr(owner, name, property(read))
    return reads


def fed_session(feed: list[list[str]], *, nan: bool = True) -> tuple[Session, list[ev.Event]]:
    """A session that starts stepping (no provenance) and, at each pause, submits the next list of
    `feed` (then `continue` once it runs out), with a `nan` watch armed if `nan`; and its events."""
    events: list[ev.Event] = []
    session = Session(events.append, provenance=False)
    commands = iter(feed)

    def on(event: ev.Event) -> None:
        if isinstance(event, ev.Paused):
            for command in next(commands, ["continue"]):
                session.submit(parse(command))

    session.add_listener(on)
    if nan:
        session.submit(parse("break nan"))
    return session, events


def script(name: str) -> str:
    """Path of a test script in tests/fixtures."""
    path = SCRIPTS / name
    assert path.is_file(), path
    return str(path)


def example(name: str) -> str:
    """Path of an example script in benchmarks/examples."""
    path = EXAMPLES / name
    assert path.is_file(), path
    return str(path)


@dataclass
class Run:
    """Everything a headless run produced."""

    status: int | None
    events: list[ev.Event]
    report: Report
    output: str
    """What the HeadlessDriver printed (the script's own output included)."""
    session: Session
    runner: ScriptRunner

    def of(self, kind: type) -> list[Any]:
        """The events of one class, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def pauses(self) -> list[ev.Paused]:
        return self.of(ev.Paused)

    @property
    def where(self) -> list[tuple[int, int]]:
        """(pass index, node id) of every pause, in order."""
        return [(p.pass_index, p.node) for p in self.pauses]

    @property
    def finished(self) -> ev.ScriptFinished:
        done = self.of(ev.ScriptFinished)
        assert len(done) == 1, done
        return done[0]

    def results(self) -> list[ev.CommandResult]:
        return self.of(ev.CommandResult)

    def script_output(self, stream: str = "stdout") -> str:
        return "".join(e.text for e in self.of(ev.Output) if e.stream == stream)


def run_headless(
    path: str,
    commands: list[str] | tuple[str, ...] = ("continue",),
    args: list[str] | tuple[str, ...] = (),
    timeout: float = RUN_TIMEOUT,
    full_stats: bool = True,
    sole: bool = False,
    **options: Any,
) -> Run:
    """Run `path` under a Session (`options`: more Session keywords) with a HeadlessDriver
    feeding `commands` (`sole`: as `gradtui --headless` makes it), in the runner's own thread
    (the driver answers pauses on that thread); join with a timeout and check it ended."""
    session = Session(full_stats=full_stats, **options)
    events: list[ev.Event] = []
    session.add_listener(events.append)
    report = Report()
    session.add_listener(report)
    out = io.StringIO()
    session.add_listener(HeadlessDriver(session, list(commands), out, sole=sole))
    runner = ScriptRunner(path, list(args), session)
    thread = runner.start()
    thread.join(timeout)
    if thread.is_alive():
        stopped = runner.stop(5.0)
        pytest.fail(f"{path} did not end within {timeout}s (stopped: {stopped}); output:\n{out.getvalue()}")
    return Run(runner.exit_status, events, report, out.getvalue(), session, runner)


def run_plain(path: str, args: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Run `path` as `python path args` would, in this process and thread, without gradtui."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        return runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def graph_nodes(root: Any) -> list[Any]:
    """Every autograd node reachable from `root`, parents before children (breadth first, as
    graph.capture reads them)."""
    seen, order, todo = set(), [], [root]
    while todo:
        node = todo.pop(0)
        if node is None or node in seen:
            continue
        seen.add(node)
        order.append(node)
        todo.extend(fn for fn, _ in node.next_functions)
    return order


def assert_grads_identical(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]) -> None:
    """Same names, and every gradient bit-identical (torch.equal), none of them None."""
    assert sorted(expected) == sorted(actual)
    for name, want in expected.items():
        got = actual[name]
        assert want is not None and got is not None, name
        assert torch.equal(want, got), f"{name}: max diff {(want - got).abs().max().item()}"


def torch_originals() -> tuple[Any, ...]:
    """What gradtui patches while a script runs, as torch has it now."""
    return (
        torch.Tensor.backward,
        torch.autograd.backward,
        torch.autograd.grad,
        torch.nn.Module.__dict__["__call__"],
        torch.autograd.Function.__dict__["apply"],
    )


class Driven:
    """A script run in the runner's thread, driven from the test's thread with `submit`.

    Events arrive on a queue.Queue; `next(kind)` waits (with a timeout) for the next event of
    that class, keeping every event it passes in `events`.
    """

    def __init__(self, path: str, args: list[str] | tuple[str, ...] = ()) -> None:
        self.queue: queue.Queue[ev.Event] = queue.Queue()
        self.events: list[ev.Event] = []
        self.session = Session(self.queue.put)
        self.report = Report()
        self.session.add_listener(self.report)
        self.runner = ScriptRunner(path, list(args), self.session)
        self.thread = None

    def start(self) -> Driven:
        self.thread = self.runner.start()
        return self

    def next(self, kind: type = ev.Event, timeout: float = EVENT_TIMEOUT) -> Any:
        """The next event of class `kind`; fails the test after `timeout` seconds."""
        while True:
            try:
                event = self.queue.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no {kind.__name__} event within {timeout}s; got {self.events[-5:]}")
            self.events.append(event)
            if isinstance(event, kind):
                return event

    def submit(self, line: str) -> None:
        """Submit `line` as a client does: parsed once here; a line that does not parse is
        answered here (as the UI or the headless driver answers it) and never reaches the session."""
        typed = Typed.of(line)
        if typed.command is None:
            self.queue.put(ev.CommandResult(line, typed.error or "", ok=False))
        else:
            self.session.submit(typed.command)

    def result(self) -> ev.CommandResult:
        return self.next(ev.CommandResult)

    def join(self, timeout: float = RUN_TIMEOUT) -> ev.ScriptFinished:
        """Wait for the script to end; return its ScriptFinished event."""
        assert self.thread is not None
        self.thread.join(timeout)
        if self.thread.is_alive():
            stopped = self.runner.stop(5.0)
            pytest.fail(f"the script did not end within {timeout}s (stopped: {stopped})")
        return self.next(ev.ScriptFinished, timeout=1.0)

    def stop(self) -> None:
        """Make sure the script thread is gone (for the end of a failing test)."""
        if self.thread is not None and self.thread.is_alive():
            self.runner.stop(5.0)


@dataclass
class Chain:
    """The smallest graph: z = (x * 3) ** 2 at x = 2, captured live (nodes 0..2)."""

    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor
    scope: dict[str, Any] = field(default_factory=dict)
