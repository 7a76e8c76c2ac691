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

from gradtui.engine.process.exits import IGNORED_INTERRUPT
from gradtui.record.reader import Recording
from tests.helpers import script
from tests.processes import PROCESS_TIMEOUT, plain_exit_status

pytestmark = pytest.mark.timeout(240)

LAUNCHER = """
import os, signal, sys
from gradtui.protocol import events as ev
site, signum = sys.argv[1], getattr(signal, sys.argv[2])
wanted = object
if site == "start":
    from gradtui.record.store import Recorder as owner
    name, wanted = "_on", ev.ScriptStarted
elif site == "record":
    from gradtui.record.store import Recorder as owner
    name = "_pass_finished"
elif site == "finish":
    from gradtui.record.store import Recorder as owner
    name, wanted = "_on", ev.ScriptFinished
elif site == "close":
    from gradtui.protocol.report import JsonStream as owner
    name = "close"
else:
    from gradtui.protocol.report import JsonStream as owner
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
`start` inside the recording's write of the run's start (before the script's first line), `finish`
inside its write of the run's end (after the script's last line), `close` inside the report's last
write (its tail: the exit status), after the runner."""

WRITES = [("record", "SIGTERM"), ("record", "SIGINT"), ("report", "SIGTERM"), ("report", "SIGINT")]


def _signalled_run(
    site: str,
    name: str,
    report: Path,
    db: Path,
    the_script: str = "sleeps.py",
    mode: tuple[str, ...] = ("--headless", "-c", "continue"),
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """Run `the_script` (headless unless `mode` says otherwise) with a report and a recording,
    signalled from inside `site`'s write; its returncode, stdout and stderr."""
    command = [
        sys.executable,
        "-c",
        LAUNCHER,
        site,
        name,
        *mode,
        "--report",
        str(report),
        "--record",
        str(db),
        script(the_script),
    ]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=PROCESS_TIMEOUT)
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
    assert code == plain_exit_status(name) == -getattr(signal, name), err
    _ended(report, db, 128 - code, [0])  # the pass the signal landed in was written


def test_ctrl_c_inside_the_runs_first_write_ends_it_before_the_scripts_first_line(tmp_path):
    report, db = tmp_path / "report.json", tmp_path / "run.db"
    code, out, err = _signalled_run("start", "SIGINT", report, db)
    assert "ready" not in out
    assert code == plain_exit_status("SIGINT") == -signal.SIGINT, err
    assert err.splitlines()[-1] == "KeyboardInterrupt"
    assert 'File "' not in err  # no frame: gradtui's are not the script's, and it ran none
    _ended(report, db, 128 - code, [])


AFTER_THE_END = """
import atexit, os, runpy, signal, sys
signum = getattr(signal, sys.argv[1])
atexit.register(lambda: os.kill(os.getpid(), signum))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
"""`python -c AFTER_THE_END SIGNAL script.py`: plain python, signalled after the script's last line
(in an atexit function), where gradtui's last words run: the oracle for the rows below."""

_after: dict[tuple[str, str], int] = {}


def plain_after_the_end(name: str, the_script: str) -> int:
    """The returncode of plain python signalled with `name` once `the_script` has ended (once per case)."""
    if (name, the_script) not in _after:
        done = subprocess.run(
            [sys.executable, "-c", AFTER_THE_END, name, script(the_script)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT,
        )
        _after[name, the_script] = done.returncode
    return _after[name, the_script]


LAST_WORDS = [("finish", "SIGINT"), ("close", "SIGINT"), ("close", "SIGHUP")]
"""Where the signal lands after the script's end, and which (a SIGTERM in the ScriptFinished fan-out
is test_a_signal_inside_a_pass_write's case: deferred there already)."""


@pytest.mark.parametrize(("site", "name"), LAST_WORDS)
def test_a_signal_after_the_scripts_end_ends_as_python_and_keeps_how_the_script_ended(site, name, tmp_path):
    report, db = tmp_path / "report.json", tmp_path / "run.db"
    code, out, err = _signalled_run(site, name, report, db, "exit3.py")
    # python keeps the script's status (3) after a Ctrl-C in its atexit functions, dies of SIGTERM / SIGHUP
    assert code == plain_after_the_end(name, "exit3.py") == (3 if name == "SIGINT" else -getattr(signal, name)), err
    _ended(report, db, 3, [0])  # how the script ended, whatever came after it
    after = err.split("signalled\n", 1)[1]
    if name == "SIGINT":  # one line of gradtui's own, no traceback
        assert after == IGNORED_INTERRUPT + "\n"
    else:
        assert "Traceback" not in after


@pytest.mark.parametrize(("site", "name"), [("finish", "SIGINT"), ("close", "SIGTERM")])
def test_a_listen_agent_signalled_in_its_last_words_ends_as_python_and_removes_its_runtime_file(site, name, tmp_path):
    runtime, report, db = tmp_path / "runtime", tmp_path / "report.json", tmp_path / "run.db"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(runtime)}
    code, out, err = _signalled_run(
        site, name, report, db, "no_backward.py", ("--listen", "127.0.0.1:0"), env
    )  # no pause: it ends with no client
    assert code == plain_after_the_end(name, "no_backward.py") == (0 if name == "SIGINT" else -signal.SIGTERM), err
    _ended(report, db, 0, [])
    assert list(runtime.iterdir()) == []
    recording = Recording(str(db))
    try:  # the script's stream has the script's lines only: gradtui's note went to the agent's stderr
        lines = [line.text for line in recording.output() if line.text != "signalled\n"]  # but the launcher's
        assert lines == ["forward only 2.0\n"]
    finally:
        recording.close()
    if name == "SIGINT":
        assert err.splitlines()[-1] == IGNORED_INTERRUPT and "Traceback" not in err
