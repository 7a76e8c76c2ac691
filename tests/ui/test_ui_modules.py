"""The module tree, pass history and gradient flow models, on hand-made events (no torch run)."""

from __future__ import annotations

import math

from gradtui.protocol import events as ev
from gradtui.ui.history import KEEP_NORMS, KEEP_SUMMARIES, KEEP_VIEWS
from gradtui.ui.modtree import NO_MODULE, ModuleTree, display_name
from gradtui.ui.state import UIState
from tests.helpers import MLP, finished, ran, run_mlp_pass, started


def fold(events) -> UIState:
    state = UIState("train.py")
    for event in events:
        state.apply(event)
    return state


def test_tree_groups_nodes_and_parameters_by_module():
    state = fold([started(0)])
    tree = ModuleTree(state.view)
    assert tree.top == ["act", "fc1", "fc2", NO_MODULE]
    assert [r.module for r in tree.rows] == tree.top  # all collapsed
    assert tree.modules["fc2"].nodes == [1, 2, 4, 6]  # engine order; fc2.bias, fc2.weight belong to fc2
    assert tree.modules[NO_MODULE].nodes == [0]
    assert tree.stats("fc1").count == 4 and tree.stats(NO_MODULE).count == 1

    tree.toggle("fc2")
    assert [(r.depth, r.module, r.node) for r in tree.rows[2:7]] == [
        (0, "fc2", None),
        (1, None, 1),
        (1, None, 2),
        (1, None, 4),
        (1, None, 6),
    ]
    tree.toggle("fc2")
    assert len(tree.rows) == 4
    assert tree.reveal(8) == 4 and tree.rows[4].node == 8  # fc1 expanded to show #8 (after #5, #7)


def test_module_paths_with_non_ascii_digit_keys_sort_and_show():
    """A ModuleDict key may be any text: `²` and `①` pass `str.isdigit` but `int()` refuses them,
    which made the module view raise on such a model; numbers still sort as numbers."""
    nodes = [
        ("MseLossBackward0", None, None, (1,)),
        ("AddmmBackward0", "blocks.²", None, (2,)),
        ("AddmmBackward0", "blocks.10", None, (3,)),
        ("AddmmBackward0", "blocks.9", None, (4,)),
        ("AddmmBackward0", "blocks.①", None, (5,)),
        ("AddmmBackward0", "blocks.٣", None, ()),
    ]
    tree = ModuleTree(fold([started(0, nodes)]).view)
    assert tree.modules["blocks"].children == ["blocks.9", "blocks.10", "blocks.²", "blocks.٣", "blocks.①"]
    tree.toggle("blocks")
    names = [display_name(tree.modules[r.module]) for r in tree.rows if r.module and r.module != NO_MODULE]
    assert names == ["blocks", "blocks.9", "blocks.10", "²", "٣", "①"]  # only ASCII numbers read as list indexes


def test_module_outgoing_norm_counts_only_gradient_leaving_the_module():
    events = [started(0)]
    # fc2's Addmm (#1) sends 3 to fc2.bias (inside), 4 to act (outside), 12 to its T (inside)
    events.append(ran(0, 0, 1, 1.0, (2.0,)))
    events.append(ran(0, 1, 2, 2.0, (3.0, 4.0, 12.0)))
    state = fold(events)
    tree = ModuleTree(state.view)
    assert tree.stats("fc2").out_norm == 4.0
    assert tree.stats(NO_MODULE).out_norm == 2.0
    assert tree.stats("fc1").out_norm is None and tree.stats("fc2").ran == 1
    # act (#3) sends 5 to fc1 and fc1's Addmm (#5) sends nothing outside fc1 (bias, T are inside)
    state.apply(ran(0, 3, 3, 4.0, (5.0,), nonfinite=1))
    state.apply(ran(0, 5, 4, 5.0, (1.0, None, 1.0)))
    assert tree.stats("act").out_norm == 5.0 and tree.stats("act").nonfinite
    assert not tree.stats("fc2").nonfinite
    assert tree.stats("fc1").out_norm is None


def test_nested_modules_sum_squares_of_everything_leaving_them():
    nodes = [
        ("SumBackward0", None, None, (1, 2)),  # 0
        ("MulBackward0", "enc.layers.0.ff", None, (3,)),  # 1
        ("MulBackward0", "enc.layers.1.ff", None, (3,)),  # 2
        ("AccumulateGrad", None, "x", ()),  # 3 a leaf, no module
    ]
    state = fold(
        [started(0, nodes), ran(0, 0, 1, 1.0, (1.0, 1.0)), ran(0, 1, 2, 1.0, (3.0,)), ran(0, 2, 3, 1.0, (4.0,))]
    )
    tree = ModuleTree(state.view)
    assert tree.top == ["enc", NO_MODULE]
    assert tree.stats("enc").out_norm == 5.0  # sqrt(3² + 4²)
    assert tree.stats("enc.layers.1").out_norm == 4.0 and tree.stats("enc").count == 2
    assert display_name(tree.modules["enc.layers.1"]) == "layers.1"
    assert display_name(tree.modules["enc.layers.1.ff"]) == "ff"


