"""A lazy capture (gradtui.engine.capture.graph): a planned pass in `continue` whose listeners need no graph
walks its graph and nothing more; its nodes' metadata (labels, sources, modules, saved values) is
read at its first pause, or when the graph is first read, and is what an eager capture reads."""

from __future__ import annotations

import gc

import torch

from gradtui.engine.capture import graph as graph_module
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.lazygraph import is_built
from gradtui.protocol.nodes import FIELDS
from tests.helpers import count_calls

KEYS = ("name", "kind", "labels", "param", "source", "path", "line", "module", "next")


def _counting(monkeypatch) -> list[int]:
    return count_calls(monkeypatch, graph_module, "saved_summary")


def _pass(*, lazy: bool, nan: bool, commands=("continue",)):
    """One pass of a small net under a session in `continue` with a `nan` watch; its events, the
    attributes of the node it paused at as the listener read them then, and the graph."""
    events: list[ev.Event] = []
    at_pause: dict[str, object] = {}
    session = Session(None, full_stats=False)

    def on(event):
        events.append(event)
        if isinstance(event, ev.Paused):
            started = [e for e in events if isinstance(e, ev.PassStarted)][-1]
            info = started.graph.nodes[event.node]["info"]
            at_pause.update((name, getattr(info, name)) for name in FIELDS)
            at_pause["saved of all"] = [started.graph.nodes[i]["info"].saved for i in range(len(started.graph))]
            for command in commands:
                session.submit(parse(command))

    session.add_listener(on, graph=not lazy)
    session.submit(parse("break nan"))
    session.run_on()
    with session:
        torch.manual_seed(0)
        weight = torch.randn(4, 3, requires_grad=True)
        data = torch.rand(5, 4) + 0.5
        hidden = (data @ weight).tanh()
        if nan:
            hidden = hidden * torch.tensor([1.0, 0.0, 1.0])
        root = hidden.abs().sqrt() if not nan else hidden.sqrt()  # sqrt(0)'s gradient: inf * 0 = NaN
        loss = (root * 2.0).sum()
        loss.backward()
    started = [e for e in events if isinstance(e, ev.PassStarted)][0]
    return events, at_pause, started.graph


def test_a_continue_pass_whose_listeners_need_no_graph_reads_no_node_metadata(monkeypatch):
    saved = _counting(monkeypatch)
    events, at_pause, graph = _pass(lazy=True, nan=False)
    assert not at_pause  # no pause
    assert saved[0] == 0
    assert not is_built(graph)  # nobody read it during the pass
    assert any(isinstance(e, ev.NodeRan) for e in events)
    # Read after the pass: the walk's attributes are there; what was never read is unknown, not missing.
    names = [graph.nodes[i]["info"].name for i in range(len(graph))]
    assert "SqrtBackward0" in names and "AccumulateGrad" in names
    assert all(
        graph.nodes[i]["info"].saved == () and graph.nodes[i]["info"].source is None
        for i in range(len(graph))
        if graph.nodes[i]["info"].kind != "accumulate"
    )
    leaf = names.index("AccumulateGrad")
    assert graph.nodes[leaf]["info"].labels == ("weight",)  # leaves are named at every pass's end (the flow)


def test_a_listener_that_wants_the_graph_gets_it_described_as_the_pass_starts(monkeypatch):
    saved = _counting(monkeypatch)
    _, _, graph = _pass(lazy=False, nan=False)
    assert saved[0] == len(graph)
    assert "loss" in graph.nodes[0]["info"].labels
    assert any(graph.nodes[i]["info"].saved for i in range(len(graph)))


def test_a_nan_pause_reads_the_metadata_an_eager_capture_has():
    _, lazy, _ = _pass(lazy=True, nan=True)
    _, eager, _ = _pass(lazy=False, nan=True)
    assert lazy and lazy["name"] == "SqrtBackward0"
    assert {k: lazy[k] for k in KEYS} == {k: eager[k] for k in KEYS}
    assert lazy["source"] is not None and lazy["source"].startswith("test_lazy_capture.py:")
    assert "root" in lazy["labels"]
    # Saved values of the nodes that have not run yet are read as an eager capture read them;
    # those that ran before the pause have let go of theirs.
    described = [s for s in lazy["saved of all"] if s]
    assert described and all(
        s == e for s, e in zip(lazy["saved of all"], eager["saved of all"]) if s and "(freed)" not in " ".join(s)
    )


