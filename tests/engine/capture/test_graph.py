"""Graph capture (gradtui.engine.capture.graph): ids, names, kinds, edges, labels, saved values, and the
predicted engine order, checked against what autograd itself reports and runs."""

from __future__ import annotations

import pickle

import networkx as nx
import pytest
import torch
from torch import nn

from gradtui.engine.capture.graph import Names, capture, short_name
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.nodes import FIELDS, NodeInfo, engine_order, node_title

pytestmark = pytest.mark.timeout(60)


def names_of(graph: nx.DiGraph) -> list[str]:
    return [graph.nodes[n]["info"].name for n in sorted(graph.nodes)]


def test_chain_ids_names_kinds_edges_labels(chain):
    cap = capture([chain.z.grad_fn], Names.from_scopes(chain.scope))
    graph = cap.graph
    assert sorted(graph.nodes) == [0, 1, 2]
    assert names_of(graph) == ["PowBackward0", "MulBackward0", "AccumulateGrad"]
    assert [graph.nodes[n]["info"].kind for n in range(3)] == ["op", "op", "accumulate"]
    assert sorted(graph.edges(data="slot")) == [(0, 1, 0), (1, 2, 0)]
    assert [graph.nodes[n]["info"].labels for n in range(3)] == [("z",), ("y",), ("x",)]
    assert cap.roots == (0,)
    # the live nodes are autograd's own, in id order
    assert cap.nodes[0] is chain.z.grad_fn
    assert cap.nodes[1] is chain.y.grad_fn
    assert cap.nodes[2].variable is chain.x
    assert short_name(cap.nodes[2]) == "AccumulateGrad"
    assert node_title(graph, 1) == "#1 MulBackward0 (y)"


def test_graph_is_plain_data(chain):
    """The graph outlives the pass, so it must hold no tensor and no autograd node."""
    graph = capture([chain.z.grad_fn], Names.from_scopes(chain.scope)).graph
    for _, data in graph.nodes(data=True):
        assert list(data) == ["info"] and type(data["info"]) is NodeInfo
        for value in (getattr(data["info"], name) for name in FIELDS):
            assert value is None or isinstance(value, (str, int, tuple)), value
            if isinstance(value, tuple):
                assert all(item is None or isinstance(item, (str, int)) for item in value), value
    copy = pickle.loads(pickle.dumps(graph))
    assert nx.utils.graphs_equal(copy, graph)


def test_edge_slots_follow_next_functions():
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    out = a * b  # MulBackward0.next_functions = (a's accumulator, b's accumulator)
    cap = capture([out.grad_fn], Names.from_scopes({"a": a, "b": b}))
    slots = {cap.graph.nodes[j]["info"].labels: slot for _, j, slot in cap.graph.edges(data="slot")}
    assert slots == {("a",): 0, ("b",): 1}


def test_next_keeps_repeated_and_empty_slots():
    """`x * x` sends to x twice; a constant operand leaves a None slot: `next` keeps both."""
    x = torch.randn(3, requires_grad=True)
    graph = capture([(x * x).grad_fn]).graph
    assert graph.nodes[0]["info"].next == (1, 1)
    assert graph.number_of_edges() == 1  # the DiGraph itself merges the two
    y = torch.randn(3, requires_grad=True)
    graph = capture([(torch.randn(3) * y).grad_fn]).graph
    assert graph.nodes[0]["info"].next == (None, 1)


def test_a_lone_layer_names_its_parameters_by_its_variable():
    fc = nn.Linear(2, 1)
    loss = fc(torch.randn(3, 2)).sum()
    graph = capture([loss.grad_fn], Names.from_scopes({"fc": fc})).graph
    params = {graph.nodes[n]["info"].param for n in graph.nodes if graph.nodes[n]["info"].kind == "accumulate"}
    assert params == {"fc.weight", "fc.bias"}


def test_labels_prefer_every_name_and_skip_dunder(chain):
    scope = {"z": chain.z, "loss": chain.z, "__hidden": chain.y, "y": chain.y}
    graph = capture([chain.z.grad_fn], Names.from_scopes(scope, {"x": chain.x})).graph
    assert graph.nodes[0]["info"].labels == ("z", "loss")
    assert graph.nodes[1]["info"].labels == ("y",)
    assert graph.nodes[2]["info"].labels == ("x",)  # from the second scope (globals)


def test_param_names_from_a_module_in_scope():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 1)

        def forward(self, inputs: torch.Tensor) -> torch.Tensor:
            return self.fc(inputs)

    torch.manual_seed(0)
    model = Net()
    loss = model(torch.randn(3, 2)).sum()
    graph = capture([loss.grad_fn], Names.from_scopes({"model": model, "loss": loss})).graph
    params = {graph.nodes[n]["info"].param for n in graph.nodes if graph.nodes[n]["info"].kind == "accumulate"}
    assert params == {"fc.weight", "fc.bias"}
    for n in graph.nodes:
        if graph.nodes[n]["info"].kind != "accumulate":
            assert graph.nodes[n]["info"].param is None


