"""A notebook cell's source: IPython keeps a cell's text in `linecache` only, under a
file name not on disk, so the agent sends it (a `SourceText` event, once per file) for a client in
another process; files on disk are read by the client itself and never sent."""

from __future__ import annotations

import linecache
from pathlib import Path

import pytest

from gradtui.agent.backlog import Backlog
from gradtui.engine.provenance.forward import UnsavedSources
from gradtui.protocol import events as ev
from gradtui.wire.codec import from_wire, to_wire
from tests.helpers import run_headless

pytestmark = pytest.mark.timeout(60)

CELL_SCRIPT = str(Path(__file__).resolve().parents[2] / "fixtures" / "ui" / "notebook_cell.py")


def test_the_cell_text_is_sent_once_before_the_pass_that_names_it_and_no_file_on_disk_is():
    run = run_headless(CELL_SCRIPT, ["continue"])
    assert run.status == 0, run.output
    texts = run.of(ev.SourceText)
    (started,) = run.of(ev.PassStarted)
    cell = next(d.path for _, d in started.graph.nodes(data="info") if d.name == "TanhBackward0")
    assert [t.path for t in texts] == [cell]  # only the cell: the script file is on disk
    assert run.events.index(texts[0]) < run.events.index(started)
    assert texts[0].lines == tuple(linecache.getlines(cell))
    assert "hidden = torch.tanh(weight * 2.0)  # the cell's own line\n" in texts[0].lines
    assert from_wire(to_wire(texts[0])) == texts[0]  # it travels


def test_each_file_is_looked_at_once(tmp_path):
    cell = str(tmp_path / "no-such-dir" / "123.py")
    linecache.cache[cell] = (4, None, ["x=1\n"], cell)
    on_disk = tmp_path / "real.py"
    on_disk.write_text("y = 2\n")
    try:
        sources = UnsavedSources()
        first = sources.new([cell, str(on_disk), None, cell])
        assert first == [ev.SourceText(cell, ("x=1\n",))]
        assert sources.new([cell, str(on_disk)]) == []  # sent already
    finally:
        linecache.cache.pop(cell, None)


def test_a_client_attaching_late_gets_every_cell_text_sent():
    backlog = Backlog()
    texts = [ev.SourceText(f"/tmp/ipykernel_1/{n}.py", ("a = 1\n",)) for n in range(2)]
    backlog.add(texts[0])
    backlog.add(ev.PassStarted(0, "backward", "", "", None))  # type: ignore[arg-type]
    backlog.add(texts[1])
    backlog.add(ev.PassStarted(1, "backward", "", "", None))  # type: ignore[arg-type]
    replayed = backlog.replay()
    assert all(t in replayed for t in texts)
