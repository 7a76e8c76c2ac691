"""The compiled posthooks (gradtui.engine.hooks.native, .compiled): where they are built, a planned pass
gives exactly the events the Python hooks give, stops where they stop, quits, edits, and leaves
no hook behind; where they cannot be built, the reason is kept and the Python hooks run."""

from __future__ import annotations

import shutil
import threading

import pytest
import torch
from torch import nn

from gradtui.engine.hooks import native
from gradtui.engine.hooks.compiled import CompiledHooks
from gradtui.engine.hooks.native.cache import Cache
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import PLAN_KINDS, compiled_hooked, nan_case, of, plain_pass, run_pass, same, same_stats

BUILT = native.load().module is not None
needs_build = pytest.mark.skipif(
    not BUILT and shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler here: the Python hooks are all there is",
)


def test_the_compiled_hooks_are_built_where_a_compiler_is():
    """The suite's controller builds them (tests/conftest.py): with a compiler they must load."""
    if shutil.which("c++") or shutil.which("g++"):
        assert BUILT, native.load().reason


@pytest.fixture
def hooked(monkeypatch) -> list[int]:
    """Per planned pass that had compiled hooks, how many nodes they hooked."""
    return compiled_hooked(monkeypatch)


def _continuing(events: list[ev.Event]) -> Session:
    """A session in `continue` with a `nan` watch, its events into `events`."""
    session = Session(events.append, provenance=False)
    session.run_on()
    session.submit(parse("break nan"))
    return session


def python_only(monkeypatch):
    monkeypatch.setattr(CompiledHooks, "available", staticmethod(lambda: None))