def _encoder(layers: int = 48, per_block: int = 13):
    """A 3,000-node chain shaped like an encoder: per layer an attention and a feed-forward block."""
    nodes = [("SumBackward0", None, None, (1,))]
    for layer in reversed(range(layers)):
        for block in ("self_attn", "linear2", "linear1", "norm1", ""):
            module = f"layers.{layer}" + (f".{block}" if block else "")
            for _ in range(per_block):
                nodes.append(("MulBackward0", module, None, (len(nodes) + 1,)))
    nodes.append(("AccumulateGrad", None, "src", ()))
    return nodes


def test_a_3000_node_encoder_folds_to_a_few_dozen_rows():
    nodes = _encoder()
    assert len(nodes) >= 3000
    tree = ModuleTree(fold([started(0, nodes)]).view)
    assert len(tree.rows) == 2  # layers, (no module)
    tree.auto_expand()
    assert 40 <= len(tree.rows) <= 60
    assert [r.module for r in tree.rows[1:4]] == ["layers.0", "layers.1", "layers.2"]  # natural order
    assert tree.rows[10].module == "layers.9" and tree.rows[11].module == "layers.10"


def test_history_keeps_bounded_views_summaries_and_norms():
    state = UIState("train.py")
    for index in range(KEEP_SUMMARIES + 50):
        for event in run_mlp_pass(index, scale=index + 1.0):
            state.apply(event)
    assert len(state.views) == KEEP_VIEWS and state.views[-1] is state.live
    assert len(state.summaries) == KEEP_SUMMARIES and state.summaries[-1].losses == (KEEP_SUMMARIES + 50.0,)
    series = state.norms.series(3, "TanhBackward0")
    assert len(series) == KEEP_NORMS
    last = KEEP_SUMMARIES + 49
    assert series[-1] == (last, (last + 1.0) * 4)
    assert state.norms.series(3, "AddmmBackward0") == []  # another op at that id: no match
    # every norm record of the same graph shape shares one names tuple
    assert len({id(r.names) for r in state.norms.records}) == 1


def test_unrecorded_passes_and_browsing():
    state = fold(run_mlp_pass(0) + run_mlp_pass(1, scale=2.0))
    state.apply(started(2, losses=(0.25,), recorded=False))
    state.apply(finished(2, total=0))
    assert state.view.recorded is False and state.view.order == []
    assert "unhooked" in state.pass_text() and "loss 0.25" in state.pass_text()
    assert state.norms.series(0, "MseLossBackward0") == [(0, 1.0), (1, 2.0)]

    change = state.browse(-1)
    assert change.new_pass and state.view.index == 1 and state.browsed is state.views[1]
    assert state.pass_text() == "pass 1 · loss 2 · loss.backward() · browsing · live is 2"
    assert state.browse(-1) and state.view.index == 0
    assert state.browse(-1) is None  # nothing older kept
    # events of a new live pass do not touch the rows of the pass on screen
    change = state.apply(started(3))
    assert not change.new_pass and state.view.index == 0
    assert state.apply(ran(3, 0, 1, 1.0)).rows == set()
    assert state.browse(1).new_pass and state.view.index == 1
    # a pause brings the live pass back
    state.apply(ev.Paused(3, 1, "AddmmBackward0", "before", "step", (), 1, len(MLP)))
    assert state.browsed is None and state.view.index == 3 and state.current == 1


def test_nested_pass_is_a_log_line():
    change = UIState("t.py").apply(ev.NestedPass(3, "backward", "ckpt.py:12", 41, "Thread-2"))
    assert change.log == ["nested backward at ckpt.py:12 in pass 3 from thread Thread-2: 41 nodes, ran unhooked"]


def test_flow_is_kept_with_its_pass():
    flow = (
        ev.ParamFlow("fc1.weight", 9, (4,), 1e-9, 1.0, 1e-9, 0),
        ev.ParamFlow("fc2.weight", 6, (4,), math.nan, 1.0, math.nan, 4),
    )
    state = fold(run_mlp_pass(0, flow=flow))
    assert state.view.flow == flow
