"""A signal that lands while gradtui writes a just-finished pass on the script's thread (the
recording's transaction, the report's stream) is acted on once that write is done, as python would
have acted on it right there: the process dies of it as `python script.py` does, the write it
landed in is complete, and the report and the recording say how the run ended.

Deterministic: a launcher wraps the write so that the process signals itself from inside it, then
runs gradtui's entry point (`python -m gradtui` minus the -m). Each test ends the process it starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.cli.test_exits import TIMEOUT, plain
from tests.helpers import script

from gradtui.record.reader import Recording

pytestmark = pytest.mark.timeout(240)

LAUNCHER = """
import os, signal, sys
site, signum = sys.argv[1], getattr(signal, sys.argv[2])
if site == "record":
    from gradtui.record.store import Recorder as owner
    name = "_pass_finished"
else:
    from gradtui.model.report import JsonStream as owner
    name = "add_pass"
write = getattr(owner, name)
fired = []

def signalled(self, *args):
    if not fired:
        fired.append(True)
        print("signalled", file=sys.__stderr__, flush=True)
        os.kill(os.getpid(), signum)  # its handler runs at the next call: inside this write
    return write(self, *args)

setattr(owner, name, signalled)
sys.argv = ["gradtui", *sys.argv[3:]]
from gradtui.cli.main import main
sys.exit(main())
"""
"""`python -c LAUNCHER SITE SIGNAL gradtui-args...`: SITE `record` signals inside the recording's
write of a finished pass (the Recorder's lock held), `report` inside the report's (JsonStream)."""

WRITES = [("record", "SIGTERM"), ("record", "SIGINT"), ("report", "SIGTERM"), ("report", "SIGINT")]


@pytest.mark.parametrize(("site", "name"), WRITES)
def test_a_signal_inside_a_pass_write_ends_the_run_as_python(site, name, tmp_path):
    report, db = tmp_path / "report.json", tmp_path / "run.db"
    command = [sys.executable, "-c", LAUNCHER, site, name, "--headless", "-c", "continue",
               "--report", str(report), "--record", str(db), script("sleeps.py")]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=10)
    assert "signalled" in err, err
    assert "backward done" not in out  # python would not have gone on either
    assert process.returncode == plain(name) == -getattr(signal, name), err
    status = 128 - process.returncode
    written = json.loads(report.read_text())
    assert written["exit_status"] == status
    assert [p["index"] for p in written["passes"]] == [0]  # the pass the signal landed in was written
    recording = Recording(str(db))
    try:
        assert recording.run().exit_status == status
        assert [p.index for p in recording.passes()] == [0]
        assert recording.damage == []
    finally:
        recording.close()
