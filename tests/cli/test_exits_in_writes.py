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
from pathlib import Path

import pytest

from tests.cli.test_exits import TIMEOUT, plain
from tests.helpers import script

from gradtui.record.reader import Recording

pytestmark = pytest.mark.timeout(240)

LAUNCHER = """
import os, signal, sys
from gradtui.model import events as ev
site, signum = sys.argv[1], getattr(signal, sys.argv[2])
wanted = object
if site == "start":
    from gradtui.record.store import Recorder as owner
    name, wanted = "_on", ev.ScriptStarted
elif site == "record":
    from gradtui.record.store import Recorder as owner
    name = "_pass_finished"
else:
    from gradtui.model.report import JsonStream as owner
    name = "add_pass"
write = getattr(owner, name)
fired = []

def signalled(self, *args):
    if not fired and isinstance(args[0], wanted):
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
write of a finished pass (the Recorder's lock held), `report` inside the report's (JsonStream),
`start` inside the recording's write of the run's start (before the script's first line)."""

WRITES = [("record", "SIGTERM"), ("record", "SIGINT"), ("report", "SIGTERM"), ("report", "SIGINT")]


def _signalled_run(site: str, name: str, report: Path, db: Path) -> tuple[int, str, str]:
    """Run sleeps.py headless with a report and a recording, signalled from inside `site`'s
    write; its returncode, stdout and stderr."""
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
    return process.returncode, out, err


def _ended(report: Path, db: Path, status: int, passes: list[int]) -> None:
    """The report and the recording say the run ended with `status`, after `passes`; the
    recording opens undamaged."""
    written = json.loads(report.read_text())
    assert written["exit_status"] == status
    assert [p["index"] for p in written["passes"]] == passes
    recording = Recording(str(db))
    try:
        assert recording.run().exit_status == status
        assert [p.index for p in recording.passes()] == passes
        assert recording.damage == []
    finally:
        recording.close()


@pytest.mark.parametrize(("site", "name"), WRITES)
def test_a_signal_inside_a_pass_write_ends_the_run_as_python(site, name, tmp_path):
    report, db = tmp_path / "report.json", tmp_path / "run.db"
    code, out, err = _signalled_run(site, name, report, db)
    assert "backward done" not in out  # python would not have gone on either
    assert code == plain(name) == -getattr(signal, name), err
    _ended(report, db, 128 - code, [0])  # the pass the signal landed in was written


def test_ctrl_c_inside_the_runs_first_write_ends_it_before_the_scripts_first_line(tmp_path):
    report, db = tmp_path / "report.json", tmp_path / "run.db"
    code, out, err = _signalled_run("start", "SIGINT", report, db)
    assert "ready" not in out
    assert code == plain("SIGINT") == -signal.SIGINT, err
    assert err.splitlines()[-1] == "KeyboardInterrupt"
    assert 'File "' not in err  # no frame: gradtui's are not the script's, and it ran none
    _ended(report, db, 128 - code, [])
