"""A recording's memory is what it writes, not more: writing a pass's per-node rows reads the
nodes' NodeInfo list and never builds the pass's networkx graph (built, a 200,000-node pass's
graph took ~170 MB more than the list; nothing else in a headless `--record` run builds it)."""

from __future__ import annotations

import sqlite3
import tracemalloc

import pytest
import torch

from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse  # noqa: E402
from gradtui.protocol.lazygraph import is_built, node_infos
from gradtui.record.store import Recorder

pytestmark = pytest.mark.timeout(120)


def _recorded(path, params: int):
    """One pass over `params` leaves under a session in `continue` with a `nan` watch, recorded
    node by node into `path`, as `--headless -c 'break nan' -c continue --record` runs it; the
    PassStarted event and the traced peak of the pass (bytes)."""
    recorder = Recorder(str(path), torch_version=torch.__version__)
    started: list[ev.PassStarted] = []
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(recorder, leaves=False)  # as the agent adds it: it writes the flow, not the leaves' Stats
    session.add_listener(lambda e: started.append(e) if isinstance(e, ev.PassStarted) else None, graph=False)
    session.submit(parse("break nan"))
    session.run_on()
    leaves = [torch.randn(4, requires_grad=True) for _ in range(params)]
    loss = torch.stack([p.sum() for p in leaves]).sum()
    tracemalloc.start()
    try:
        with session:
            loss.backward()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    recorder.close()
    return started[0], peak


def test_recording_a_pass_node_by_node_builds_no_networkx_graph(tmp_path):
    started, _ = _recorded(tmp_path / "run.db", 200)
    assert not is_built(started.graph)
    with sqlite3.connect(tmp_path / "run.db") as db:
        rows = db.execute("SELECT id, op, next FROM nodes WHERE pass = ? ORDER BY id", (started.pass_index,)).fetchall()
    infos = node_infos(started.graph)
    assert len(rows) == len(infos) == 402  # 200 accumulators and sums, the stack, the loss's sum
    assert [(i, d.name) for i, d in enumerate(infos)] == [(node, name) for node, name, _ in rows]
    assert not is_built(started.graph)


def test_node_infos_of_a_built_graph_are_its_nodes_infos(tmp_path):
    started, _ = _recorded(tmp_path / "run.db", 20)
    before = node_infos(started.graph)
    graph = started.graph
    assert graph.number_of_nodes() == len(before)
    list(graph)  # read as a networkx graph: built
    assert is_built(graph)
    assert node_infos(graph) == before


def test_the_traced_peak_of_a_recorded_pass_grows_in_proportion_to_its_nodes(tmp_path):
    """Bytes, not time: the traced peak per leaf (two nodes each) stays the same from 2,000 to
    8,000 leaves (nothing kept grows faster than the pass) and under a bound: ~2.5 KB a leaf
    now, ~3.4 KB while the recording kept a pass's events until it ended and the pass made its
    leaves' statistics for it, ~3.7 KB while the flow's rows were a list and the nodes' order a
    dict, ~7.8 KB when the recording built the pass's networkx graph and held its rows in lists."""
    _, small = _recorded(tmp_path / "small.db", 2000)
    _, big = _recorded(tmp_path / "big.db", 8000)
    per_leaf = big / 8000
    assert per_leaf < 3000, f"{per_leaf:.0f} bytes a leaf"
    assert big / small < 4 * 1.25  # proportional (a fixed part makes the small run's share larger)
