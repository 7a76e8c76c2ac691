"""The promise of docs/contributing.md ("A node-list column"): a column showing a value the engine
reads of each node touches three source files. A copy of gradtui with a throwaway column added in
exactly those files (the NodeInfo field in gradtui/protocol/nodes.py, where the capture reads it in
gradtui/engine/capture/graph.py, its cell in gradtui/ui/widgets/node_rows.py) captures the value,
carries it over the wire (the agent's frame, encoded and decoded) and shows it in the node list,
with torch as the oracle: the value is each node's count of `next_functions` slots.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import patched_package

PATCHES = {
    "protocol/nodes.py": [
        (  # the field, with a default (a walk that does not describe leaves it unset)
            '    """"name [shape] dtype" / "name = value" per saved value of the node."""\n',
            '    """"name [shape] dtype" / "name = value" per saved value of the node."""\n'
            '    slots: int | None = None\n    """How many next_functions slots the node has (a throwaway column)."""\n',
        ),
        (
            "        saved: tuple[str, ...] = (),\n    ) -> None:\n",
            "        saved: tuple[str, ...] = (),\n        slots: int | None = None,\n    ) -> None:\n",
        ),
        ("        _SET_SAVED(self, saved)\n", "        _SET_SAVED(self, saved)\n        _SET_SLOTS(self, slots)\n"),
        (
            "        saved: tuple[str, ...],\n    ) -> NodeInfo:\n",
            "        saved: tuple[str, ...],\n        slots: int | None = None,\n    ) -> NodeInfo:\n",
        ),
        ("        _SET_SAVED(info, saved)\n", "        _SET_SAVED(info, saved)\n        _SET_SLOTS(info, slots)\n"),
        ("    _SET_SAVED,\n) = ", "    _SET_SAVED,\n    _SET_SLOTS,\n) = "),
    ],
    "engine/capture/graph.py": [
        (
            "            infos[i] = info.described(labels, param, None, None, None, module, saved_summary(node))\n",
            "            infos[i] = info.described(\n"
            "                labels, param, None, None, None, module, saved_summary(node), len(node.next_functions)\n"
            "            )\n",
        ),
        (
            "                labels, param, _source_text(*source), source[0], source[1], module, saved_summary(node)\n",
            "                labels,\n                param,\n                _source_text(*source),\n"
            "                source[0],\n                source[1],\n                module,\n"
            "                saved_summary(node),\n                len(node.next_functions),\n",
        ),
        (
            "                    leaf.labels, leaf.param, info.source, info.path, info.line, info.module, leaf.saved\n",
            "                    leaf.labels, leaf.param, info.source, info.path, info.line, info.module, leaf.saved, leaf.slots\n",
        ),
    ],
    "ui/widgets/node_rows.py": [
        (
            '            Segment(tags, base + self._style("label")),\n        ]\n',
            '            Segment(tags, base + self._style("label")),\n'
            '            Segment(f" slots={data.slots}", base),\n        ]\n',
        ),
    ],
}
"""What a contributor writes to add the column: the field, where the capture reads it, its cell."""

RUN = textwrap.dedent(
    """
    import torch
    from rich.style import Style
    from gradtui.engine.session import Session
    from gradtui.protocol import events as ev
    from gradtui.protocol.nodes import FIELDS, node_info
    from gradtui.ui.passview import PassView
    from gradtui.ui.widgets.node_rows import RowPainter, Widths
    from gradtui.wire import protocol
    from gradtui.wire.codec import from_wire, to_wire

    assert "slots" in FIELDS, "the copy is not the one imported"
    torch.manual_seed(0)
    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(5, 3)
    loss = torch.tanh(x @ w).sum() * 2.0
    expected = {}  # torch's own graph: each node's type name -> its count of next_functions slots
    todo = [loss.grad_fn]
    while todo:
        fn = todo.pop()
        expected[type(fn).__name__] = len(fn.next_functions)
        todo.extend(f for f, _ in fn.next_functions if f is not None)
    started = []
    session = Session(None, provenance=False)
    session.add_listener(lambda e: started.append(e) if isinstance(e, ev.PassStarted) else None)
    session.run_on()
    with session:
        loss.backward()
    (event,) = started
    captured = {node_info(event.graph, n).name: node_info(event.graph, n).slots for n in event.graph.nodes}
    assert captured == expected, (captured, expected)
    frame = protocol.encode({"events": [to_wire(event)]})  # the agent's frame, as it is sent
    (wired,) = [from_wire(e) for e in protocol.decode(frame[protocol.HEADER.size :])["events"]]
    carried = {node_info(wired.graph, n).name: node_info(wired.graph, n).slots for n in wired.graph.nodes}
    assert carried == expected, (carried, expected)
    view = PassView.from_event(wired)
    painter = RowPainter(lambda name: Style())
    painter.widths = Widths.of(view)
    for node in view.order:
        row = "".join(s.text for s in painter.node_row(view, node, 120, Style(), None, ()))
        name = node_info(view.graph, node).name
        assert f"slots={expected[name]}" in row, row
    print("ok", sorted(expected.items()))
    """
)


@pytest.mark.timeout(300)
def test_a_node_column_added_in_three_files_is_captured_carried_and_shown(tmp_path):
    """The throwaway column, in a copy of gradtui patched in the three files only."""
    tree = patched_package(tmp_path, PATCHES)
    done = subprocess.run(
        [sys.executable, "-c", RUN],
        env={**os.environ, "PYTHONPATH": str(tree), "GRADTUI_NATIVE": "off"},
        cwd=tmp_path,  # not this checkout's folder, which `python -c` would put first on the path
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")
