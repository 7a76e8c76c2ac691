"""What `gradtui --headless -c continue` imports before the script runs, and after a pass (issue
20's whole-process row): networkx (~50 ms), sqlite3, the agent's server and the wire's codec,
fingerprints, the recording and the UI stay out of a run that does not use them. Each is checked
in `sys.modules` as the script sees it, in a real `python -m gradtui` process. (msgspec is in:
every Stats is a msgspec Struct, and after torch it adds ~3 ms, uuid and decimal, to the start.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.timeout(120)

NEVER = (
    "sqlite3",
    "textual",
    "rich",
    "gradtui.agent.server",
    "gradtui.wire.codec",
    "gradtui.wire.protocol",
    "gradtui.engine.fingerprints.values",
    "gradtui.engine.fingerprints.sketch",
    "gradtui.engine.why",
    "gradtui.record",
    "gradtui.ui",
    "gradtui.distributed",
)
"""Loaded by no `--headless -c continue` run without --record, --fingerprints, --against or --listen."""

AT_START = (*NEVER, "networkx")
"""Not loaded yet when the script starts: networkx comes when a client reads a captured graph."""

MARK = "modules:"

SCRIPT = """\
import sys, json
WATCHED = {watched!r}
def loaded():
    return sorted(w for w in WATCHED if any(m == w or m.startswith(w + ".") for m in sys.modules))
print({mark!r}, json.dumps(loaded()))
if {backward!r}:
    import torch
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    (x * 3).sum().backward()  # a second pass: the first is hooked (its pause), this one runs unhooked
    print({mark!r}, json.dumps(loaded()))
"""


def loaded_in_script(tmp_path, backward: bool, *options: str) -> list[list[str]]:
    """The watched modules loaded at each of the script's checkpoints under `gradtui --headless`."""
    path = tmp_path / "tiny.py"
    path.write_text(SCRIPT.format(watched=AT_START, mark=MARK, backward=backward))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "gradtui", "--headless", "-c", "continue", *options, str(path)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line[len(MARK) :]) for line in done.stdout.splitlines() if line.startswith(MARK)]


def test_the_script_starts_with_none_of_what_a_continue_run_does_not_use(tmp_path):
    assert loaded_in_script(tmp_path, False) == [[]]


def test_a_continue_run_never_builds_a_networkx_graph(tmp_path):
    """The first pass pauses (its node printed from the lazy graph's NodeInfo): no networkx."""
    start, after = loaded_in_script(tmp_path, True)
    assert start == after == []


def test_a_report_needs_no_database_and_no_wire(tmp_path):
    start, after = loaded_in_script(tmp_path, True, "--report", str(tmp_path / "report.json"))
    assert start == [] and after == ["networkx"]  # the report reads the graph
    assert json.loads((tmp_path / "report.json").read_text())["passes"]


def test_a_recording_that_cannot_be_opened_is_refused_with_its_own_option(tmp_path, monkeypatch, capsys):
    """sqlite3 is imported only with --record: its errors are still a one-line refusal, naming --record."""
    import sqlite3

    from gradtui.cli.main import main
    from gradtui.record import store
    from tests.helpers import example

    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(store, "Recorder", refuse)
    path = tmp_path / "run.db"
    assert main(["--headless", "--record", str(path), example("chain.py")]) == 2
    err = capsys.readouterr().err
    assert err == f"gradtui: cannot write --record {path}: unable to open database file\n"
