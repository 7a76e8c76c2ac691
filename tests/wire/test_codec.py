"""Every event survives the wire: to_wire, JSON framing and from_wire give back an equal event."""

from __future__ import annotations

import math

import torch

from gradtui.engine.capture.graph import Names, capture
from gradtui.engine.stats.summary import summarize
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import parse_spec
from gradtui.protocol.errors import ErrorInfo, FrameInfo
from gradtui.wire import protocol
from gradtui.wire.codec import from_wire, to_wire


def _through(event):
    frame = protocol.encode({"events": [to_wire(event)]})
    message = protocol.decode(frame[protocol.HEADER.size :])
    return from_wire(message["events"][0])


def test_plain_events_come_back_equal_nan_and_inf_included():
    stats = summarize(torch.tensor([1.0, float("nan"), float("inf"), -2.0]), histogram=True)
    flow = ev.ParamFlow("fc.weight", 3, (2, 2), float("nan"), 0.0, None, 1)
    samples = [
        ev.ScriptStarted("/x/train.py", ("/x/train.py", "--lr", "0.1")),
        ev.Output("stderr", "warn ✓ 日本\r50%\n"),
        ev.Paused(0, 2, "MulBackward0", "before", "breakpoint 1: nan", (stats, None), 1, 3),
        ev.NodeRan(0, 2, 2, (stats,), (None, stats)),
        ev.CommandResult("print", "line1\nline2", False, request=7),
        ev.BreakpointsChanged(
            (ev.BreakpointInfo(1, parse_spec("nan"), 2), ev.BreakpointInfo(2, parse_spec("module fc*"), 0))
        ),
        ev.PassFinished(0, 3, 3, None, None, (), ((2, stats),), (flow,)),
        ev.ScriptFinished(4, "Traceback...", False, 1, how="exited with status 4"),
        ev.ScriptFinished(
            1,
            "Traceback...",
            error=ErrorInfo(
                "ValueError",
                "bad",
                (FrameInfo("/x/train.py", 3, "<module>", "main()"), FrameInfo("/x/train.py", 9, "main", "raise")),
            ),
        ),
    ]
    for event in samples:
        back = _through(event)
        assert type(back) is type(event)
        assert repr(back) == repr(event)  # NaN != NaN, but its repr is the same


def test_a_captured_graph_comes_back_with_the_same_nodes_edges_and_attributes():
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    z = (y * y).sum()
    cap = capture([z.grad_fn], Names.from_scopes({"x": x, "y": y, "z": z}))
    event = ev.PassStarted(0, "backward", "z.backward()", "t.py:4", cap.graph, cap.roots, (z.item(),))
    back = _through(event)
    assert dict(back.graph.nodes(data=True)) == dict(cap.graph.nodes(data=True))
    assert dict(((u, v), d) for u, v, d in back.graph.edges(data=True)) == dict(
        ((u, v), d) for u, v, d in cap.graph.edges(data=True)
    )
    assert back.roots == event.roots and back.losses == event.losses
    assert math.isclose(back.losses[0], 12.0)


def test_a_pass_is_named_pass_index_on_every_event_and_the_old_wire_name_still_reads():
    finished = ev.PassFinished(3, 5, 7, None)
    assert from_wire(to_wire(finished)) == finished
    data = to_wire(ev.PassPrints(2, ()))
    assert data["pass_index"] == 2 and "index" not in data  # one name, as NodeRan's and Paused's
    assert from_wire(data).pass_index == 2
    old = {"$": "PassFinished", "index": 3, "done": 5, "total": 7, "error": None}  # an earlier agent's form
    assert from_wire(old) == finished