def test_a_listener_can_say_per_pass_whether_it_wants_the_graph(monkeypatch):
    saved = _counting(monkeypatch)
    wanted = [False, True]
    session = Session(None, provenance=False)
    graphs = []
    session.add_listener(
        lambda e: graphs.append(e.graph) if isinstance(e, ev.PassStarted) else None, graph=lambda: wanted.pop(0)
    )
    session.run_on()
    session.submit(parse("break nan"))
    with session:
        for _ in range(2):
            x = torch.ones(3, requires_grad=True)
            (x * 2).sum().backward()
    assert len(graphs) == 2
    assert not is_built(graphs[0]) and graphs[0].nodes[0]["info"].saved == ()
    assert saved[0] == len(graphs[1]) and graphs[1].nodes[0]["info"].saved != ()


def test_a_lazy_pass_nobody_reads_makes_no_node_info_and_its_graph_read_later_is_the_walks(monkeypatch):
    """The walk keeps per node only its name, kind and receivers: no NodeInfo is made while a pass
    in `continue` runs for listeners that read no graph. Read after the pass (its nodes gone), the
    graph's nodes are what an eager capture of the same graph names, numbers and links."""
    made = count_calls(monkeypatch, graph_module, "walked")
    events: list[ev.Event] = []
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(events.append, graph=False, batches=True, flow=False)
    session.submit(parse("break nan"))
    session.run_on()
    with session:
        weight = torch.randn(4, 3, requires_grad=True)
        loss = ((torch.rand(5, 4) @ weight).tanh().t().reshape(-1) * 2.0).sum()
        loss.backward()
    assert made[0] == 0
    graph = next(e for e in events if isinstance(e, ev.PassStarted)).graph
    eager = graph_module.capture([loss.grad_fn])
    later = [graph.nodes[i]["info"] for i in range(len(graph))]
    assert len(later) == len(eager.infos) > 5
    keys = ("name", "kind", "seq", "next")
    assert [tuple(getattr(i, k) for k in keys) for i in later] == [
        tuple(getattr(i, k) for k in keys) for i in eager.infos
    ]


def test_a_pass_whose_flow_is_wanted_names_its_leaves_without_making_every_node_info(monkeypatch):
    """The flow names each leaf (its parameter's name, else its first label) from the frame's
    names, and the pass's end keeps what the leaves' NodeInfo need: made after the pass, they
    name the leaves as an eager capture does, and the flow's rows say the same names."""
    made = count_calls(monkeypatch, graph_module, "walked")
    events: list[ev.Event] = []
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(events.append, graph=False, batches=True, flow=True)
    session.run_on()
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    extra = torch.randn(3, requires_grad=True)
    with session:
        loss = (layer(torch.rand(5, 4)) * extra).sum()
        loss.backward()
    assert made[0] == 0
    finished = next(e for e in events if isinstance(e, ev.PassFinished))
    assert sorted(row.name for row in finished.flow) == ["extra", "layer.bias", "layer.weight"]
    graph = next(e for e in events if isinstance(e, ev.PassStarted)).graph
    later = [graph.nodes[i]["info"] for i in range(len(graph))]
    assert made[0] >= len(later)  # each made when read, after the pass (a leaf again with its names)
    eager = graph_module.capture([loss.grad_fn], graph_module.Names.from_scopes({"layer": layer, "extra": extra}))
    assert [(i.param, i.labels) for i in later if i.kind == "accumulate"] == [
        (i.param, i.labels) for i in eager.infos if i.kind == "accumulate"
    ]


def test_a_pass_s_capture_goes_with_the_last_hold_on_its_graph_without_a_collection():
    """A pass over, its capture lets go of its graph: the graph (read later, lazily) reads the
    capture, and the two are no cycle, so dropping the graph frees the capture (its walk, its lists)
    at once, with the collector off, not at the next garbage collection."""
    events: list[ev.Event] = []
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(events.append, graph=False, batches=True, flow=False)
    session.submit(parse("break nan"))
    session.run_on()
    collecting = gc.isenabled()
    gc.disable()
    try:
        before = _captures()
        with session:
            weight = torch.randn(4, 3, requires_grad=True)
            ((torch.rand(5, 4) @ weight).tanh().t().reshape(-1) * 2.0).sum().backward()
        graph = next(e for e in events if isinstance(e, ev.PassStarted)).graph
        assert len(graph.infos()) > 5  # still read after the pass, from the capture it holds
        assert _captures() == before + 1
        del graph
        events.clear()
        assert _captures() == before
    finally:
        if collecting:
            gc.enable()


def _captures() -> int:
    """How many captures are alive (or garbage not collected yet)."""
    return sum(type(o) is graph_module.Capture for o in gc.get_objects())
