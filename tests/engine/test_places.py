"""Every node says where it came from (file:line and module), and breakpoints by place
or module stop where they name."""

from __future__ import annotations

import linecache

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.nodes import NodeInfo
from tests.helpers import run_headless, script

pytestmark = pytest.mark.timeout(120)


def _line_text(node: NodeInfo) -> str:
    return linecache.getline(node.path, node.line).strip()


def test_every_node_of_a_two_file_mlp_has_a_user_source():
    run = run_headless(script("twofile/train.py"), ["continue"])
    assert run.status == 0, run.output
    passes = run.of(ev.PassStarted)
    assert len(passes) == 2
    for started in passes:
        graph = started.graph
        for i, data in graph.nodes(data="info"):
            assert data.source is not None, (i, data.name)
            assert data.source.split(":")[0] in ("model.py", "train.py"), data.source
        addmm = [d for _, d in graph.nodes(data="info") if d.name == "AddmmBackward0"]
        second = [d for d in addmm if d.module == "fc2"]
        assert len(second) == 1
        assert _line_text(second[0]) == "return self.fc2(h)"
        assert second[0].source.startswith("model.py:")
        # A parameter is placed where its layer ran.
        weight = next(d for _, d in graph.nodes(data="info") if d.param == "fc2.weight")
        assert (weight.module, weight.source) == ("fc2", second[0].source)
        loss = graph.nodes[started.roots[0]]["info"]
        assert _line_text(loss) == "loss = torch.nn.functional.mse_loss(net(x), y)"


def test_the_report_fills_source_and_module():
    run = run_headless(script("twofile/train.py"), ["continue"])
    nodes = run.report.to_json()["passes"][0]["nodes"]
    assert all(n["source"] for n in nodes)
    assert {n["module"] for n in nodes} >= {"fc1", "fc2", "net"}


def test_transformer_encoder_nodes_name_module_paths_and_the_calling_line():
    run = run_headless(script("encoder.py"), ["continue"])
    assert run.status == 0, run.output
    graph = run.of(ev.PassStarted)[0].graph
    modules = {d.module for _, d in graph.nodes(data="info")}
    assert {"layers.0.self_attn", "layers.1.self_attn", "layers.0.linear1", "layers.1.norm2"} <= modules
    inside = [d for _, d in graph.nodes(data="info") if d.module and d.module.startswith("layers.")]
    assert inside and all(_line_text(d) == "out = encoder(x)" for d in inside)


def test_break_module_stops_at_the_first_node_of_the_module_once_per_pass():
    run = run_headless(script("twofile/train.py"), ["break module fc2", "continue", "continue", "continue"])
    assert run.status == 0, run.output
    graph = run.of(ev.PassStarted)[0].graph
    ran = [e.node for e in run.of(ev.NodeRan) if e.pass_index == 0]
    first_fc2 = next(n for n in ran if graph.nodes[n]["info"].module == "fc2")
    assert run.where == [(0, 0), (0, first_fc2), (1, first_fc2)]
    assert all(p.reason == "breakpoint 1: module fc2" for p in run.pauses[1:])


def test_break_module_glob_and_break_at_a_line():
    run = run_headless(script("encoder.py"), ["break module layers.*.linear2", "continue", "continue", "continue"])
    graph = run.of(ev.PassStarted)[0].graph
    stops = [graph.nodes[p.node]["info"].module for p in run.pauses[1:]]
    assert stops == ["layers.1.linear2"]  # once per pass: the engine reaches layer 1 first
    line = next(
        d.line
        for _, d in run_headless(script("twofile/train.py"), ["continue"])
        .of(ev.PassStarted)[0]
        .graph.nodes(data="info")
        if d.module == "fc1" and d.name == "AddmmBackward0"
    )
    run = run_headless(script("twofile/train.py"), [f"break model.py:{line}", "continue", "continue"])
    graph = run.of(ev.PassStarted)[0].graph
    stop = run.pauses[1]
    assert graph.nodes[stop.node]["info"].line == line and stop.reason == f"breakpoint 1: model.py:{line}"
    assert [p.pass_index for p in run.pauses] == [0, 0, 1]


def test_custom_function_nodes_get_the_line_that_applied_them():
    run = run_headless(script("custom_fn.py"), ["continue"])
    graph = run.of(ev.PassStarted)[0].graph
    custom = [d for _, d in graph.nodes(data="info") if d.kind == "custom"]
    assert custom and all(d.source and ".apply(" in _line_text(d) for d in custom)
