"""Every in-process helper the tests share, in one module (the helpers that start processes are
tests/processes.py; the fixtures are in tests/conftest.py). Imported one way, `from tests.helpers
import ...` (the repository's root is on the path: pyproject's pytest `pythonpath`).

- Paths and timeouts: `script`, `example`, `RUN_TIMEOUT`, `EVENT_TIMEOUT`, `REPLAY_TIMEOUT`.
- Counting what the code does: `count_calls`, `count_reads`, `compiled_off`, `compiled_hooked`,
  `HostReads` (the calls that read a tensor back to the host; the bench counts them too).
- Running a script under a Session in this process: `run_headless` (a `Run`), `Driven` (driven
  from the test's thread), `fed_session`, `run_plain` (the plain run, torch's oracle),
  `QuietSession` (for the torchrun hub's unit tests), `torch_originals`, `graph_nodes`, `Chain`.
- Events: `of`, `output_of`, and events built by hand for tests that need no torch run
  (`graph_of`, `MLP`, `started`, `ran`, `finished`, `flow_row`, `run_mlp_pass`, `stats`);
  `walk_of` (a recorded pass's order, read from its SQLite file).
- Comparing with torch: `same`, `assert_grads_identical`, `grads`, `assert_same_grads`.
- One pass built in the test (`run_pass` under gradtui, `plain_pass` without), and the cases
  the hook plan's tests and the CUDA tests share (`PLAN_KINDS`, `nan_case`, `encoder_case`,
  `same_stats`); the OpInfo samples' run and check (`fresh_sample`, `check_outcome`, ...).
- The UI under Textual's Pilot: `SIZE`, `wait_for`, `wait_paused_at`, `settle`,
  `footer_of_the_modal`, `finish_into_pass_1`, what the panes show (`selected`, `detail_text`,
  `graph_text`, `row_text`, `output_lines`, `answer_text`, `plot_lines`, `colored_cells`,
  `highlighted`), typing (`type_text`), `FakeTarget`.
  Textual is imported inside these helpers, never at this module's import, so the engine's tests
  that use the rest run without it.

Every wait has a timeout, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import io
import math
import os
import queue
import runpy
import shutil
import socket
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import pytest
import torch
from torch.utils._pytree import tree_leaves

import gradtui
from gradtui.clients.headless import HeadlessDriver
from gradtui.engine.process.runner import ScriptRunner
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command, Typed, parse
from gradtui.protocol.nodes import NodeInfo
from gradtui.protocol.report import Report
from gradtui.protocol.stats import Stats
from gradtui.wire.target import TargetInfo

if TYPE_CHECKING:
    from textual.pilot import Pilot

    from gradtui.agent.build import Agent
    from gradtui.ui.app import GradtuiApp
    from gradtui.ui.widgets.plots import SeriesPlot

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "fixtures"
"""Every script a test runs (the torchrun jobs' in distributed/, the UI's in ui/, ...)."""
EXAMPLES = REPO / "benchmarks" / "examples"
RUN_TIMEOUT = 60.0
"""Seconds a script run in this process may take before the test fails (the tiny scripts take
well under 5); a run in a process of its own has tests/processes.py's PROCESS_TIMEOUT."""
EVENT_TIMEOUT = 10.0
"""Seconds to wait for the next event of a script driven from the test's thread."""
REPLAY_TIMEOUT = 5.0
"""Seconds a replay may take to answer one command (it answers at once: a bound, not a timing)."""


def script(name: str) -> str:
    """Path of a test script in tests/fixtures (`ui/crashes.py`: one in a subfolder)."""
    path = SCRIPTS / name
    assert path.is_file(), path
    return str(path)


def example(name: str) -> str:
    """Path of an example script in benchmarks/examples."""
    path = EXAMPLES / name
    assert path.is_file(), path
    return str(path)


# Counting what the code does ------------------------------------------------------------------


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


class InterruptingText(str):
    """Text whose first binding into SQLite raises KeyboardInterrupt: a SIGINT landing in the middle
    of the recorder's `executemany` (its next bindings give the text). Made by `interrupting`."""

    armed: bool


def _bind_interrupting(text: InterruptingText) -> str:
    if text.armed:
        text.armed = False
        raise KeyboardInterrupt
    return str(text)