def test_a_passs_node_batch_and_its_end_travel_packed_and_come_back_equal():
    """A NodesRan batch and a PassFinished travel as MessagePack bytes msgspec writes and reads in
    C (field by field in Python they cost more than the pass that made them): every field comes
    back, NaN and infinities included, and the batch's events are the ones sent, in order."""
    stats = summarize(torch.tensor([1.0, float("nan"), float("inf"), -2.0]), histogram=True)
    light = summarize(torch.tensor([[3.0, 4.0]]))
    ran = (ev.NodeRan(5, 2, 0, (stats,), (None, light)), ev.NodeRan(5, 1, 1, (light,), ()))
    batch = ev.NodesRan.of(5, ran)
    flow = ev.ParamFlow("fc.weight", 1, (1, 2), 5.0, float("inf"), 0.0, 0)
    finished = ev.PassFinished(5, 2, 2, "boom", 2, (stats, None), ((1, light), (3, None)), (flow,))
    for event in (batch, finished):
        data = to_wire(event)
        assert isinstance(data["$packed"], bytes)  # one blob, not a dict per Struct
    back = _through(batch)
    assert type(back) is ev.NodesRan and (back.pass_index, back.count) == (5, 2)
    assert repr(back.ran) == repr(ran)  # NaN != NaN, but its repr is the same
    back_finished = _through(finished)
    assert type(back_finished) is ev.PassFinished and repr(back_finished) == repr(finished)


def test_a_graph_travels_in_the_old_node_link_form_and_is_read_as_node_infos():
    """The wire form of a graph is the node-link data it had when nodes were attribute dicts
    (an agent of that time sends these very bytes), and it reads back as NodeInfo."""
    import networkx as nx

    from gradtui.protocol.nodes import FIELDS, NodeInfo, node_info

    x = torch.ones(3, requires_grad=True)
    z = (x.exp() * x).sum()
    cap = capture([z.grad_fn], Names.from_scopes({"x": x, "z": z}))
    old = nx.DiGraph()  # the graph as an agent of the attribute-dict days held it
    for n, info in cap.graph.nodes(data="info"):
        old.add_node(n, **{name: getattr(info, name) for name in FIELDS})
    old.add_edges_from(cap.graph.edges(data=True))
    old_frame = protocol.encode({"graph": {"$graph": nx.node_link_data(old, edges="edges")}})
    assert protocol.encode({"graph": to_wire(cap.graph)}) == old_frame
    back = from_wire(protocol.decode(old_frame[protocol.HEADER.size :])["graph"])
    for n in cap.graph:
        assert type(node_info(back, n)) is NodeInfo and node_info(back, n) == node_info(cap.graph, n)
    assert node_info(back, 0).next == cap.infos[0].next and type(node_info(back, 0).saved) is tuple


def test_a_recorded_graphs_other_attributes_travel_beside_its_node_infos():
    import networkx as nx

    from gradtui.protocol.nodes import NodeInfo, node_info

    graph = nx.DiGraph()
    graph.add_node(0, info=NodeInfo("SumBackward0", "op", 5, (1,), ("loss",)), order=1)
    graph.add_node(1, info=NodeInfo("AccumulateGrad", "accumulate", None, (), (), "w"), order=None)
    graph.add_edge(0, 1, slot=0)
    back = from_wire(protocol.decode(protocol.encode({"g": to_wire(graph)})[protocol.HEADER.size :])["g"])
    assert node_info(back, 0) == node_info(graph, 0) and node_info(back, 1).param == "w"
    assert back.nodes[0]["order"] == 1 and back.nodes[1]["order"] is None and back.edges[0, 1] == {"slot": 0}


def test_sequences_of_plain_values_and_of_events_travel_alike():
    """A sequence of plain values is copied whole (a statistic's listed values), one holding
    anything else is converted element by element: either way the same data comes back."""
    stats = summarize(torch.arange(6.0).reshape(2, 3) - 2.5, histogram=False)
    assert stats.values is not None and len(stats.values) == 6
    plain = (1, 2.5, "a", None, True, float("-inf"))
    assert to_wire(plain) == list(plain) and from_wire(to_wire(plain)) == plain
    mixed = (stats, 1.0, None)
    wired = to_wire(mixed)
    assert wired[0] == to_wire(stats) and wired[0]["values"] == list(stats.values)
    assert from_wire(wired) == mixed
    nested = ((1, 2), [3.0, (4, "b")])
    assert to_wire(nested) == [[1, 2], [3.0, [4, "b"]]] and from_wire(to_wire(nested)) == ((1, 2), (3.0, (4, "b")))
    event = ev.NodeRan(0, 2, 2, (stats, None), ())
    assert _through(event) == event