def test_list_elements_are_labelled():
    x = torch.randn(2, requires_grad=True)
    outs = [x * 2, x * 3, x * 4]
    loss = sum(o.sum() for o in outs)
    graph = capture([loss.grad_fn], Names.from_scopes({"outs": outs, "loss": loss})).graph
    labelled = {
        graph.nodes[n]["info"].labels: graph.nodes[n]["info"].name for n in graph.nodes if graph.nodes[n]["info"].labels
    }
    assert labelled[("outs[1]",)] == "MulBackward0"
    assert {("outs[0]",), ("outs[1]",), ("outs[2]",), ("loss",)} <= set(labelled)
    # outs[1] is the very node that made outs[1]
    cap = capture([loss.grad_fn], Names.from_scopes({"outs": outs}))
    (node,) = [n for n in cap.graph.nodes if cap.graph.nodes[n]["info"].labels == ("outs[1]",)]
    assert cap.nodes[node] is outs[1].grad_fn


def test_saved_tensor_summaries(chain):
    graph = capture([chain.z.grad_fn]).graph
    saved = graph.nodes[0]["info"].saved
    assert "exponent = 2" in saved
    assert "self [1] float32" in saved
    m = torch.randn(4, 3, requires_grad=True)
    v = torch.randn(3, 5, dtype=torch.float64)
    out = m.double() @ v
    graph = capture([out.grad_fn]).graph
    assert graph.nodes[0]["info"].name == "MmBackward0"
    assert "mat2 [3,5] float64" in graph.nodes[0]["info"].saved


def test_saved_values_after_backward_are_reported_freed(chain):
    chain.z.backward()
    graph = capture([chain.z.grad_fn]).graph
    assert any(item.endswith("(freed)") for item in graph.nodes[0]["info"].saved)


def test_custom_function_kind():
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = torch.randn(3, requires_grad=True)
    out = Double.apply(x).sum()
    graph = capture([out.grad_fn]).graph
    kinds = {graph.nodes[n]["info"].name: graph.nodes[n]["info"].kind for n in graph.nodes}
    assert kinds == {"SumBackward0": "op", "DoubleBackward": "custom", "AccumulateGrad": "accumulate"}


def test_leaf_root():
    """backward() called on a leaf: the graph is its accumulator alone."""
    x = torch.randn(3, requires_grad=True)
    node = torch.autograd.graph.get_gradient_edge(x).node
    cap = capture([node], Names.from_scopes({"x": x}))
    assert names_of(cap.graph) == ["AccumulateGrad"]
    assert cap.graph.nodes[0]["info"].labels == ("x",)
    assert cap.graph.number_of_edges() == 0
    assert cap.roots == (0,)
    assert engine_order(cap.graph) == [0]


def test_leaf_root_through_a_session():
    x = torch.randn(3, requires_grad=True)
    events: list[ev.Event] = []
    with Session(events.append) as session:
        session.detach()
        x.backward(torch.ones(3))
    started = [e for e in events if isinstance(e, ev.PassStarted)]
    ran = [e for e in events if isinstance(e, ev.NodeRan)]
    assert len(started) == 1 and names_of(started[0].graph) == ["AccumulateGrad"]
    assert [e.node for e in ran] == [0]
    assert torch.equal(x.grad, torch.ones(3))


def test_sum_of_a_leaf():
    x = torch.randn(3, requires_grad=True)
    s = x.sum()
    cap = capture([s.grad_fn], Names.from_scopes({"x": x, "s": s}))
    assert names_of(cap.graph) == ["SumBackward0", "AccumulateGrad"]
    assert list(cap.graph.edges) == [(0, 1)]


def test_multiple_roots_share_nodes():
    x = torch.randn(3, requires_grad=True)
    h = x.exp()
    a = (h * 2).sum()
    b = (h * 3).sum()
    cap = capture([a.grad_fn, b.grad_fn], Names.from_scopes({"x": x, "h": h, "a": a, "b": b}))
    graph = cap.graph
    assert cap.roots == (0, 1)
    assert graph.nodes[0]["info"].labels == ("a",) and graph.nodes[1]["info"].labels == ("b",)
    (exp,) = [n for n in graph.nodes if graph.nodes[n]["info"].labels == ("h",)]
    assert graph.in_degree(exp) == 2  # both MulBackward0 send to it
    assert sum(1 for n in graph.nodes if graph.nodes[n]["info"].kind == "accumulate") == 1
    # the same root twice is one node
    assert capture([a.grad_fn, a.grad_fn]).roots == (0, 0)