def interrupting(text: str) -> InterruptingText:
    """`text`, armed to interrupt the first SQLite statement that binds it (see `InterruptingText`)."""
    sqlite3.register_adapter(InterruptingText, _bind_interrupting)
    armed = InterruptingText(text)
    armed.armed = True
    return armed


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


_ALWAYS = ("item", "tolist", "__float__", "__bool__", "__int__", "__index__", "nonzero", "numpy")
"""Methods that read values back to the host whatever the tensor's device."""
_DEVICE_ONLY = ("cpu",)
"""Methods that read back only for a tensor that is not on the CPU already."""


class HostReads:
    """Counts host reads made on the threads it watches while active (`with HostReads() as r:`).

    `counts` maps a method name to its number of calls; `total` sums them. Only the calls made
    on `threads` (default: the thread that entered the probe) are counted, so a UI or a test
    runner reading tensors meanwhile does not skew a pass's figure. A read made inside another
    counted read (torch's `__bool__` calling `item`) counts once.
    """

    def __init__(self, threads: set[int] | None = None) -> None:
        self.counts: Counter[str] = Counter()
        self._threads = threads
        self._originals: dict[str, Any] = {}
        self._inside = threading.local()

    @property
    def total(self) -> int:
        """All host reads counted so far."""
        return sum(self.counts.values())

    def reset(self) -> None:
        """Start counting from zero again."""
        self.counts.clear()

    def __enter__(self) -> HostReads:
        if self._threads is None:
            self._threads = {threading.get_ident()}
        for name in _ALWAYS + _DEVICE_ONLY:
            original = getattr(torch.Tensor, name)
            self._originals[name] = original
            setattr(torch.Tensor, name, self._counting(name, original, device_only=name in _DEVICE_ONLY))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        self._originals.clear()

    def _counting(self, name: str, original: Any, device_only: bool) -> Any:
        counts, threads, inside = self.counts, self._threads, self._inside

        @functools.wraps(original)
        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "depth", 0) or threading.get_ident() not in threads:  # type: ignore[operator]
                return original(tensor, *args, **kwargs)
            if not (device_only and tensor.device.type == "cpu"):
                counts[name] += 1
            inside.depth = 1
            try:
                return original(tensor, *args, **kwargs)
            finally:
                inside.depth = 0

        return counted


# Running a script under a Session in this process ---------------------------------------------


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
        return of(self.events, kind)

    @property
    def pauses(self) -> list[ev.Paused]:
        """Every Paused event, in order."""
        return self.of(ev.Paused)

    @property
    def where(self) -> list[tuple[int, int]]:
        """(pass index, node id) of every pause, in order."""
        return [(p.pass_index, p.node) for p in self.pauses]

    @property
    def finished(self) -> ev.ScriptFinished:
        """The run's one ScriptFinished event."""
        done = self.of(ev.ScriptFinished)
        assert len(done) == 1, done
        return done[0]

    def results(self) -> list[ev.CommandResult]:
        """Every command's answer, in order."""
        return self.of(ev.CommandResult)


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
        """Start the script in the runner's thread."""
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
        """The next command's answer."""
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


class QuietSession:
    """The session a torchrun job's RankLink or JobHub unit test gives them: never quitting or paused, no
    breakpoints, its events dropped."""

    quitting = False
    paused = False
    breakpoints = ()

    def emit(self, event: ev.Event) -> None:
        """Drop the event."""


def torch_originals() -> tuple[Any, ...]:
    """What gradtui patches while a script runs, as torch has it now."""
    return (
        torch.Tensor.backward,
        torch.autograd.backward,
        torch.autograd.grad,
        torch.nn.Module.__dict__["__call__"],
        torch.autograd.Function.__dict__["apply"],
    )


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


# Events ----------------------------------------------------------------------------------------


def of(events: list[ev.Event], kind: type) -> list[Any]:
    """The events of one class, in order."""
    return [e for e in events if isinstance(e, kind)]


def output_of(events: list[ev.Event], stream: str = "stdout") -> str:
    """What the script wrote to one stream."""
    return "".join(e.text for e in events if isinstance(e, ev.Output) and e.stream == stream)


def stats(norm: float, nonfinite: int = 0) -> Stats:
    """Light stats of a [1] float32 gradient with this norm."""
    return Stats(
        shape=(1,), dtype="float32", device="cpu", norm=norm, min=None, max=None, mean=None, nonfinite=nonfinite
    )


