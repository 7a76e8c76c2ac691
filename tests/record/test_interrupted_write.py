"""A KeyboardInterrupt landing inside the recording's transaction (the script's own print, whose
Output fan-out lets SIGINT through: gradtui.engine.process.deferral) leaves nothing half-committed: the
transaction is rolled back, its rows are written by the next commit, and the recording goes on."""

from __future__ import annotations

import pytest

from gradtui.protocol import events as ev
from gradtui.record.reader import Recording
from gradtui.record.store import OUTPUT_BATCH, Recorder
from tests.helpers import interrupting


def test_an_interrupt_inside_the_transaction_loses_and_repeats_no_row(tmp_path):
    path = str(tmp_path / "run.db")
    recorder = Recorder(path)
    recorder(ev.ScriptStarted("script.py", ("script.py",)))
    lines = [f"line {i}\n" for i in range(OUTPUT_BATCH)]
    for text in lines[:-1]:
        recorder(ev.Output("stdout", text))
    with pytest.raises(KeyboardInterrupt):  # the batch's commit, its last row bound
        recorder(ev.Output("stdout", interrupting(lines[-1])))
    recorder(ev.Output("stdout", "after\n"))
    recorder(ev.ScriptFinished(130))
    recorder.close()
    assert recorder.failed is None
    recording = Recording(path)
    try:
        assert [line.text for line in recording.output()] == [*lines, "after\n"]
        assert recording.run().exit_status == 130
        assert recording.damage == []
    finally:
        recording.close()