class Mixed(nn.Module):
    """Small and big gradients, float64, a non-contiguous small one, several producers, a custom
    Function (a Python node), a broadcast add and a leaf used twice."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 4)
        self.norm = nn.LayerNorm(16)
        self.scale = nn.Parameter(torch.rand(4, 1, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x)) + self.norm(x)
        h = Twice.apply(h) * h
        y = self.b(h).t()[1:3]  # a non-contiguous small gradient
        first, _ = h.split(8, dim=1)  # one producer, two outputs, one of them used: what arrives is measured
        return (y.double() * self.scale[1:3]).sum() + (h.double() ** 2).mean() + torch.tanh(first).sum()


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def _build():
    model = Mixed()
    x = torch.randn(6, 16)
    return list(model.parameters()), model(x)


def _run_order(events):
    return [(e.node, e.order) for e in of(events, ev.NodeRan)]


def _all_stats(events):
    return {e.node: (e.grad_outputs, e.grad_inputs) for e in of(events, ev.NodeRan)}


def _with_nans():
    """A NaN made mid-pass (sqrt's backward at a zero): with no watch the pass runs on, and the
    nodes after it send NaN and inf, which the Python posthook measures."""
    return nan_case("view", "after", size="big")()


@needs_build
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("watch", [True, False])
@pytest.mark.parametrize("build", [_build, _with_nans], ids=["mixed", "nans"])
def test_compiled_and_python_hooks_give_the_same_events(monkeypatch, hooked, full, watch, build):
    compiled_events, compiled_leaves = run_pass(build, watch=watch, full=full)
    assert hooked and hooked[0] >= (
        8 if build is _build else 1
    )  # the plain planned nodes (a custom Function keeps Python's)
    python_only(monkeypatch)
    python_events, python_leaves = run_pass(build, watch=watch, full=full)
    ours, theirs = _all_stats(compiled_events), _all_stats(python_events)
    assert ours.keys() == theirs.keys() and len(ours) == of(compiled_events, ev.PassStarted)[0].graph.number_of_nodes()
    assert _run_order(compiled_events) == _run_order(python_events)  # the Python-hooked nodes in their place
    made_nan = any(s is not None and s.nonfinite for pair in theirs.values() for s in pair[0] + pair[1])
    assert made_nan == (build is _with_nans)
    for node, (outputs, inputs) in theirs.items():
        got_outputs, got_inputs = ours[node]
        for a, b in zip(got_outputs + got_inputs, outputs + inputs, strict=True):
            assert same_stats(a, b), node
    for a, b, c in zip(compiled_leaves, python_leaves, plain_pass(build), strict=True):
        assert same(a.grad, b.grad) and same(a.grad, c.grad)


@needs_build
def test_the_hooks_are_off_a_retained_graph_after_its_pass_and_gone_with_a_freed_one(hooked):
    module = native.load().module
    before = module.alive()
    events: list[ev.Event] = []
    session = _continuing(events)
    with session:
        leaves, loss = _build()
        loss.backward(retain_graph=True)
    assert hooked and hooked[0] >= 5
    assert module.alive() == before  # taken off the nodes, which still live
    grads = [p.grad.clone() for p in leaves]
    loss.backward()  # the retained graph again, plainly: nothing of gradtui's runs
    assert all(torch.equal(p.grad, 2 * g) for p, g in zip(leaves, grads))
    with session:
        leaves, loss = _build()
        loss.backward()
    del loss
    assert module.alive() == before  # freed with their graph


@needs_build
@pytest.mark.parametrize("where", ["before", "after", "at"])
@pytest.mark.parametrize("kind", ["view", "add", "clone"])
def test_a_nan_is_named_where_it_appeared_and_is_editable(hooked, kind, where):

    build = nan_case(kind, where, size="big")
    events, leaves = run_pass(build, ["zero", "continue"])
    assert hooked and hooked[0] >= 1
    graph = of(events, ev.PassStarted)[0].graph
    pause = of(events, ev.Paused)[0]
    if where == "at":
        assert graph.nodes[pause.node]["info"].name == PLAN_KINDS[kind][1] and pause.phase == "before"
    else:
        assert graph.nodes[pause.node]["info"].name == "SqrtBackward0" and pause.phase == "after"
    ran = of(events, ev.NodeRan)
    culprit = next(i for i, e in enumerate(ran) if e.node == pause.node)
    assert not any(s is not None and s.nonfinite for e in ran[:culprit] for s in e.grad_outputs + e.grad_inputs)
    assert not leaves[0].grad.isnan().any()  # the zeroed gradient went on
    assert same(run_pass(build, ["continue"])[1][0].grad, plain_pass(build)[0].grad)


@needs_build
def test_an_overflowing_norm_of_finite_values_is_not_a_nan():
    def build():
        x = torch.full((100,), 3e38, requires_grad=True)
        return [x], (x * 1.0).sum()  # its gradient is ones; 3e38 arrives nowhere

    def big():
        x = torch.full((100,), 1.0, requires_grad=True)
        return [x], (x * 3e37).sum()  # MulBackward0 sends 3e37 x 100: a float32 norm overflows

    for make in (build, big):
        events, leaves = run_pass(make)
        assert not of(events, ev.Paused)
        assert same(leaves[0].grad, plain_pass(make)[0].grad)


@needs_build
def test_a_quit_during_a_compiled_pass_raises_at_the_next_hook():
    events: list[ev.Event] = []
    session = _continuing(events)
    with session, pytest.raises(GradtuiQuit):
        x = torch.rand(200, requires_grad=True)
        y = x
        for step in range(40):
            y = torch.sin(y) * 1.01
            if step == 10:  # the user quits while the engine runs the nodes below this one
                y.register_hook(lambda g: (session.run_quit.stop(), g)[1])
        y.sum().backward()
    assert x.grad is None
    ran = {e.node for e in of(events, ev.NodeRan)}
    assert len(ran) < of(events, ev.PassStarted)[0].graph.number_of_nodes() - 10


@needs_build
def test_a_nested_backward_in_a_custom_function_is_not_the_passs(monkeypatch):
    class Inner(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 1.0

        @staticmethod
        def backward(ctx, g):
            with torch.enable_grad():
                side = torch.rand(5, requires_grad=True)
                (torch.tanh(side) * 3).sum().backward()  # another engine call: not this pass's
            return g * 3

    def build():
        torch.manual_seed(0)
        x = torch.rand(70, requires_grad=True)
        return [x], (torch.exp(Inner.apply(torch.sin(x))) * 2).sum()

    events, leaves = run_pass(build)
    python_only(monkeypatch)
    python_events, python_leaves = run_pass(build)
    assert _all_stats(events).keys() == _all_stats(python_events).keys()
    assert same(leaves[0].grad, python_leaves[0].grad) and same(leaves[0].grad, plain_pass(build)[0].grad)


@needs_build
def test_a_long_pass_reports_progress_from_the_compiled_hooks(monkeypatch):
    from gradtui.engine.hooks import planned

    monkeypatch.setattr(planned, "PROGRESS_INTERVAL", 0.0)  # a tick at every compiled hook

    def build():
        torch.manual_seed(0)
        x = torch.rand(100, requires_grad=True)
        y = x
        for _ in range(200):
            y = torch.sin(y) * 1.001
        return [x], y.sum()

    events, leaves = run_pass(build)
    progress = of(events, ev.Progress)
    assert len(progress) >= 100 and progress[-1].done <= progress[-1].total
    assert [p.done for p in progress] == sorted(p.done for p in progress)
    assert same(leaves[0].grad, plain_pass(build)[0].grad)


def test_a_failed_build_keeps_its_reason_and_the_python_hooks_run(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADTUI_CACHE", str(tmp_path))
    refusing = tmp_path / "cxx"
    refusing.write_text("#!/bin/sh\necho 'posthooks.cpp:1:1: error: this compiler refuses' >&2\nexit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setenv("CXX", str(refusing))
    built = native.build(timeout=30)
    assert built.module is None and "this compiler refuses" in built.reason
    with Cache.open() as cache:
        failure = cache.failure(native.library_name())
    assert failure is not None and built.reason.startswith(failure.reason) and failure.tries == 1
    assert not list(tmp_path.rglob("*.tmp"))


def test_off_means_the_python_hooks(monkeypatch):
    monkeypatch.setenv("GRADTUI_NATIVE", "off")
    monkeypatch.setattr(native, "_loaded", None)
    assert native.load() == native.Native(None, "GRADTUI_NATIVE=off")
    monkeypatch.setattr(native, "_loaded", None)  # the next test loads afresh
    events, leaves = run_pass(_build)
    assert same(leaves[0].grad, plain_pass(_build)[0].grad)


def test_builds_at_once_do_not_see_each_others_files(monkeypatch, tmp_path):
    """Two builds at the same time each write their own temporary file and rename it into place
    (the compiler here a copy of the built library, slowed so that the two overlap)."""
    if not BUILT:
        pytest.skip("nothing built to stand in for the compiler")
    made = native.library_path()
    monkeypatch.setenv("GRADTUI_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "compile_command", lambda out: ["sh", "-c", f"sleep 0.5; cp '{made}' '{out}'"])
    results: list[native.Native] = []
    threads = [threading.Thread(target=lambda: results.append(native.build(timeout=60))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert len(results) == 2 and all(r.module is not None for r in results), [r.reason for r in results]
    name = native.library_name()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [".install.lock", name, f"{name}.sha256"]


def test_auto_builds_once_in_the_background_and_a_later_load_finds_it(monkeypatch, tmp_path):
    """`auto` with nothing built: this load answers None at once and starts one build (the
    compiler here a slowed copy of the built library); once it ended, a load finds the library."""
    if not BUILT:
        pytest.skip("nothing built to stand in for the compiler")
    made = native.library_path()
    monkeypatch.setenv("GRADTUI_CACHE", str(tmp_path))
    monkeypatch.setenv("GRADTUI_NATIVE", "auto")
    target = native.library_path()
    monkeypatch.setattr(
        native,
        "background_command",  # the library and its digest, as a build installs them
        lambda: ["sh", "-c", f"sleep 0.3; cp '{made}.sha256' '{target}.sha256'; cp '{made}' '{target}'"],
    )
    for name, value in (("_loaded", None), ("_building", None), ("_started", False)):
        monkeypatch.setattr(native, name, value)
    first = native.load()
    assert first.module is None and "being built" in first.reason
    assert native.load() is first  # still building: asked again, the same answer, no second build
    assert native.wait(timeout=30)
    assert native.load().module is not None
    monkeypatch.setattr(native, "_loaded", None)  # the next test loads the suite's own afresh


@needs_build
def test_the_compiled_walk_is_the_python_walk():
    from gradtui.engine.capture import graph

    def roots():
        model = Mixed()
        x = torch.randn(6, 16)
        y = model(x)
        z = (x * 2).sum()  # a second root, its own graph
        return [y.grad_fn, None, z.grad_fn, y.grad_fn]  # a root twice, a None

    for case in (roots(), [_build()[1].grad_fn]):
        compiled = native.load().module.walk(case)
        nodes, nexts, producer, root_ids, _ = graph._walked(case)
        assert compiled is not None
        assert compiled[0] == nodes and all(a is b for a, b in zip(compiled[0], nodes))
        assert (compiled[1], compiled[2], compiled[3]) == (nexts, producer, root_ids)
        assert compiled[4] == [node._sequence_nr() for node in nodes]
    custom = Twice.apply(torch.rand(3, requires_grad=True)).sum()
    assert native.load().module.walk([custom.grad_fn.next_functions[0][0]]) is None  # a Python node: the Python walk


@needs_build
@pytest.mark.parametrize("nan", [False, True])
def test_a_pass_handed_over_at_a_pause_runs_its_rest_on_compiled_hooks(monkeypatch, hooked, nan):
    """`gradtui script.py`'s first pass: paused at its first node, then `continue` (`break nan`):
    the plain nodes that had not run get compiled posthooks; a NaN made later still stops right
    after its culprit; the statistics and gradients are those of the Python hooks."""

    def build():
        torch.manual_seed(0)
        x = torch.rand(100)
        x[3] = 0.0
        x.requires_grad_()
        y = x
        for i in range(60):
            y = y * (1.0 + i / 100)
            if nan and i == 30:
                y = y.sqrt() * (y != 0)  # a NaN made here in backward: where y is 0
        return [x], (y * (torch.arange(100) % 7 != 0)).sum()

    def paused_then_continued():
        events: list[ev.Event] = []
        session = Session(events.append, provenance=False)  # starts stepping: pauses at the first node
        session.add_listener(lambda e: session.submit(parse("continue")) if isinstance(e, ev.Paused) else None)
        session.submit(parse("break nan"))
        with session:
            leaves, loss = build()
            loss.backward()
        return events, leaves

    events, leaves = paused_then_continued()
    assert hooked and hooked[0] >= 50
    pauses = of(events, ev.Paused)
    graph = of(events, ev.PassStarted)[0].graph
    if nan:
        assert len(pauses) == 2 and graph.nodes[pauses[1].node]["info"].name == "SqrtBackward0"
        assert pauses[1].phase == "after"
    else:
        assert len(pauses) == 1
    hooked.clear()
    python_only(monkeypatch)
    python_events, python_leaves = paused_then_continued()
    assert not hooked
    ours, theirs = _all_stats(events), _all_stats(python_events)
    assert ours.keys() == theirs.keys() and _run_order(events) == _run_order(python_events)
    for node, (outputs, inputs) in theirs.items():
        for a, b in zip(ours[node][0] + ours[node][1], outputs + inputs, strict=True):
            assert same_stats(a, b), node
    assert same(leaves[0].grad, python_leaves[0].grad)


def test_a_missing_source_or_cache_folder_is_a_reason_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "SOURCES", (tmp_path / "gone.cpp",))
    monkeypatch.setattr(native, "_loaded", None)
    gone = native.load()
    assert gone.module is None and "FileNotFoundError" in gone.reason
    monkeypatch.undo()
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("GRADTUI_CACHE", str(blocked))  # a file where the folder would be
    built = native.build(timeout=30)
    assert built.module is None and "no cache folder" in built.reason
    monkeypatch.setattr(native, "_loaded", None)  # the next test loads the suite's own afresh


def test_under_torchs_compiled_autograd_the_python_hooks_run(monkeypatch, hooked):
    """Compiled autograd traces a backward's hooks; the compiled posthooks cannot be traced."""
    from gradtui.engine.hooks import compiled

    monkeypatch.setattr(compiled, "compiled_autograd_on", lambda: True)
    events, leaves = run_pass(_build)
    assert not hooked
    assert same(leaves[0].grad, plain_pass(_build)[0].grad)


def test_a_compiler_killed_or_timed_out_is_tried_again_later(monkeypatch, tmp_path):
    """Each failure is recorded with its back-off (an hour, then two), not for good; another
    compiler is tried at once."""
    monkeypatch.setenv("GRADTUI_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "compile_command", lambda out: ["sh", "-c", "kill -9 $$"])
    killed = native.build(timeout=30)
    assert killed.module is None and "killed by signal 9" in killed.reason
    monkeypatch.setattr(native, "compile_command", lambda out: ["sleep", "5"])
    late = native.build(timeout=0.5)
    assert late.module is None and "did not finish" in late.reason
    with Cache.open() as cache:
        failure = cache.failure(native.library_name())
    assert failure is not None and failure.tries == 2 and "did not finish" in failure.reason
    same = native.compiler_identity()
    assert not failure.due(same, failure.at + 3600) and failure.due(same, failure.at + 7200)
    assert failure.due("another compiler", failure.at)
    assert not list(tmp_path.rglob("*.tmp"))