def graph_of(nodes: list[tuple[str, str | None, str | None, tuple[int | None, ...]]]) -> nx.DiGraph:
    """A pass graph from (op name, module, param, next ids) per node id; seq makes id order the engine order."""
    graph = nx.DiGraph()
    for i, (name, module, param, nxt) in enumerate(nodes):
        graph.add_node(
            i,
            info=NodeInfo(
                name,
                "accumulate" if name == "AccumulateGrad" else "op",
                10**6 - i,
                tuple(nxt),
                param=param,
                module=module,
            ),
        )
    for i, (_, _, _, nxt) in enumerate(nodes):
        for slot, target in enumerate(nxt):
            if target is not None:
                graph.add_edge(i, target, slot=slot)
    return graph


MLP = [
    ("MseLossBackward0", None, None, (1,)),  # 0
    ("AddmmBackward0", "fc2", None, (2, 3, 4)),  # 1
    ("AccumulateGrad", None, "fc2.bias", ()),  # 2
    ("TanhBackward0", "act", None, (5,)),  # 3
    ("TBackward0", "fc2", None, (6,)),  # 4
    ("AddmmBackward0", "fc1", None, (7, None, 8)),  # 5
    ("AccumulateGrad", None, "fc2.weight", ()),  # 6
    ("AccumulateGrad", None, "fc1.bias", ()),  # 7
    ("TBackward0", "fc1", None, (9,)),  # 8
    ("AccumulateGrad", None, "fc1.weight", ()),  # 9
]
"""A two-layer MLP's pass: loss <- fc2 <- act <- fc1."""


def started(index: int, nodes=MLP, losses=(1.5,), recorded: bool = True) -> ev.PassStarted:
    """PassStarted of a pass with this graph (an empty one when not recorded)."""
    graph = graph_of(nodes) if recorded else nx.DiGraph()
    return ev.PassStarted(
        index,
        "backward",
        "loss.backward()",
        "train.py:9",
        graph,
        roots=(0,) if recorded else (),
        losses=tuple(losses),
        recorded=recorded,
    )


def ran(
    index: int, node: int, order: int, incoming: float, outgoing: tuple[float | None, ...] = (), nonfinite: int = 0
) -> ev.NodeRan:
    """NodeRan with one incoming gradient of norm `incoming` and these outgoing norms."""
    return ev.NodeRan(
        index, node, order, (stats(incoming, nonfinite),), tuple(None if n is None else stats(n) for n in outgoing)
    )


def flow_row(name: str, grad: float | None, weight: float, nonfinite: int = 0) -> ev.ParamFlow:
    """A ParamFlow row."""
    ratio = None if grad is None else (grad / weight if weight else float("inf"))
    return ev.ParamFlow(name, None, (4,), grad, weight, ratio, nonfinite)


def finished(index: int, total: int = len(MLP), flow: tuple[ev.ParamFlow, ...] = ()) -> ev.PassFinished:
    """PassFinished with this flow."""
    return ev.PassFinished(index, total, total, flow=flow)


def run_mlp_pass(index: int, scale: float = 1.0, flow: tuple[ev.ParamFlow, ...] = ()) -> list[ev.Event]:
    """Every event of one MLP pass; incoming norm of node i is `scale * (i + 1)`."""
    out: list[ev.Event] = [started(index, losses=(scale,))]
    for order, (i, (_, _, _, nxt)) in enumerate(enumerate(MLP), 1):
        out.append(ran(index, i, order, scale * (i + 1), tuple(None if t is None else scale for t in nxt)))
    out.append(finished(index, flow=flow))
    return out


def walk_of(db: str, index: int) -> list[int]:
    """The nodes of pass `index` that ran, in engine order, as the recording `db` says."""
    connection = sqlite3.connect(db)
    try:
        return [
            r[0]
            for r in connection.execute(
                "SELECT id FROM nodes WHERE pass = ? AND ord IS NOT NULL ORDER BY ord", (index,)
            )
        ]
    finally:
        connection.close()


# Comparing with torch --------------------------------------------------------------------------


