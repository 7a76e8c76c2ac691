"""The variables where backward was called: read once per pass, at its first pause
(a pass in `continue` never pays for them), each tensor with its node on the pass's graph."""

from __future__ import annotations

import pytest

from gradtui.protocol import events as ev
from gradtui.wire.codec import from_wire, to_wire
from tests.helpers import run_headless, script

pytestmark = pytest.mark.timeout(60)


def test_sent_once_at_the_first_pause_of_a_pass_with_each_tensors_node():
    run = run_headless(script("loop.py"), ["step", "step", "finish", "continue"], ["3"])
    assert run.status == 0, run.output
    told = run.of(ev.CallSiteVariables)
    assert [t.pass_index for t in told] == [0, 1]  # passes 0 and 1 paused; pass 2 ran on in continue
    first = told[0]
    assert run.events.index(first) < run.events.index(run.pauses[0])
    assert first.call_site.startswith("loop.py:")
    by_name = {v.name: v for v in first.variables}
    assert set(by_name) == {"x", "y", "z"}
    started = run.of(ev.PassStarted)[0]
    graph = started.graph
    assert by_name["z"].nodes == (0,) and graph.nodes[0]["info"].labels == ("z",)
    assert by_name["y"].nodes == (1,) and graph.nodes[1]["info"].labels == ("y",)
    (x_node,) = by_name["x"].nodes
    assert graph.nodes[x_node]["info"].kind == "accumulate" and graph.nodes[x_node]["info"].labels == ("x",)
    assert by_name["x"].shape == (1,) and by_name["x"].dtype == "float32" and by_name["x"].requires_grad
    assert from_wire(to_wire(first)) == first


def test_a_run_that_never_pauses_reads_no_variables():
    run = run_headless(script("loop.py"), ["continue"], ["3"])  # the first pass pauses, the rest run on
    assert [t.pass_index for t in run.of(ev.CallSiteVariables)] == [0]
    armed = run_headless(script("loop.py"), ["break nan", "continue"], ["3"])
    assert [t.pass_index for t in armed.of(ev.CallSiteVariables)] == [0]  # nan never hits
