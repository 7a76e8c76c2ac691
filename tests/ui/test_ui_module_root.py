"""The module tree's root: the root module's own ops sit in the row above its children (not
beside them), and a root that made no node of its own (an nn.TransformerEncoder) is still the
row its children hang from. Real runs: the engine says which root the paths are shown without."""

from __future__ import annotations

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.nodes import node_info
from gradtui.ui.modtree import NO_MODULE, ModuleTree, display_name
from gradtui.ui.state import UIState
from tests.helpers import run_headless, script

pytestmark = pytest.mark.timeout(120)


def tree_of(name: str) -> ModuleTree:
    run = run_headless(script(name), ["continue"])
    assert run.status == 0, run.output
    state = UIState(name)
    for event in run.events:
        if isinstance(event, (ev.PassStarted, ev.NodeRan, ev.PassFinished)):
            state.apply(event)
    return ModuleTree(state.view)


def test_the_roots_own_ops_are_above_its_children():
    tree = tree_of("own_ops.py")
    graph = tree.view.graph
    modules = {node_info(graph, n).module for n in graph.nodes}
    assert {"model", "body.0", "head"} <= modules  # the paths as the pass shows them (break module uses them)
    assert tree.top[0] == "model" and set(tree.top) <= {"model", NO_MODULE}
    root = tree.modules["model"]
    assert root.children == ["body", "head"]
    assert tree.modules["body"].children == ["body.0", "body.1"]
    assert [display_name(tree.modules[p]) for p in ("model", "body", "head", "body.0")] == [
        "model",
        "body",
        "head",
        "body.0",
    ]
    own = [n for n in root.nodes if node_info(graph, n).kind != "accumulate"]
    assert own and all(node_info(graph, n).module == "model" for n in own)  # log_softmax, mean, mul, neg
    assert [node_info(graph, n).param for n in root.nodes if node_info(graph, n).kind == "accumulate"] == ["scale"]
    outside = len(tree.modules[NO_MODULE].nodes) if NO_MODULE in tree.modules else 0
    assert root.count == graph.number_of_nodes() - outside  # everything the model made is under its row


def test_the_root_reaches_a_client_in_another_process():
    """`gradtui attach` and the browser get the pass over the wire: the root comes with its graph."""
    import json

    from gradtui.wire.codec import from_wire, to_wire

    run = run_headless(script("own_ops.py"), ["continue"])
    [started] = run.of(ev.PassStarted)
    state = UIState("own_ops.py")
    state.apply(from_wire(json.loads(json.dumps(to_wire(started)))))
    tree = ModuleTree(state.view)
    assert tree.top[0] == "model" and tree.modules["model"].children == ["body", "head"]


def test_a_transformer_encoder_root_is_a_row_above_its_layers():
    tree = tree_of("encoder.py")
    assert tree.top[0] == "encoder"
    assert tree.modules["encoder"].children == ["layers"]
    assert tree.modules["layers"].parent == "encoder"
    tree.auto_expand()
    assert tree.rows[0].module == "encoder" and tree.rows[0].depth == 0
    assert next(r for r in tree.rows if r.module == "layers").depth == 1


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_the_module_view_opens_with_the_paused_node_on_screen(size):
    """The demo's first pause is at #0, the loss, at the foot of the module tree: at 80x24 the
    tree has more rows than the list had, and the view opened scrolled to the top without it."""
    from gradtui.cli.main import demo_path
    from gradtui.ui.app import GradtuiApp
    from gradtui.ui.widgets.node_list import NodeList
    from tests.helpers import wait_for, wait_paused_at

    app = GradtuiApp(demo_path())
    async with app.run_test(size=size) as pilot:
        await wait_paused_at(pilot, 0)
        nodes = app.query_one(NodeList)
        await pilot.press("m")
        await wait_for(pilot, lambda: nodes.by_module and nodes.selected == 0, what="the module view at #0")
        await pilot.pause()
        await pilot.pause()
        tree = nodes.tree
        assert [tree.rows[0].module, tree.rows[1].module] == ["model", "fc1"]  # the root above its children
        row = nodes.cursor
        assert tree.rows[row].node == 0
        top = round(nodes.scroll_offset.y)
        assert top <= row < top + nodes.size.height, (row, top, nodes.size.height)
        assert nodes.render_line(row - top).text.split()[:2] == ["▶", "0"]  # drawn: the paused marker on #0
        await pilot.press("q")