def assert_grads_identical(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]) -> None:
    """Same names, and every gradient bit-identical (torch.equal), none of them None."""
    assert sorted(expected) == sorted(actual)
    for name, want in expected.items():
        got = actual[name]
        assert want is not None and got is not None, name
        assert torch.equal(want, got), f"{name}: max diff {(want - got).abs().max().item()}"


def grads(folder: Path, step: int, rank: int) -> dict[str, torch.Tensor]:
    """The gradients the test script saved for (step, rank)."""
    return torch.load(folder / f"grads{step}-{rank}.pt")


def one_changed(shape: tuple[int, ...], kind: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A random float64 value of `shape` and a copy with one element (+10), one row (+1) or one
    column (+1) of its 2-D form changed (`kind`: "element", "row", "column"), drawn from
    `generator`: the sparse differences a fingerprint must still see."""
    a = torch.randn(shape, generator=generator, dtype=torch.float64)
    b = a.clone()
    m = b.view(-1, shape[-1])
    r = int(torch.randint(m.shape[0], (), generator=generator))
    c = int(torch.randint(m.shape[1], (), generator=generator))
    match kind:
        case "element":
            m[r, c] += 10.0
        case "row":
            m[r] += 1.0
        case _:
            m[:, c] += 1.0
    return a, b


def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Exactly equal, NaN where NaN: the same dtype and shape, NaN at the same places and every
    other value equal (None only as None; sparse compared dense; DTensor local shards as they are)."""
    if a is None or b is None:
        return a is b
    a, b = getattr(a, "to_local", lambda: a)(), getattr(b, "to_local", lambda: b)()
    if a.layout != torch.strided or b.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.isnan(), b.isnan())
        and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    )


def assert_same_grads(mine: Path, theirs: Path, steps: tuple[int, ...] = (0, 1)) -> None:
    """Every (step, rank)'s saved gradients in `mine` equal those in `theirs` exactly."""
    for step in steps:
        for rank in (0, 1):
            a, b = grads(mine, step, rank), grads(theirs, step, rank)
            assert a.keys() == b.keys() and all(same(a[k], b[k]) for k in a), (step, rank)


# Passes the hook plan's tests build (tests/engine/hooks; the CUDA tests run them on a GPU) ---------


def run_pass(build, commands=(), *, watch=True, full=False, check_every=None):
    """Run one pass of `build()` (-> (leaves, loss)) under a session that starts in continue."""
    events: list[ev.Event] = []
    session = Session(events.append, provenance=False, full_stats=full, check_every=check_every)
    feed = iter(commands)

    def on(event):
        if isinstance(event, ev.Paused):
            for command in feed:
                session.submit(parse(command))
                if command in ("continue", "step"):
                    return
            session.submit(parse("continue"))

    session.add_listener(on)
    session.run_on()
    if watch:
        session.submit(parse("break nan"))
    with session:  # built under the session, as a script's forward is (its hooks are seen)
        leaves, loss = build()
        loss.backward()
    return events, leaves


def plain_pass(build):
    """The same pass without gradtui: torch's oracle; the leaves, their gradients filled."""
    leaves, loss = build()
    loss.backward()
    return leaves


PLAN_KINDS = {  # name: (forward op, the backward node it makes)
    "view": (lambda t: t.view(-1), "ViewBackward0"),
    "reshape": (lambda t: t.t().reshape(-1), "UnsafeViewBackward0"),
    "transpose": (lambda t: t.transpose(0, 1), "TransposeBackward0"),
    "T": (lambda t: t.t(), "TBackward0"),
    "permute": (lambda t: t.unsqueeze(2).permute(2, 0, 1), "PermuteBackward0"),
    "select": (lambda t: t.select(0, 1), "SelectBackward0"),
    "clone": (lambda t: t.clone(), "CloneBackward0"),
    "squeeze": (lambda t: t.unsqueeze(0).squeeze(0), "SqueezeBackward1"),
    "unsqueeze": (lambda t: t.unsqueeze(1), "UnsqueezeBackward0"),
    # negative dims: what these send on is shaped from what they receive (engine/plan.py, sent_shape)
    "mT": (lambda t: t.unsqueeze(0).mT, "TransposeBackward0"),
    "permute-negative": (lambda t: t.unsqueeze(0).permute(-1, 0, 1), "PermuteBackward0"),
    "unsqueeze-negative": (lambda t: t.unsqueeze(-1), "UnsqueezeBackward0"),
    # pass-through (engine/plan.py, SIGNS): what arrives, or its negation, on every input
    "add": (lambda t: t + t * 0.5, "AddBackward0"),
    "add-detached": (lambda t: t + t.detach(), "AddBackward0"),
    "sub": (lambda t: t - t * 0.5, "SubBackward0"),
    "rsub": (lambda t: torch.rsub(t, t * 0.5), "RsubBackward0"),
    "neg": (lambda t: -t, "NegBackward0"),
}


