"""NodeInfo (gradtui.protocol.nodes): a captured node as frozen, slotted plain data, the same
whichever way it was made (the walk's `walked`, a description's `described`, `__init__`)."""

from __future__ import annotations

import dataclasses
import pickle

import networkx as nx
import pytest

from gradtui.protocol.nodes import INFO, NodeInfo, engine_order, info_title, node_info, node_title, walked


def test_a_walked_node_is_the_node_info_it_stands_for():
    full = NodeInfo("AccumulateGrad", "accumulate", 7, (), ("w",), "fc.weight")
    made = walked("AccumulateGrad", "accumulate", 7, (), ("w",), "fc.weight")
    bare = walked("MulBackward0", "op", 3, (1, None))
    assert made == full and hash(made) == hash(full) and repr(made) == repr(full)
    assert bare == NodeInfo("MulBackward0", "op", 3, (1, None))
    assert (bare.labels, bare.param, bare.source, bare.path, bare.line, bare.module, bare.saved) == (
        (),
        None,
        None,
        None,
        None,
        None,
        (),
    )
    assert pickle.loads(pickle.dumps(bare)) == bare and dataclasses.astuple(bare) == dataclasses.astuple(
        NodeInfo("MulBackward0", "op", 3, (1, None))
    )
    with pytest.raises(AttributeError):
        bare.no_such_field  # noqa: B018 - a name that is no field is still an error


def test_node_info_is_frozen_and_slotted():
    info = walked("MulBackward0", "op", 3, (1,))
    for name in ("name", "labels", "saved", "anything"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(info, name, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        del info.name
    assert not hasattr(info, "__dict__")
    assert [f.name for f in dataclasses.fields(NodeInfo)] == [
        "name",
        "kind",
        "seq",
        "next",
        "labels",
        "param",
        "source",
        "path",
        "line",
        "module",
        "saved",
    ]


def test_described_is_replace():
    info = walked("AddmmBackward0", "op", 9, (1, 2, 3))
    described = info.described(("h",), None, "m.py:3", "/x/m.py", 3, "fc", ("mat1 [4,8] float32",))
    assert described == dataclasses.replace(
        info, labels=("h",), source="m.py:3", path="/x/m.py", line=3, module="fc", saved=("mat1 [4,8] float32",)
    )
    assert info.source is None  # replaced, not changed


def test_a_pass_graph_carries_one_node_info_per_node():
    graph = nx.DiGraph()
    graph.add_node(0, **{INFO: NodeInfo("SumBackward0", "op", 5, (1, 2), ("loss",))})
    graph.add_node(1, **{INFO: NodeInfo("MulBackward0", "op", 4, (2,), (), None)})
    graph.add_node(2, **{INFO: NodeInfo("AccumulateGrad", "accumulate", 2**64 - 1, (), ("x",), "fc.weight")})
    graph.add_edges_from([(0, 1, {"slot": 0}), (0, 2, {"slot": 1}), (1, 2, {"slot": 0})])
    assert node_info(graph, 2).param == "fc.weight" and node_info(graph, 2).tags == ["x", "fc.weight"]
    assert node_title(graph, 0) == "#0 SumBackward0 (loss)" == info_title(node_info(graph, 0), 0)
    assert engine_order(graph) == [0, 1, 2]