def test_multiple_roots_through_a_session():
    x = torch.randn(3, requires_grad=True)
    h = x.exp()
    a = (h * 2).sum()
    b = (h * 3).sum()
    events: list[ev.Event] = []
    with Session(events.append) as session:
        session.detach()
        torch.autograd.backward([a, b])
    (started,) = [e for e in events if isinstance(e, ev.PassStarted)]
    assert started.roots == (0, 1)
    ran = [e.node for e in events if isinstance(e, ev.NodeRan)]
    assert sorted(ran) == sorted(started.graph.nodes)
    assert ran == engine_order(started.graph)
    assert torch.allclose(x.grad, 5 * h.detach())


def _engine_run(loss: torch.Tensor) -> tuple[nx.DiGraph, list[int]]:
    """Run backward under a detached session: the captured graph and the nodes in run order."""
    events: list[ev.Event] = []
    with Session(events.append) as session:
        session.detach()
        loss.backward()
    (started,) = [e for e in events if isinstance(e, ev.PassStarted)]
    ran = sorted((e for e in events if isinstance(e, ev.NodeRan)), key=lambda e: e.order)
    assert [e.order for e in ran] == list(range(1, len(ran) + 1))
    return started.graph, [e.node for e in ran]


def test_engine_order_matches_the_engine_on_a_transformer_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    x = torch.randn(5, 2, 8, requires_grad=True)
    loss = layer(x).pow(2).sum()
    graph, ran = _engine_run(loss)
    assert graph.number_of_nodes() > 40
    assert sorted(ran) == sorted(graph.nodes)  # every captured node ran, once
    assert engine_order(graph) == ran


def test_engine_order_matches_the_engine_on_an_lstm():
    torch.manual_seed(0)
    lstm = nn.LSTMCell(3, 4)
    h = c = torch.zeros(2, 4)
    for _ in range(3):
        h, c = lstm(torch.randn(2, 3), (h, c))
    graph, ran = _engine_run(h.sum() + c.mean())
    assert sorted(ran) == sorted(graph.nodes)
    assert engine_order(graph) == ran


def test_engine_order_of_the_chain(chain):
    assert engine_order(capture([chain.z.grad_fn]).graph) == [0, 1, 2]


def test_saved_tensors_packed_by_hooks_are_not_unpacked():
    """Reading `_saved_self` runs a saved-tensors unpack hook: under non-reentrant
    checkpointing, a recomputation of the checkpointed forward for every node captured."""
    from torch.utils.checkpoint import checkpoint

    calls = []

    def block(a):
        calls.append(1)
        return torch.tanh(a) * a

    x = torch.randn(2, 3, requires_grad=True)
    y = checkpoint(block, x, use_reentrant=False)
    with torch.autograd.graph.save_on_cpu():
        z = torch.sin(y)
    cap = capture([z.sum().grad_fn])
    saved = {data.name: data.saved for _, data in cap.graph.nodes(data="info")}
    assert saved["SinBackward0"] == ("self (packed by a saved-tensors hook)",)
    assert "self (packed by a saved-tensors hook)" in saved["MulBackward0"]
    assert len(calls) == 1  # the forward only: capturing recomputed nothing
    z.sum().backward()
    assert len(calls) == 2 and x.grad is not None


def test_saved_summaries_are_the_same_when_remembered():
    """Saved values are described once per shape/value and remembered: a second capture (and
    a second graph of the same shapes) reads the same text, scalars of equal value but other
    types (1, 1.0, True) keep their own spelling, and nothing that holds a tensor is kept."""
    import gc
    import weakref

    from gradtui.engine.capture import saved as saved_module

    x = torch.randn(3, 4, requires_grad=True)
    first = capture([(x @ x.t()).sum().grad_fn]).graph
    second = capture([(x @ x.t()).sum().grad_fn]).graph
    assert [d.saved for _, d in first.nodes(data="info")] == [d.saved for _, d in second.nodes(data="info")]
    assert any("self [3,4] float32" in s for _, d in first.nodes(data="info") for s in d.saved)
    assert saved_module._describe_saved(1) == "= 1"
    assert saved_module._describe_saved(1.0) == "= 1.0"
    assert saved_module._describe_saved(True) == "= True"
    t = torch.ones(2)
    assert saved_module._describe_saved((t, t)) == "[2 tensors]"
    assert saved_module._describe_saved((3, t)).startswith("= (3, tensor(")
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None, "the description cache kept a tensor alive"


def test_capture_leaves_the_collector_as_it_was():
    import gc

    x = torch.randn(3, requires_grad=True)
    assert gc.isenabled()
    capture([(x * 2).sum().grad_fn])
    assert gc.isenabled()
    gc.disable()
    try:
        capture([(x * 2).sum().grad_fn])
        assert not gc.isenabled()
    finally:
        gc.enable()