PLAN_SIZES = {"small": (4, 3), "big": (12, 16)}
"""Leaf shapes the hook-plan cases run at."""


def plan_leaf(shape):
    """A seeded leaf of `shape` with a zero in every row (sqrt's backward makes NaN there)."""
    torch.manual_seed(0)
    x = torch.rand(*shape) + 0.5
    x[:, 0] = 0.0  # a zero in every row: sqrt's backward makes NaN there if no gradient arrives
    return x.requires_grad_()


def nan_case(kind, where, size="small"):
    """A pass with the kind's node and a NaN made just before it (its producer's `sqrt`), just
    after it (the `sqrt` it sends to) or at it (a user hook on the tensor its forward made)."""
    op, _ = PLAN_KINDS[kind]

    def build():
        x = plan_leaf(PLAN_SIZES[size])
        if where == "after":
            z = op(x.sqrt())
        else:
            z = op(x * 1.0)
            if where == "at":
                z.register_hook(lambda g: g * torch.where(torch.arange(g.numel()).reshape(g.shape) == 1, math.nan, 1.0))
                return [x], (z * 2.0).sum()
            z = z.sqrt()
        mask = (z.detach() != 0).to(z.dtype)
        return [x], (z * mask).sum()

    return build


def _same_number(a: float | None, b: float | None) -> bool:
    """Bit for bit (NaN where NaN, the sign of a zero too)."""
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def same_stats(a, b) -> bool:
    """Two Stats alike field by field, every number bit for bit (the compiled and the Python
    posthooks must agree exactly)."""
    if a is None or b is None:
        return a is b
    fields = ("norm", "min", "max", "mean")
    return (
        (a.shape, a.dtype, a.device, a.nonfinite, a.unreadable)
        == (b.shape, b.dtype, b.device, b.nonfinite, b.unreadable)
        and all(_same_number(getattr(a, f), getattr(b, f)) for f in fields)
        and (a.values is None) == (b.values is None)
        and all(_same_number(u, v) for u, v in zip(a.values or (), b.values or (), strict=True))
        and all(_same_number(u, v) for u, v in zip(a.preview, b.preview, strict=True))
    )


def encoder_case(case):
    """Five cases on a 2-layer encoder (residual adds, attention, layer norms)."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_models import transformer

    model = transformer(2, 16)
    data = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))

    def build():
        x = data
        if case == "overflow":
            x = data * 1e18  # finite forward, a float32 overflow on the way back
        hidden = []
        handle = model.layers[1].linear1.register_forward_hook(lambda m, i, o: hidden.append(o))
        out = model(x)
        handle.remove()
        match case:
            case "masked-inf":
                out = out.masked_fill(torch.arange(16) == 3, -math.inf).softmax(-1)
            case "masked-nan":
                out = torch.where(out > 0, out.sqrt(), out)  # sqrt of negatives: NaN where masked
            case "deep":  # a NaN made on the way back inside the second layer, by a user's tensor hook
                hidden[0].register_hook(lambda g: g.index_fill(-1, torch.tensor([2]), math.nan))
        loss = out.pow(2).mean() * (1e30 if case == "overflow" else 1.0)
        return list(model.parameters()), loss

    return build


# OpInfo samples (tests/engine/test_opinfo.py; tests/cuda runs them on a GPU) --------------------


ZERO_TENSOR_OPS = [
    "sgn",
    "abs",
    "nn.functional.normalize",
    "nn.functional.softsign",
    "nn.functional.l1_loss",
    "nn.functional.smooth_l1_loss",
    "nn.functional.pairwise_distance",
    "norm",
    "linalg.norm",
    "linalg.vector_norm",
    "linalg.matrix_norm",
    "linalg.eigh",
    "linalg.svd",
    "special.i0e",
    "special.i1e",
    "nn.functional.huber_loss",
]
"""Ops whose backward (first or second) sends a ZeroTensor."""


def fresh_sample(sample: Any) -> Any:
    """The sample with new leaf tensors (same values), so every run starts from scratch."""
    return sample.transform(
        lambda t: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
    )


def sample_leaves(sample: Any) -> list[torch.Tensor]:
    """The sample's tensors that require grad (input, args, kwargs), in order."""
    return [
        t
        for t in tree_leaves((sample.input, sample.args, sample.kwargs))
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]


