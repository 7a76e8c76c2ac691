"""The headless printer's memory does not grow with the passes it has not printed yet: a run of
unhooked passes (under `-c continue`, every pass of a long loop) is said in one line when it ends,
and until then the printer keeps its first and last index, not every one (a list of them grew
~40 bytes a pass, for the whole run). Measured with tracemalloc: what the printer holds after
2N unhooked passes is what it held after N."""

from __future__ import annotations

import io
import tracemalloc

import networkx as nx
import pytest

from gradtui.clients.headless import HeadlessDriver
from gradtui.protocol import events as ev

pytestmark = pytest.mark.timeout(60)

PASSES = 5000
SLACK = 2048
"""Bytes the traced memory may differ by (the allocator's own noise); a pass's index kept costs
~40 bytes, so PASSES more would be ~200,000."""


class NoTarget:
    """A target that is never asked anything: no pause comes, so no command is sent."""

    def submit(self, text: str) -> None:
        raise AssertionError(f"unexpected command {text!r}")

    def detach(self) -> None:
        raise AssertionError("unexpected detach")


def test_unhooked_passes_cost_the_headless_printer_nothing_per_pass():
    out = io.StringIO()
    driver = HeadlessDriver(NoTarget(), [], out)
    graph = nx.DiGraph()

    def passes(start: int, count: int) -> None:
        for index in range(start, start + count):
            driver(ev.PassStarted(index, "backward", "loss.backward()", "train.py:9", graph, recorded=False))
            driver(ev.PassFinished(index, 0, 0))

    passes(0, 100)  # whatever is made once is made
    tracemalloc.start()
    try:
        passes(100, PASSES)
        after_n = tracemalloc.get_traced_memory()[0]
        passes(100 + PASSES, PASSES)
        after_2n = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert abs(after_2n - after_n) < SLACK, f"{(after_2n - after_n) / PASSES:.1f} bytes per pass"
    assert out.getvalue() == ""  # nothing said yet: the run of unhooked passes has not ended
    driver(ev.ScriptFinished(0))
    assert f"passes 0-{2 * PASSES + 99} ran unhooked at plain speed" in out.getvalue()
