"""A captured pass's LazyGraph: answers its size and one node's NodeInfo unbuilt, becomes the very
networkx DiGraph an eager build makes on any other read, once, whichever thread reads first."""

from __future__ import annotations

import copy
import pickle
import threading

import networkx as nx
import pytest

from gradtui.protocol.lazygraph import INFO, LazyGraph, is_built
from gradtui.protocol.nodes import node_info, node_title, walked

pytestmark = pytest.mark.timeout(30)

# A diamond: 0 sends to 1 and 2, both send to the leaf 3 (2 through its second slot).
INFOS = [
    walked("MulBackward0", "op", 4, (1, 2)),
    walked("ExpBackward0", "op", 3, (3,)),
    walked("AddBackward0", "op", 2, (None, 3)),
    walked("AccumulateGrad", "accumulate", None, ()),
]


def eager() -> nx.DiGraph:
    """The graph a LazyGraph of INFOS must become, built the plain networkx way."""
    graph = nx.DiGraph()
    for i, info in enumerate(INFOS):
        graph.add_node(i, **{INFO: info})
    graph.add_edge(0, 1, slot=0)
    graph.add_edge(0, 2, slot=1)
    graph.add_edge(1, 3, slot=0)
    graph.add_edge(2, 3, slot=1)
    return graph


class Counted:
    """What makes the list, and the description that completes it, each counting its calls."""

    def __init__(self) -> None:
        self.made = self.completed = 0

    def infos(self) -> list:
        self.made += 1
        return INFOS

    def complete(self) -> None:
        self.completed += 1

    def graph(self) -> LazyGraph:
        return LazyGraph(self.infos, self.complete, len(INFOS))


def same(graph: nx.DiGraph, other: nx.DiGraph) -> bool:
    return dict(graph.nodes(data=True)) == dict(other.nodes(data=True)) and sorted(graph.edges(data="slot")) == sorted(
        other.edges(data="slot")
    )


def test_size_and_a_nodes_info_are_answered_without_building_it():
    counted = Counted()
    graph = counted.graph()
    assert len(graph) == graph.number_of_nodes() == 4 and bool(graph)
    assert node_info(graph, 3) is INFOS[3] and node_title(graph, 1) == "#1 ExpBackward0"
    assert not is_built(graph) and type(graph) is LazyGraph
    assert counted.completed == 1  # the description ran once, before the first NodeInfo was read


@pytest.mark.parametrize(
    "read",
    [
        lambda g: g.nodes[0],
        lambda g: list(g),
        lambda g: 2 in g,
        lambda g: g[0],
        lambda g: g.is_directed(),
        lambda g: list(nx.topological_generations(g)),
        lambda g: pickle.dumps(g),
        lambda g: copy.deepcopy(g),
    ],
)
def test_any_other_read_makes_it_the_networkx_graph_an_eager_build_makes(read):
    counted = Counted()
    graph = counted.graph()
    read(graph)
    assert is_built(graph) and type(graph) is nx.DiGraph
    assert same(graph, eager()) and node_info(graph, 2) is INFOS[2]
    assert counted.made == counted.completed == 1
    assert "_lazy" not in graph.__dict__ and "_count" not in graph.__dict__
    assert same(pickle.loads(pickle.dumps(graph)), eager())


def test_a_copy_and_a_pickle_of_an_unbuilt_graph_are_networkx_graphs():
    for made in (copy.copy(Counted().graph()), pickle.loads(pickle.dumps(Counted().graph()))):
        assert type(made) is nx.DiGraph and same(made, eager())


def test_an_empty_one_is_an_empty_digraph_once_read():
    graph = LazyGraph(list, None, 0)
    assert len(graph) == 0 and not graph
    assert list(graph.edges) == [] and type(graph) is nx.DiGraph


def test_threads_reading_at_once_build_it_once():
    counted = Counted()
    graph = counted.graph()
    start = threading.Barrier(8)
    seen: list[object] = []

    def read(k: int) -> None:  # half build it, half ask one node's NodeInfo, all at once
        start.wait(timeout=10)
        seen.append(graph.nodes[3][INFO] if k % 2 else node_info(graph, 3))

    threads = [threading.Thread(target=read, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)
    assert seen == [INFOS[3]] * 8 and counted.completed == 1 and same(graph, eager())