Outcome = tuple[str, Any]
"""("grads", tensors) or ("raised", the exception's class name)."""


def check_outcome(name: str, plain: Outcome, debugged: Outcome, events: list[ev.Event]) -> None:
    """The run under gradtui ended as the plain one did (the same exception, or the same
    gradients by `same`), and no pass failed under gradtui only."""
    assert plain[0] == debugged[0], f"{name}: plain {plain}, under gradtui {debugged}"
    if plain[0] == "raised":
        assert plain[1] == debugged[1], name
        return
    assert (plain[1] is None) == (debugged[1] is None), name
    for i, (want, got) in enumerate(zip(plain[1] or (), debugged[1] or (), strict=True)):
        assert same(want, got), f"{name}: gradient {i} differs"
    for e in events:
        if isinstance(e, ev.PassFinished):
            assert e.error is None, f"{name}: pass {e.pass_index} failed under gradtui only: {e.error}"


# The UI under Textual's Pilot -----------------------------------------------------------------

SIZE = (120, 40)


async def wait_for(pilot: Pilot, predicate: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    """Let the app run until `predicate()` is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            app = pilot.app
            state = getattr(app, "state", None)
            status = state.status_text() if state is not None else "?"
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate} (app: {status})")
        await pilot.pause(0.02)


async def wait_paused_at(pilot: Pilot, node: int, timeout: float = 30) -> None:
    """Wait until the engine is paused at `node` and the app has drawn it."""
    app: GradtuiApp = pilot.app  # type: ignore[assignment]
    await wait_for(pilot, lambda: app.state.current == node and selected(app) == node, timeout, f"a pause at #{node}")
    await pilot.pause()


async def settle(pilot: Pilot) -> None:
    """Let the app finish what it scheduled (its animations too) before a snapshot is taken:
    an output pane that follows its end scrolls there after the next refresh, which a loaded
    machine may not have drawn yet (the picture then shows the pane's older lines). Only the
    panes of the screen on top: one under another screen is not laid out again."""
    from gradtui.ui.widgets.output_log import OutputLog

    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await wait_for(
        pilot,
        lambda: all(log.scroll_y >= log.max_scroll_y for log in pilot.app.screen.query(OutputLog) if log.follow),
        what="the output pane at its end",
    )
    await pilot.pause()


async def footer_of_the_modal(pilot: Pilot) -> None:
    """Under a modal screen the footer recomposes to that screen's keys a moment later: wait
    for it (else the picture has the main screen's keys one run and the modal's the next)."""
    from textual.widgets._footer import FooterKey

    await wait_for(
        pilot,
        lambda: not any(key.action == "step" for key in pilot.app.query(FooterKey)),
        what="the footer of the modal screen",
    )


def selected(app: GradtuiApp) -> int | None:
    """The node selected in the node list."""
    from gradtui.ui.widgets.node_list import NodeList

    return app.query_one(NodeList).selected


def detail_text(app: GradtuiApp) -> str:
    """The plain text of the detail pane."""
    from textual.widgets import Static

    from gradtui.ui.widgets.detail import DetailPane

    return str(app.query_one(DetailPane).query_one("#detail-body", Static).visual)


def graph_text(app: GradtuiApp) -> str:
    """The plain text of the graph pane."""
    from textual.widgets import Static

    from gradtui.ui.widgets.graph_view import GraphPane

    return str(app.query_one(GraphPane).query_one("#graph-body", Static).visual)


def row_text(app: GradtuiApp, node: int) -> str:
    """The node list row of `node`, as text (it must be on screen)."""
    from gradtui.ui.widgets.node_list import NodeList

    nodes = app.query_one(NodeList)
    row = app.state.view.row[node]
    y = row - round(nodes.scroll_offset.y)
    assert 0 <= y < nodes.size.height, f"row of #{node} is off screen"
    return nodes.render_line(y).text


def output_lines(app: GradtuiApp) -> list[str]:
    """Every line of the output pane, as plain text."""
    from gradtui.ui.widgets.output_log import OutputLog

    return app.query_one(OutputLog).plain_lines()


async def finish_into_pass_1(pilot: Pilot) -> None:
    """From the first pause of pass 0: `f`, then wait for pass 1's first pause to be drawn."""
    app = pilot.app
    await wait_paused_at(pilot, 0)
    await pilot.press("f")
    await wait_for(
        pilot,
        lambda: app.state.paused is not None and app.state.paused.pass_index == 1,
        what="the first pause of pass 1",
    )
    await wait_paused_at(pilot, app.state.paused.node)


def plot_lines(plot: SeriesPlot) -> list[str]:
    """A plot's rows on screen, as text."""
    return [plot.render_line(y).text for y in range(plot.size.height)]


def colored_cells(plot: SeriesPlot, color: str) -> int:
    """Cells of the plot drawn in `color` (a Rich color name: plotext's red is `color(1)`)."""
    count = 0
    for y in range(plot.size.height):
        for segment in plot.render_line(y):
            style = segment.style
            if style is not None and style.color is not None and style.color.name == color and segment.text.strip():
                count += len(segment.text.strip())
    return count


def answer_text(app: GradtuiApp) -> str:
    """The command bar's answer line, as text."""
    from gradtui.ui.widgets.command_bar import CommandBar

    return str(app.query_one(CommandBar).query_one("#answer").visual)


async def type_text(pilot: Pilot, text: str) -> None:
    """Type `text` key by key."""
    from textual.keys import _character_to_key

    await pilot.press(*[_character_to_key(ch) for ch in text])


def highlighted(palette: Any) -> str | None:
    """The title of the command the palette's list highlights (what enter runs), if any."""
    from textual.command import CommandList

    commands = palette.query_one(CommandList)
    if commands.highlighted is None or not commands.option_count:
        return None
    return str(commands.get_option_at_index(commands.highlighted).hit.text)


class FakeTarget:
    """A target that connects, sends nothing, and notes whether it was quit or detached: an app
    or a browser tab with no script behind it."""

    def __init__(self) -> None:
        self.info = TargetInfo("/x/train.py")
        self.calls: list[str] = []
        self._gone = asyncio.Event()

    async def start(self) -> None:
        """Note the start."""
        self.calls.append("start")

    def submit(self, command: Command) -> int:
        """Note the command; its request id is always 1."""
        self.calls.append(f"submit {command.text}")
        return 1

    async def batches(self):
        """No events, until the app quits or detaches."""
        await self._gone.wait()
        return
        yield

    async def quit(self) -> None:
        """Note the quit; the batches end."""
        self.calls.append("quit")
        self._gone.set()

    async def detach(self) -> None:
        """Note the detach; the batches end."""
        self.calls.append("detach")
        self._gone.set()


def patched_package(where: Path, patches: dict[str, list[tuple[str, str]]]) -> Path:
    """A copy of the gradtui package under `where`/tree with `patches` applied (for each file,
    relative to the package, its (old, new) replacements: each old text found exactly once) and no
    other file changed; the tree's folder back, to put first on a process's PYTHONPATH. The tests
    that add a throwaway extension (a statistic, a node-list column) in the files the contributing
    guide names use it, so the count of files they touch is checked, not trusted."""
    package = Path(gradtui.__file__).resolve().parent
    tree = where / "tree"
    copy = tree / "gradtui"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name, replacements in patches.items():
        path = copy / name
        text = path.read_text(encoding="utf-8")
        for old, new in replacements:
            assert text.count(old) == 1, f"{name} changed: update this test and docs/contributing.md"
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8")
    changed = {
        str(p.relative_to(copy))
        for p in copy.rglob("*")
        if p.is_file() and (package / p.relative_to(copy)).read_bytes() != p.read_bytes()
    }
    assert changed == set(patches)
    return tree


def small_passes(session: Session, count: int, rows: Sequence[int] = ()) -> torch.nn.Sequential:
    """`count` training-like passes of a seeded small MLP (6-5-1, tanh) under `session`, installed
    around each backward only, as the interceptor would; the model back (its layers' gradients
    are the last pass's). One batch of 4 rows for every pass; with `rows`, one pass per entry,
    each on a batch of its own of that many rows (`count` is then their number)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    batch = torch.randn(4, 6)
    assert not rows or len(rows) == count
    for i in range(count):
        data = torch.randn(rows[i], 6) if rows else batch
        model.zero_grad(set_to_none=True)
        loss = model(data).pow(2).mean()
        session.install()
        try:
            loss.backward()
        finally:
            session.uninstall()
    return model


def served_events(agent: Agent, run: Callable[[], object], passes: int, token: str = "token") -> list[ev.Event]:
    """What a client with `token` attached to `agent`'s server reads (a RemoteTarget decoding frames, as the
    UI's does, on a thread of its own) while `run()` makes `passes` passes on this thread: every
    event up to the last pass's end. The server is closed and the client gone on return."""
    from gradtui.wire.client import RemoteTarget

    assert agent.server is not None
    got: list[ev.Event] = []
    ready, done = threading.Event(), threading.Event()

    async def read(sock: socket.socket) -> None:
        target = RemoteTarget(token, sock=sock)
        await target.start()
        ready.set()
        async for batch in target.batches():
            got.extend(batch)
            if sum(isinstance(e, ev.PassFinished) for e in got) >= passes:
                break
        target.close()

    def reading(sock: socket.socket) -> None:
        try:
            asyncio.run(asyncio.wait_for(read(sock), RUN_TIMEOUT))
        finally:
            ready.set()
            done.set()

    ours, theirs = socket.socketpair()
    reader = threading.Thread(target=reading, args=(theirs,), daemon=True)
    agent.server.start()
    agent.server.serve_connection(ours)
    reader.start()
    try:
        assert ready.wait(RUN_TIMEOUT)
        run()
        assert done.wait(RUN_TIMEOUT), "the client never saw the last pass finish"
    finally:
        agent.server.close("test done", timeout=2.0)
        reader.join(RUN_TIMEOUT)
        theirs.close()
        agent.outputs.close()
    return got


class FrameClient:
    """A client at the other end of a socketpair attached to an agent's server, as the UI's
    RemoteTarget is but with no event loop: the hello and `token`, then every frame read on a thread
    of its own (so the agent's writer never waits) and decoded as RemoteTarget decodes it (a pass's
    graph sent as a reference to the last made again); `drawn` and `show_flow` as the UI sends them."""

    WAIT = 30.0
    """Seconds the handshake, a read and the reader's end may take."""

    def __init__(self, sock: socket.socket, token: str) -> None:
        from gradtui.wire import protocol

        self.sock = sock
        sock.settimeout(self.WAIT)
        protocol.check_hello(protocol.read_frame(sock))
        sock.sendall(protocol.encode({"auth": token, "version": protocol.VERSION}))
        welcome = protocol.read_frame(sock)
        assert welcome is not None and "welcome" in welcome
        self._events: list[ev.Event] = []
        self._lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        from gradtui.wire import protocol
        from gradtui.wire.passgraphs import GraphsRead

        graphs = GraphsRead()
        try:
            while (message := protocol.read_frame(self.sock)) is not None:
                for data in message.get("events", ()):
                    event = graphs.from_wire(data)
                    with self._lock:
                        self._events.extend(event.ran if type(event) is ev.NodesRan else (event,))
        except (OSError, protocol.ProtocolError):
            pass

    def seen(self) -> list[ev.Event]:
        """Every event read so far (a NodesRan batch as its NodeRan events)."""
        with self._lock:
            return list(self._events)

    def drawn(self, pass_index: int) -> None:
        """Say the end of pass `pass_index` was drawn (the UI's `Drawn`)."""
        from gradtui.wire import frames

        self.sock.sendall(frames.encode(frames.Drawn(pass_index)))

    def show_flow(self, shown: bool) -> None:
        """Say whether the flow is shown (the UI's `ShowFlow`)."""
        from gradtui.wire import frames

        self.sock.sendall(frames.encode(frames.ShowFlow(shown)))

    def close(self) -> None:
        """End the connection and the reader."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader's recv (a close alone does not)
        except OSError:
            pass
        self.sock.close()
        self.reader.join(self.WAIT)


def until(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Wait on this thread until `condition()` is true, at most `timeout` seconds (then fail, naming `what`)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
